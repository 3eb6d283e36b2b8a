"""Helpers shared by the subcommands: settings, number formatting, JSON."""

from __future__ import annotations

import argparse
import json

import sympy

from ..errors import CostModelError
from ..expr import parse_int, parse_number, parse_setting


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="a preset or family name (see 'costmodel models'), a Hugging Face config.json "
                        "(read as data, no network), or path/to/file.py:builder, a function of yours that "
                        "returns a GraphBuilder graph (the file is executed as Python: only load files you trust)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                   help="set a symbol (d=4096) or a builder option (d_ff=8*d/3, tied=false); "
                        "values are numbers or expressions of symbols with + - * / ^ ( )")


def settings(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    for text in args.settings:
        name, value = parse_setting(text)
        if isinstance(value, sympy.Expr) and value.is_Integer:
            value = int(value)
        out[name] = value
    return out


def positive_int(what: str):
    """An argparse ``type`` that accepts whole numbers written as 4096 or 3e11."""
    def convert(text: str) -> int:
        try:
            return parse_int(text, "value")
        except CostModelError as exc:  # argparse would replace a ValueError's message (it names the flag itself)
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None
    convert.__name__ = what
    return convert


def dump_json(obj: object) -> str:
    """JSON with sympy numbers as exact ints and expressions as strings."""
    def default(o: object) -> object:
        if isinstance(o, sympy.Integer):
            return int(o)
        if isinstance(o, sympy.Basic):
            return str(o)
        raise TypeError(f"not JSON serialisable: {type(o).__name__}")
    return json.dumps(obj, indent=2, default=default)


def sci(x: int | float) -> str:
    """``3.131e+23``-style; whole numbers under a million in full (``1,001``)."""
    if float(x).is_integer() and abs(x) < 1e6:
        return f"{int(x):,}"
    return f"{float(x):.3g}" if abs(x) < 1e5 else f"{float(x):.3e}"


def nbytes(x: int) -> str:
    """Bytes with the unit named: decimal GB (1e9) and binary GiB (2^30)."""
    return f"{x / 1e9:,.2f} GB ({x / 2**30:,.2f} GiB)"


def duration(seconds: float) -> str:
    """Seconds in s, days or years (365.25 days)."""
    if seconds < 2 * 86400:
        return f"{seconds:,.3g} s"
    days = seconds / 86400
    if days < 2 * 365.25:
        return f"{days:,.1f} days ({seconds:.3g} s)"
    return f"{days / 365.25:,.1f} years ({seconds:.3g} s)"


def positive_number(what: str):
    """An argparse ``type`` for an exact positive number (``400``, ``0.45``)."""
    def convert(text: str) -> sympy.Rational:
        try:
            value = parse_number(text, what)
        except CostModelError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what}: expected a positive number, received {text!r}")
        return value
    convert.__name__ = what
    return convert


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """``--hardware --devices --achieved-tflops --mfu`` (time and utilisation)."""
    g = p.add_argument_group("time (with --hardware)")
    g.add_argument("--hardware", metavar="NAME", help="a device of 'costmodel hardware', or a .toml/.json file")
    g.add_argument("--devices", type=positive_int("--devices"), default=1, help="devices N (default 1)")
    rate = g.add_mutually_exclusive_group()
    rate.add_argument("--achieved-tflops", type=positive_number("--achieved-tflops"), metavar="X",
                      help="TFLOP/s each device executes (default: the roofline bound)")
    rate.add_argument("--mfu", type=positive_number("--mfu"), metavar="F", help="model FLOPs utilisation, 0 < F <= 1")
    rate.add_argument("--tokens-per-s", type=positive_number("--tokens-per-s"), metavar="R",
                      help="a measured throughput of all devices together: gives the MFU")


def hardware_options(args: argparse.Namespace) -> dict[str, object]:
    """The options :func:`costmodel.report.estimate` reads for its ``time.*`` keys."""
    achieved = None if args.achieved_tflops is None else args.achieved_tflops * 10**12
    return {"hardware": args.hardware, "devices": args.devices, "achieved_flops": achieved, "mfu": args.mfu,
            "tokens_per_s": args.tokens_per_s}
