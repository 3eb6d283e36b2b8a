"""``costmodel sweep MODEL --grid d=1024:8192:1024 --metric flops.training``: formulas over a grid."""

from __future__ import annotations

import argparse
import sys

import costmodel
from costmodel import CostModelError

from ._common import (
    add_chunk_args,
    add_counting_args,
    add_memory_args,
    add_model_args,
    add_step_args,
    chunking,
    options,
    sci,
    settings,
)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="evaluate derived formulas over a grid of configs (vectorised)",
        description="Derive a model's formulas once, compile them, and evaluate them over the "
        "Cartesian product of the grids. Numbers are float64 (exact up to 2^53) "
        "unless --exact (CSV and JSON lines write a metric past 2^53 exactly where it is integer arithmetic); "
        "the memory and layout options apply to every point.",
    )
    add_model_args(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="a symbol and its values: START:STOP:STEP (STOP included) or A,B,C; repeat for a product",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="KEY",
        help="a quantity such as flops.training or memory_bytes.total (repeatable; default flops.training)",
    )
    add_step_args(p)
    add_counting_args(p)
    add_memory_args(p)
    p.add_argument("--exact", action="store_true", help="exact Python integers (slower) instead of float64")
    p.add_argument(
        "--budget",
        metavar="FLOPS",
        help="also report the compute-optimal N and D for this FLOP budget "
        "(C = 6ND, D = RATIO·N) and the swept config closest to it",
    )
    p.add_argument("--ratio", default="20", metavar="R", help="tokens per parameter for --budget (Chinchilla: 20)")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="a chart of the first metric against the first grid axis, one line "
        "per value of the second (.png, .svg or .pdf; needs matplotlib)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout (as --format csv)")
    fmt.add_argument("--json", action="store_true", help="one JSON object of columns (held in memory)")
    fmt.add_argument(
        "--format",
        choices=["table", "csv", "jsonl", "npy", "parquet", "json"],
        help="streamed chunk by chunk, memory flat in the grid's size: csv, jsonl (one object per "
        "config), npy (one record per config), parquet (needs pip install 'costmodel[parquet]')"
        "; json: as --json; default: a table",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (atomically: complete or not at all) instead of stdout"
    )
    add_chunk_args(p, "configs", 131072)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    metrics = list(dict.fromkeys(args.metric or ["flops.training"]))
    fmt = "csv" if args.csv else "json" if args.json else args.format or "table"
    chunks = chunking(args)
    out = None
    if args.output is None:
        if fmt in ("npy", "parquet") and sys.stdout.isatty():
            raise CostModelError(f"--format {fmt}: binary output to a terminal; expected --output FILE")
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None) or _Text(sys.stdout)
    r = costmodel.sweep(
        args.model,
        args.grid,
        metrics,
        settings=settings(args),
        exact=args.exact,
        budget=args.budget,
        ratio=args.ratio,
        format=fmt,
        output=args.output,
        stream=out,
        **chunks,
        cell=_cell,
        options=options(args),
    )
    if out is not None:
        out.flush()
    if args.plot:  # a chart needs the columns: the same sweep once more, held in memory (within the budget)
        held = costmodel.sweep(
            args.model,
            args.grid,
            metrics,
            settings=settings(args),
            exact=args.exact,
            workers=chunks["workers"],
            dask=chunks["dask"],
            options=options(args),
        )
        held.plot(args.plot, metrics[0])
        print(f"wrote the sweep chart to {args.plot}", file=sys.stderr)
    if r.optimal is not None and fmt != "json":
        o = r.optimal
        num = lambda v: sci(v) if isinstance(v, (int, float)) else str(v)  # noqa: E731 (a float or why not)
        print(
            f"compute-optimal for C = {num(o['budget'])} FLOPs at {o['tokens_per_param']} tokens/param "
            f"(C = 6ND): N = {num(o['params'])}, D = {num(o['tokens'])}; closest swept config: "
            + " ".join(f"{k}={v}" for k, v in o["closest"].items()),
            file=sys.stdout if fmt == "table" and args.output is None else sys.stderr,
        )
    return 0


class _Text:
    """A text stream (a test's StringIO) taking the bytes of a text format."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, data) -> None:  # bytes, or the uint8 array of a text chunk (writers.text)
        self.stream.write(memoryview(data).tobytes().decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) and abs(v) < 10**9 else sci(v) if isinstance(v, (int, float)) else str(v)
