"""``costmodel fit MODEL --memory SIZE``: the largest batch (or sequence/context) that fits one device."""

from __future__ import annotations

import argparse

from ..errors import CostModelError
from ..fit import fit, parse_size
from ._common import add_model_args, dump_json, nbytes, positive_int, settings
from ._memory import add_memory_args, memory_options


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="largest batch or context that fits a device's memory",
                       description="Largest micro-batch per device (or sequence / inference context) that fits a "
                                   "memory size, or which component overflows.")
    add_model_args(p)
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--memory", metavar="SIZE", help="device memory: 80GB, 80GiB or bytes")
    size.add_argument("--hardware", metavar="NAME", help="a device of the hardware table (its memory size)")
    p.add_argument("--solve", default="batch", choices=["batch", "seq"],
                   help="what to maximise: the micro-batch per device, or the sequence (context with --inference)")
    p.add_argument("--by", default="peak", choices=["peak", "total"],
                   help="compare the liveness peak (default, where modelled) or the sum of components")
    p.add_argument("--batch", type=positive_int("--batch"), help="global batch when solving for --seq")
    p.add_argument("--seq", type=positive_int("--seq"), help="tokens per sequence when solving for --batch")
    add_memory_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def memory_size(args: argparse.Namespace) -> int:
    """Bytes from --memory, or the memory of the --hardware device (when the hardware table is installed)."""
    if args.memory is not None:
        return parse_size(args.memory)
    try:
        from .. import hardware
    except ImportError:
        raise CostModelError(f"--hardware {args.hardware}: no hardware table in this build; "
                             "expected --memory SIZE (e.g. --memory 80GB)") from None
    return int(hardware.device(args.hardware).memory_bytes)


def run(args: argparse.Namespace) -> int:
    options = memory_options(args)
    options.pop("micro_batch")
    r = fit(args.model, memory_size(args), solve=args.solve, batch=args.batch, seq=args.seq,
            settings=settings(args), by=args.by, policy=args.precision, optimizer=args.optimizer, **options)
    if args.json:
        print(dump_json(r))
        return 0
    what = "micro-batch per device" if args.solve == "batch" else ("context" if args.inference else "sequence")
    print(f"{r['model']} in {nbytes(r['memory'])} per device, compared by {r['by']}")
    if not r["fits"]:
        print(f"does not fit even at {what} 1: {r['overflow']} overflows")
        for k, v in r["at_one"].items():
            if v is not None:
                print(f"  {k:<12} {nbytes(v)}")
        return 0
    print(f"largest {what}: {r['largest']:,}" + (f" (global batch {r['global_batch']:,})" if "global_batch" in r else ""))
    for k, v in r["at_largest"].items():
        if v is not None:
            print(f"  {k:<12} {nbytes(v)}")
    print(f"one more overflows at: {r['overflow_next']}")
    if "formula" in r:
        print(r["formula"])
    return 0
