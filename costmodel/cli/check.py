"""``costmodel check MODEL [--against FILE.py:FACTORY]``: property-test a model's formulas at drawn sizes.

Each property runs at up to ``--examples`` sizes hypothesis draws (valid for the model: heads divide the
width, ...) and prints pass, or the smallest failing sizes it shrank to with each differing term. Exit 1 when
a property fails, 2 on bad input. Needs ``pip install 'costmodel[verify]'`` (and ``costmodel[torch]`` for
``--against``).
"""

from __future__ import annotations

import argparse

import costmodel

from ._common import add_model_args, settings

TERMS = ("params.total", "flops.matmul.forward", "flops.matmul.training", "memory_bytes.activations")


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="property-test a model's formulas (op by op, invariants, against a PyTorch module)",
        description="Check a model at sizes drawn by hypothesis: every derived term against the graph counted "
        "op by op at numbers, the invariants (linear in B, grows with L, backward = 2 x forward for matmuls, "
        "parts sum to totals...), and with --against a PyTorch module built at the same sizes (numel, "
        "FlopCounterMode on meta, saved_tensors_hooks bytes). Exit 1 when a property fails.",
    )
    add_model_args(p)
    p.add_argument(
        "--against",
        metavar="FILE.py:FACTORY",
        help="a function factory(**sizes) -> (module, example_inputs), called with each drawn size by its "
        "symbol's name (B, T, d, ...); the file is executed as Python. 'transformers': a family's config.json "
        "(or a family name) against the transformers module of the same config, the class the family describes "
        "(causal LM, masked LM, encoder-decoder, image classifier; params, matmul FLOPs)",
    )
    p.add_argument("--examples", type=int, default=20, metavar="N", help="sizes drawn per property (default 20)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="hypothesis' seed (default 0: reproducible)")
    p.add_argument(
        "--terms",
        metavar="TERMS",
        help=f"terms compared with --against, comma-separated (default all: {','.join(TERMS)})",
    )
    p.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="NAME=LO:HI",
        help="draw a symbol from LO..HI (default small: B 1..4, T 1..16, L 1..3, most others 1..32)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object: every property, its sizes, its result")
    p.set_defaults(run=run)


def _ranges(texts: list[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for text in texts:
        name, eq, span = text.partition("=")
        lo, colon, hi = span.partition(":")
        if not (eq and colon and name.strip().isidentifier() and lo.strip().isdigit() and hi.strip().isdigit()):
            raise costmodel.CostModelError(f"--range: expected NAME=LO:HI such as d=8:64, received {text!r}")
        out[name.strip()] = (int(lo), int(hi))
    return out


def run(args: argparse.Namespace) -> int:
    if args.examples < 1:
        raise costmodel.CostModelError(f"--examples {args.examples}: expected a positive number of sizes")
    if args.seed < 0:
        raise costmodel.CostModelError(f"--seed {args.seed}: expected a whole number >= 0")
    kwargs = {}
    if args.terms is not None:
        kwargs["terms"] = tuple(t.strip() for t in args.terms.split(",") if t.strip())
    report = costmodel.check(
        args.model,
        against=args.against,
        examples=args.examples,
        seed=args.seed,
        settings=settings(args),
        ranges=_ranges(args.ranges) or None,
        via=args.via,
        **kwargs,
    )
    print(report.to_json() if args.json else report.text())
    return 0 if report.passed else 1
