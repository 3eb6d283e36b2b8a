"""The ``costmodel`` command line: a thin client of the public API.

Each subcommand is a module with ``add(subparsers)`` and ``run(args) -> int``.
Errors print one line on stderr and exit 2; no traceback ever reaches a user.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from costmodel import CostModelError, __version__

from . import calibrate, compare, derive, estimate, fit, hardware, models, plan, report, roofline, sweep

COMMANDS = (estimate, derive, models, fit, hardware, roofline, compare, sweep, report, calibrate, plan)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CostModelError(f"{self.prog}: {message}")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="costmodel", description="Derive FLOPs, memory and time of neural networks from op graphs.")
    top.add_argument("--version", action="version", version=f"costmodel {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        if args.command is None:
            parser().print_help()
            return 2
        return args.run(args)
    except CostModelError as exc:
        print(f"costmodel: error: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("costmodel: error: input nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in costmodel, not bad input: still one line, and a distinct exit code
        print(f"costmodel: internal error: {type(exc).__name__}: {exc} (please report this with the command line)",
              file=sys.stderr)
        return 3
