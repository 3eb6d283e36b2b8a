"""The ``costmodel`` command line: a thin client of the public API.

Each subcommand is a module with ``add(subparsers)`` and ``run(args) -> int``.
Errors print one line on stderr and exit 2; no traceback ever reaches a user.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from costmodel import CostModelError, __version__

from . import (
    calibrate,
    check,
    compare,
    derive,
    estimate,
    fit,
    hardware,
    models,
    plan,
    report,
    roofline,
    serve,
    serve_plan,
    sweep,
    trace,
)

COMMANDS = (
    estimate,
    derive,
    models,
    fit,
    hardware,
    roofline,
    compare,
    sweep,
    report,
    trace,
    calibrate,
    plan,
    serve,
    serve_plan,
    check,
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # the command, not the program again: main prints "costmodel: error: " before it (it said
        # "costmodel: error: costmodel: ..." and "costmodel: error: costmodel estimate: ...")
        command = self.prog.removeprefix("costmodel").strip()
        raise CostModelError(f"{command}: {message}" if command else message)


def parser() -> argparse.ArgumentParser:
    """The ``costmodel`` parser: each subcommand module's ``add`` makes its parser, its ``run`` runs it."""
    top = _Parser(prog="costmodel", description="Derive FLOPs, memory and time of neural networks from op graphs.")
    top.add_argument("--version", action="version", version=f"costmodel {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add(sub)
    return top


def one_line(message: str) -> str:
    """``message`` on one line: an argument holding a newline cannot split an error into several."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status: 0 done, 2 bad input (one line on stderr), 3 a bug, 130 interrupted.

    Warnings (numpy's floating-point notes, deprecations) are captured, not printed: a successful run writes
    nothing on stderr (``COSTMODEL_WARNINGS=1`` shows them, one line each).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = _main(argv)
    if os.environ.get("COSTMODEL_WARNINGS"):
        for w in caught:
            print(one_line(f"costmodel: warning: {w.category.__name__}: {w.message}"), file=sys.stderr)
    return code


def _main(argv: Sequence[str] | None) -> int:
    try:
        top = parser()
        args = top.parse_args(argv)
        # as typed, and the parser that read them: a hint that names another command repeats the user's flags
        args.argv, args.parser = list(sys.argv[1:] if argv is None else argv), top
        if args.command is None:
            top.print_help()
            return 2
        code = args.run(args)
        sys.stdout.flush()  # a full disk on stdout is an error of this command, not a note at exit
        return code
    except CostModelError as exc:
        print(one_line(f"costmodel: error: {exc}"), file=sys.stderr)
        return 2
    except RecursionError:
        print("costmodel: error: input nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the world, not the input: a full disk or a closed terminal on stdout
        print(one_line(f"costmodel: error: cannot write the output: {exc.strerror or exc}"), file=sys.stderr)
        return 2
    except Exception as exc:  # a bug in costmodel, not bad input: still one line, and a distinct exit code
        print(
            one_line(
                f"costmodel: internal error: {type(exc).__name__}: {exc} (please report this with the command line)"
            ),
            file=sys.stderr,
        )
        return 3
