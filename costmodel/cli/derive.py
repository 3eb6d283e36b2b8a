"""``costmodel derive ARCH``: the symbolic formulas behind the numbers."""

from __future__ import annotations

import argparse

from ..latex import equations, ops_table
from ..ops import Conventions
from ..report import derive
from ._common import add_model_args, dump_json, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("derive", help="symbolic formulas of an architecture",
                       description="Symbolic formulas (parameters, FLOPs, bytes, memory) of an architecture.")
    add_model_args(p)
    p.add_argument("--format", default="text", choices=["text", "latex", "json"])
    p.add_argument("--causal", default="full", choices=["full", "half"])
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    r = derive(args.model, settings=settings(args), conventions=Conventions(causal=args.causal))
    if args.format == "json":
        ops = {name: {**row, "intensity": str(row["intensity"])} for name, row in r["ops"].items()}
        print(dump_json({**r, "expressions": {k: str(v) for k, v in r["expressions"].items()}, "ops": ops}))
    elif args.format == "latex":
        print(f"% costmodel derive {args.model}: symbols " + ", ".join(f"{k} = {v}" for k, v in r["symbols"].items()))
        print(equations(r["expressions"]))
        print(ops_table(r["ops"]))
    else:
        width = max(map(len, r["expressions"]))
        print(f"{r['model']} ({r['family']}); symbols: " + ", ".join(r["symbols"]))
        for k, v in r["expressions"].items():
            print(f"{k:<{width}} = {v}")
        print("\nper op (forward, one run; count = runs per step):")
        for name, row in r["ops"].items():
            print(f"  {name:<28} {row['kind']:<12} x{row['count']!s:<4} flops {row['flops']}")
    return 0
