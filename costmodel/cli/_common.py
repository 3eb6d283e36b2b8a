"""What the subcommands share: the model and its settings, the option flags, number formatting.

Every option's flag is made from its one declaration (:meth:`costmodel.Options.flags`: the flag, how its text
is read, its choices and its help line), typed text is read by :meth:`costmodel.Options.parse`, and the CLI
imports nothing but the public API.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable

from costmodel import CostModelError, Options, units

#: the CLI says numbers as every report does
duration, nbytes, sci = units.duration, units.nbytes, units.sci


def add_model_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    """MODEL and ``--set``; ``optional``: MODEL may be left out (a command that has another source of one)."""
    p.add_argument(
        "model",
        metavar="MODEL",
        **({"nargs": "?"} if optional else {}),
        help="a preset or family name (see 'costmodel models'), a Hugging Face config.json "
        "(read as data, no network), or path/to/file.py:builder, a function of yours that "
        "returns a GraphBuilder graph (the file is executed as Python: only load files you trust)",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a symbol (d=4096) or a builder option (d_ff=8*d/3, tied=false); "
        "values are numbers or expressions of symbols with + - * / ^ ( )",
    )
    add_flags(p, "model")


def settings(args: argparse.Namespace) -> dict[str, str]:
    """``--set NAME=VALUE`` as a mapping of texts (read by the restricted parser when the model loads)."""
    out: dict[str, str] = {}
    for text in args.settings:
        name, eq, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name, re.ASCII) or not value:
            raise CostModelError(f"--set: expected NAME=VALUE such as d_ff=8*d/3, received {text!r}")
        out[name] = value
    return out


def typed(name: str, flag: str):
    """An argparse ``type`` reading ``flag``'s text as :meth:`Options.parse` reads option ``name``."""

    def convert(text: str) -> object:
        try:
            return Options.parse(name, text, what="value")
        except CostModelError as exc:  # argparse would replace a ValueError's message (it names the flag itself)
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None

    convert.__name__ = flag
    return convert


def options(args: argparse.Namespace, skip: Iterable[str] = ()) -> Options:
    """The :class:`Options` the parsed flags describe (flags a command lacks keep their defaults)."""
    given = {
        f.name: getattr(args, f.dest) * f.scale if f.scale != 1 else getattr(args, f.dest)
        for f in Options.flags()
        if f.name not in skip and getattr(args, f.dest, None) is not None
    }
    if given.get("overlap_comm") in ("none", ""):
        given["overlap_comm"] = ()
    return Options.make(**given)


def output_file(text: str) -> str:
    """An argparse ``type`` for a file the command writes: a name, not an empty string (which would be ignored)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, received {text!r}")
    return text


def add_flag(p, name: str, help: str | None = None, **fmt: object) -> None:
    """Add the flag of option ``name`` as declared once (:meth:`costmodel.Options.flags`); ``help`` replaces
    its declared line for this command, ``fmt`` fills the declared line's blanks (``{batch_default}``)."""
    f = next(f for f in Options.flags() if f.name == name)
    kw: dict[str, object] = {"help": help or f.help.format(**fmt)}
    if f.metavar:
        kw["metavar"] = f.metavar
    if f.takes == "choice":
        kw["choices"] = Options.choices(f.name)
    elif f.takes == "switch":
        kw.update(action=argparse.BooleanOptionalAction, default=None)
    elif f.takes == "on":
        kw.update(action="store_true", default=None)
    elif f.numbers is not None:
        kw.update(type=int, choices=list(f.numbers))
    elif f.read is not None:
        kw["type"] = typed(f.name, f.option)
    p.add_argument(f.option, **kw)


def add_flags(p: argparse.ArgumentParser, group: str, *, skip: Iterable[str] = (), **fmt: object) -> None:
    """Add every declared flag of ``group`` (:data:`costmodel.options.flags.GROUPS`), under its title, flags of
    one exclusive set (the rates) in a mutually exclusive group."""
    declared = [f for f in Options.flags(group) if f.name not in skip]
    title = Options.flag_groups()[group]
    g = p.add_argument_group(title) if title else p
    sets: dict[str, object] = {}
    for f in declared:
        target = g
        if f.exclusive:
            if f.exclusive not in sets:
                sets[f.exclusive] = g.add_mutually_exclusive_group()
            target = sets[f.exclusive]
        add_flag(target, f.name, **fmt)


def add_step_args(p: argparse.ArgumentParser, *, batch_default: str = "1") -> None:
    """``--batch --seq`` (``--tokens`` is each command's own: what it adds differs)."""
    add_flags(p, "step", skip=("tokens",), batch_default=batch_default)


def add_counting_args(p: argparse.ArgumentParser) -> None:
    """``--causal`` (how FLOPs are counted)."""
    add_flags(p, "counting")


def add_memory_args(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """--precision/--optimizer (unless the caller has them), recompute, flash, layout, inference."""
    if precision:
        add_precision_args(p)
    add_flags(p, "memory")
    add_finetune_args(p)


def add_finetune_args(p: argparse.ArgumentParser) -> None:
    """``--lora --lora-targets --freeze`` (fine-tuning: which weights train)."""
    add_flags(p, "finetune")


def finetune_options(args: argparse.Namespace) -> dict[str, object]:
    """The fine-tuning options :func:`add_finetune_args`' flags gave (a verb with its own defaults for the rest
    of :class:`Options`, ``plan``, passes only these)."""
    return {f.name: getattr(args, f.dest) for f in Options.flags("finetune") if getattr(args, f.dest, None) is not None}


def add_precision_args(p: argparse.ArgumentParser) -> None:
    """``--precision --optimizer``."""
    add_flags(p, "precision")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """``--hardware --devices --achieved-tflops --mfu --tokens-per-s`` (time and utilisation)."""
    add_flags(p, "time")


def add_chunk_args(p: argparse.ArgumentParser, what: str, chunk: int) -> None:
    """``--workers``, ``--dask`` and ``--chunk`` of a verb that runs through the chunk engine (``sweep``, ``plan``):
    ``what`` names the items of a chunk (``configs``, ``layouts``), ``chunk`` their default number."""
    verb = "evaluate" if what == "configs" else "search"
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"{verb} chunks of {what} in N local processes (the result is identical; 0: one per CPU)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help=f"{verb} chunks on a Dask cluster, e.g. tcp://host:8786 (needs pip install 'costmodel[dask]')",
    )
    p.add_argument("--chunk", type=int, metavar="N", help=f"{what} per chunk (default {chunk})")


def chunking(args: argparse.Namespace) -> dict[str, object]:
    """``workers``, ``dask`` and (when given) ``chunk`` from :func:`add_chunk_args`' options, checked."""
    if args.workers < 0:
        raise CostModelError(f"--workers {args.workers}: expected 0 (one per CPU) or more local processes")
    if args.chunk is not None and args.chunk < 1:
        raise CostModelError(f"--chunk {args.chunk}: expected a positive number of items per chunk")
    out: dict[str, object] = {"workers": args.workers or os.cpu_count() or 1, "dask": args.dask}
    if args.chunk is not None:
        out["chunk"] = args.chunk
    return out
