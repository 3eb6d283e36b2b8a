"""``costmodel trace FILE.py:factory``: trace a PyTorch module into a costmodel graph and show its formulas.

The factory returns ``(module, example_inputs)`` or ``(module, example_inputs, dynamic)``; ``--dynamic
B,T`` names the leading dimensions of every input instead. Needs ``pip install costmodel[torch]``.
"""

from __future__ import annotations

import argparse
import json

import costmodel

from ._common import add_counting_args, add_memory_args, add_step_args, options
from .derive import show


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="trace a PyTorch module (torch.export) into a costmodel graph",
        description="Export a PyTorch module with symbolic batch and sequence sizes and map its ATen "
        "ops to costmodel ops: formulas in B and T, and with --batch/--seq the numbers. "
        "The file is executed as Python: only trace files you trust.",
    )
    p.add_argument(
        "factory",
        metavar="FILE.py:FACTORY",
        help="a function returning (module, example_inputs) or (module, example_inputs, dynamic)",
    )
    p.add_argument(
        "--dynamic",
        metavar="NAMES",
        help="symbols for the leading dimensions of every input, e.g. B,T (default: the factory's)",
    )
    p.add_argument(
        "--max",
        dest="maxima",
        action="append",
        default=[],
        metavar="NAME=N",
        help="the largest value of a symbol (a position table bounds T): --max T=2048",
    )
    p.add_argument("--no-fold", action="store_true", help="keep every layer (do not fold repeated layers)")
    p.add_argument("--format", default="text", choices=["text", "latex", "json"])
    add_step_args(p)
    add_counting_args(p)
    add_memory_args(p)
    p.set_defaults(run=run)


def _ranges(maxima: list[str]) -> dict[str, tuple[None, int]]:
    out = {}
    for text in maxima:
        name, eq, value = text.partition("=")
        if not eq or not name.strip().isidentifier() or not value.strip().isdigit():
            raise costmodel.CostModelError(f"--max: expected NAME=N such as T=2048, received {text!r}")
        out[name.strip()] = (None, int(value))
    return out


def run(args: argparse.Namespace) -> int:
    m = costmodel.trace(args.factory, dynamic=args.dynamic, ranges=_ranges(args.maxima) or None, fold=not args.no_fold)
    opts = options(args)
    r = costmodel.derive(m, options=opts)
    info = m.graph.graph["traced"]
    numbers = costmodel.estimate(m, options=opts) if (args.batch or args.seq) else None
    if args.format == "json":
        out = {"trace": info, "derive": json.loads(r.to_json())}
        if numbers is not None:
            out["estimate"] = json.loads(numbers.to_json())
        print(json.dumps(out, indent=2))
        return 0
    folded = ", ".join(f"{b} × {n}" for b, n in info["folded"].items()) or "none"
    print(
        f"traced {info['module']}: {info['aten_nodes']} ATen nodes, {sum(1 for _ in m.graph)} graph nodes; "
        f"folded: {folded}; export {info['export_s']} s"
    )
    if info["unused_parameters"]:
        print(f"parameters the forward never reads (counted, no FLOPs): {', '.join(info['unused_parameters'])}")
    show(r, args.format, f"costmodel trace {args.factory}")
    if numbers is not None:
        p, f = numbers["params"], numbers["flops"]
        print(
            f"\nat {', '.join(f'{k}={v}' for k, v in numbers['config'].items())}: params {p['total']:,}; "
            f"matmul FLOPs forward {f['matmul']['forward']:,}, training {f['matmul']['training']:,}"
        )
    return 0
