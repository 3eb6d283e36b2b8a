"""``costmodel sweep MODEL --grid d=1024:8192:1024 --metric flops.training``: formulas over a grid."""

from __future__ import annotations

import argparse
import itertools
import sys

from ._common import add_model_args, dump_json, positive_int, sci, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="evaluate derived formulas over a grid of configs (vectorised)",
                       description="Derive a model's formulas once, compile them, and evaluate them over the "
                                   "Cartesian product of the grids. Numbers are float64 (exact up to 2^53) "
                                   "unless --exact.")
    add_model_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="NAME=SPEC",
                   help="a symbol and its values: START:STOP:STEP (STOP included) or A,B,C; repeat for a product")
    p.add_argument("--metric", action="append", default=[], metavar="KEY",
                   help="a quantity such as flops.training or memory_bytes.total (repeatable; "
                        "default flops.training)")
    p.add_argument("--batch", type=positive_int("--batch"), help="sequences per step, B (default 1)")
    p.add_argument("--seq", type=positive_int("--seq"), help="tokens per sequence, T (default: the model's context)")
    p.add_argument("--exact", action="store_true", help="exact Python integers (slower) instead of float64")
    p.add_argument("--budget", metavar="FLOPS", help="also report the compute-optimal N and D for this FLOP budget "
                   "(C = 6ND, D = RATIO·N) and the swept config closest to it")
    p.add_argument("--ratio", default="20", metavar="R", help="tokens per parameter for --budget (Chinchilla: 20)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="one JSON object of columns")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..sweep import parse_grid, sweep

    grid = dict(parse_grid(g) for g in args.grid)
    metrics = list(dict.fromkeys(args.metric or ["flops.training"]))
    extra = ["params.non_embedding", "flops.training", "tokens.per_step"] if args.budget else []
    config = settings(args)
    if args.batch is not None:
        config["B"] = args.batch
    if args.seq is not None:
        config["T"] = args.seq
    cols = sweep(args.model, grid, list(dict.fromkeys(metrics + extra)), settings=config, exact=args.exact)
    shown = [*grid, *metrics, "valid"]
    values = {k: _column(cols[k]) for k in shown}  # Python numbers, column by column (fast for 1e6 rows)
    if args.json:
        out = {"model": args.model, "exact": args.exact, "columns": values}
        if args.budget:
            out["optimal"] = _optimal(cols, args, grid)
        print(dump_json(out))
        return 0
    if args.csv:
        row = ",".join(["%s"] * len(shown)) + "\n"  # one C-level format for all rows: fast for 1e6 rows
        sys.stdout.write(",".join(shown) + "\n" + (row * len(values["valid"])) % tuple(
            itertools.chain.from_iterable(zip(*(values[k] for k in shown)))))
    else:
        rows = zip(*([f"{_cell(v):>14}" for v in values[k]] for k in shown))
        sys.stdout.write("  ".join(f"{k:>14}" for k in shown) + "\n" + "".join("  ".join(r) + "\n" for r in rows))
    if args.budget:
        opt = _optimal(cols, args, grid)
        print(f"compute-optimal for C = {sci(opt['budget'])} FLOPs at {opt['tokens_per_param']} tokens/param "
              f"(C = 6ND): N = {sci(opt['params'])}, D = {sci(opt['tokens'])}; closest swept config: "
              + " ".join(f"{k}={v}" for k, v in opt["closest"].items()),
              file=sys.stderr if args.csv else sys.stdout)
    return 0


def _optimal(cols: dict, args: argparse.Namespace, grid: dict) -> dict:
    from ..sweep import chinchilla_optimal, closest_to_optimal

    opt = chinchilla_optimal(args.budget, args.ratio)
    i = closest_to_optimal(cols, opt["budget"], opt["tokens_per_param"])
    return {"budget": float(opt["budget"]), "tokens_per_param": float(opt["tokens_per_param"]),
            "params": float(opt["params"]), "tokens": float(opt["tokens"]),
            "closest": {k: int(cols[k][i]) for k in grid}}


def _column(a) -> list:
    """A column as Python numbers: floats that hold whole numbers exactly (< 2^53) as ints, exact
    values as ints (or their fraction as a string), booleans as booleans."""
    import numpy as np

    if a.dtype.kind == "f":
        whole = np.isfinite(a) & (a == np.floor(a)) & (np.abs(a) < 2.0**53)
        if whole.all():
            return a.astype(np.int64).tolist()
        return [int(v) if w else v for v, w in zip(a.tolist(), whole.tolist())]
    if a.dtype.kind in "iub":
        return a.tolist()
    return [v if isinstance(v, int) else str(v) for v in a.tolist()]


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:,}" if isinstance(v, int) and abs(v) < 10**9 else sci(v) if isinstance(v, (int, float)) else str(v)
