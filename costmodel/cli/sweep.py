"""``costmodel sweep MODEL --grid d=1024:8192:1024 --metric flops.training``: formulas over a grid."""

from __future__ import annotations

import argparse
import itertools
import sys

import costmodel

from ._common import add_counting_args, add_memory_args, add_model_args, add_step_args, options, sci, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="evaluate derived formulas over a grid of configs (vectorised)",
                       description="Derive a model's formulas once, compile them, and evaluate them over the "
                                   "Cartesian product of the grids. Numbers are float64 (exact up to 2^53) "
                                   "unless --exact; the memory and layout options apply to every point.")
    add_model_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="NAME=SPEC",
                   help="a symbol and its values: START:STOP:STEP (STOP included) or A,B,C; repeat for a product")
    p.add_argument("--metric", action="append", default=[], metavar="KEY",
                   help="a quantity such as flops.training or memory_bytes.total (repeatable; "
                        "default flops.training)")
    add_step_args(p)
    add_counting_args(p)
    add_memory_args(p)
    p.add_argument("--exact", action="store_true", help="exact Python integers (slower) instead of float64")
    p.add_argument("--budget", metavar="FLOPS", help="also report the compute-optimal N and D for this FLOP budget "
                   "(C = 6ND, D = RATIO·N) and the swept config closest to it")
    p.add_argument("--ratio", default="20", metavar="R", help="tokens per parameter for --budget (Chinchilla: 20)")
    p.add_argument("--plot", metavar="FILE", help="a chart of the first metric against the first grid axis, one line "
                                                  "per value of the second (.png, .svg or .pdf; needs matplotlib)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="one JSON object of columns")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    metrics = list(dict.fromkeys(args.metric or ["flops.training"]))
    r = costmodel.sweep(args.model, args.grid, metrics, settings=settings(args), exact=args.exact,
                        budget=args.budget, ratio=args.ratio, options=options(args))
    if args.plot:
        r.plot(args.plot, metrics[0])
        print(f"wrote the sweep chart to {args.plot}", file=sys.stderr)
    if args.json:
        print(r.to_json())
        return 0
    shown = [*r.grid, *metrics, "valid"]
    values = {k: r.column(k) for k in shown}  # Python numbers, column by column (fast for 1e6 rows)
    if args.csv:
        row = ",".join(["%s"] * len(shown)) + "\n"  # one C-level format for all rows: fast for 1e6 rows
        sys.stdout.write(",".join(shown) + "\n" + (row * len(values["valid"])) % tuple(
            itertools.chain.from_iterable(zip(*(values[k] for k in shown)))))
    else:
        rows = zip(*([f"{_cell(v):>14}" for v in values[k]] for k in shown))
        sys.stdout.write("  ".join(f"{k:>14}" for k in shown) + "\n" + "".join("  ".join(r) + "\n" for r in rows))
    if r.optimal is not None:
        opt = r.optimal
        print(f"compute-optimal for C = {sci(opt['budget'])} FLOPs at {opt['tokens_per_param']} tokens/param "
              f"(C = 6ND): N = {sci(opt['params'])}, D = {sci(opt['tokens'])}; closest swept config: "
              + " ".join(f"{k}={v}" for k, v in opt["closest"].items()),
              file=sys.stderr if args.csv else sys.stdout)
    return 0


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) and abs(v) < 10**9 else sci(v) if isinstance(v, (int, float)) else str(v)
