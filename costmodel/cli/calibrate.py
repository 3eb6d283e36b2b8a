"""``costmodel calibrate``: fit a device's efficiency curves and network tiers to measured kernel times."""

from __future__ import annotations

import argparse
import json

import costmodel


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit efficiency curves to a CSV of measured kernel times",
        description="Fit the GEMM curve, memory efficiency and network tiers of a device to a CSV "
        "of measured kernel times (columns kind,dtype,batch,m,n,k,bytes,group,tier,"
        "seconds; see costmodel.verbs.calibrate) and write a hardware file that "
        "--hardware takes.",
    )
    p.add_argument("csv", metavar="CSV", help="measured kernel times")
    p.add_argument(
        "--hardware",
        default="h100-sxm",
        metavar="BASE",
        help="the built-in device whose peaks and bandwidths the fit is on (default h100-sxm)",
    )
    p.add_argument("--name", metavar="NAME", help="the calibrated device's name (default BASE-calibrated)")
    p.add_argument("--source", metavar="TEXT", help="where the measurements come from (kept with the fit)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the hardware file here (.json) instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    table = costmodel.calibrate(args.csv, args.hardware, name=args.name, source=args.source or "", output=args.output)
    if not args.output:
        print(json.dumps(table, indent=2, allow_nan=False))
    return 0
