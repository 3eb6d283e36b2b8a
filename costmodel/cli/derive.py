"""``costmodel derive ARCH``: the symbolic formulas behind the numbers."""

from __future__ import annotations

import argparse

import costmodel

from ._common import add_counting_args, add_memory_args, add_model_args, options, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("derive", help="symbolic formulas of an architecture",
                       description="Symbolic formulas (parameters, FLOPs, bytes, memory) of an architecture: every "
                                   "number 'estimate' gives under the same options, as an expression.")
    add_model_args(p)
    p.add_argument("--format", default="text", choices=["text", "latex", "json"])
    add_counting_args(p)
    add_memory_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    r = costmodel.derive(args.model, settings=settings(args), options=options(args))
    if args.format == "json":
        print(r.to_json())
    elif args.format == "latex":
        print(f"% costmodel derive {args.model}: symbols " + ", ".join(f"{k} = {v}" for k, v in r["symbols"].items()))
        print(r.to_latex())
    else:
        shown = {k: v for k, v in r["expressions"].items() if len(str(v)) <= 2000}
        width = max(map(len, shown))
        print(f"{r['model']} ({r['family']}); symbols: " + ", ".join(r["symbols"]))
        for k, v in shown.items():
            print(f"{k:<{width}} = {v}")
        left = [k for k in r["expressions"] if k not in shown]
        if left:
            print(f"(too long to print here, see --format json: {', '.join(left)})")
        print("\nper op (forward, one run; count = runs per step):")
        for name, row in r["ops"].items():
            print(f"  {name:<28} {row['kind']:<12} x{row['count']!s:<4} flops {row['flops']}")
    return 0

