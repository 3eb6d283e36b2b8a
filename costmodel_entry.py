"""The ``costmodel`` command: Ctrl-C is handled before anything heavy is imported.

This module is top-level and imports only the standard library, so that an interrupt at any moment (during
the imports of sympy and networkx too, the first second of a run) ends the command with exit status 130 and
no traceback; an interrupted write leaves its target whole (see :func:`costmodel.files.write_atomic`).
``python -m costmodel`` and the installed ``costmodel`` script both come here.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 130
_state = {"interrupted": False}


def _leave(signum: int, frame: object) -> None:
    """While modules are imported nothing needs cleaning up (no output yet): leave at once, quietly."""
    os._exit(INTERRUPTED)


try:  # installed when this module is imported, before costmodel (sympy, networkx) is
    signal.signal(signal.SIGINT, _leave)
except ValueError:  # not the main thread: the caller handles its signals
    pass


def _on_sigint(signum: int, frame: object) -> None:
    if _state["interrupted"]:  # a second Ctrl-C while the first unwinds: leave at once
        os._exit(INTERRUPTED)
    _state["interrupted"] = True
    raise KeyboardInterrupt


def _on_term(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP (a closed terminal, ``kill``, a job scheduler): unwind as Ctrl-C does, so a file being
    written leaves no temporary, then exit 128 + the signal's number."""
    if _state["interrupted"]:
        os._exit(128 + signum)
    _state["interrupted"] = True
    _state["signal"] = signum
    raise KeyboardInterrupt


_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _unraisable(hook_args: object) -> None:
    """An interrupt that lands in a finaliser is not reported as an 'Exception ignored' traceback."""
    if not isinstance(getattr(hook_args, "exc_value", None), KeyboardInterrupt):
        sys.__unraisablehook__(hook_args)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (0, 2 bad input, 3 a bug, 130 interrupted)."""
    sys.unraisablehook = _unraisable
    for stream in (sys.stdout, sys.stderr):  # PYTHONIOENCODING=ascii: non-ASCII text escaped, not a crash
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass
    code = 2
    try:
        from costmodel.cli import main as run

        signal.signal(signal.SIGINT, _on_sigint)  # from here an interrupt unwinds: a file being written is cleaned
        for signum in _TERMINATING:
            if signal.getsignal(signum) is signal.SIG_DFL:  # nohup's SIG_IGN stays ignored
                signal.signal(signum, _on_term)
        code = run(argv)
        sys.stdout.flush()
    except KeyboardInterrupt:
        code = INTERRUPTED
    except BrokenPipeError:
        code = 0
    except OSError as exc:
        _say(f"costmodel: error: cannot write the output: {exc.strerror or exc}")
        code = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # from here on, nothing can interrupt the exit
        for signum in _TERMINATING:
            if signal.getsignal(signum) is _on_term:
                signal.signal(signum, signal.SIG_IGN)
    if _state["interrupted"]:
        code = 128 + _state["signal"] if "signal" in _state else INTERRUPTED
    _quiet_exit_flush()
    return code


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):
        pass


def _quiet_exit_flush() -> None:
    """Flush stdout now; if it cannot take more (a closed pipe), point it at /dev/null so the interpreter's
    own flush at exit reports nothing."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    raise SystemExit(main())
