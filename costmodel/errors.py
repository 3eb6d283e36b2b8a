"""The one exception type of costmodel.

Every error a user can cause (a bad pattern, an unsized axis, an unknown preset,
a malformed config) is a :class:`CostModelError`. Its message says *what* went
wrong, *where*, what was *expected* and what was *received*, so the CLI can print
it as one line and exit 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CostModelError(ValueError):
    """A user-facing error: bad input, never a bug in costmodel."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """A ``"did you mean ...?"`` hint naming the closest of ``choices`` (or ``""``).

    >>> closest("gpt2-smal", ["gpt2-small", "gpt2-medium", "llama3-8b"])
    " (did you mean 'gpt2-small' or 'gpt2-medium'?)"
    """
    choices = sorted(set(choices))
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.5)
    if not found:
        lowered = name.lower()
        found = [c for c in choices if lowered and (lowered in c.lower() or c.lower() in lowered)][:n]
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
