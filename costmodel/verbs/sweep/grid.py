"""Sweep grids, validated before any work: ranges stay ranges, sizes and budgets checked up front.

This module imports neither sympy nor networkx: a sweep whose formulas are cached (:mod:`.plans`) starts
without them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence

from ... import units
from ...errors import CostModelError
from ...sizes import parse_count

#: Most configs one sweep evaluates, and most values (configs × metrics): evaluation is streamed, so these
#: bound time, not memory. Exact sweeps run at Python-int speed once numbers leave int64, so they take fewer.
MAX_POINTS = 10**7
MAX_EXACT_POINTS = 10**6
MAX_VALUES = 4 * 10**7
MAX_EXACT_VALUES = 4 * 10**6


def parse_grid(text: str) -> tuple[str, Sequence[int]]:
    """``NAME=START:STOP:STEP`` (STOP included; a ``range``, never a list), ``NAME=A,B,C`` or ``NAME=A`` →
    (name, values).

    >>> parse_grid("d=1024:4096:1024")
    ('d', range(1024, 4097, 1024))
    >>> parse_grid("L=12,24,48")
    ('L', [12, 24, 48])
    """
    name, eq, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    where = f"--grid {text!r}"
    if not eq or not name.isidentifier() or not spec:
        raise CostModelError(f"{where}: expected NAME=START:STOP:STEP or NAME=A,B,C such as d=1024:8192:1024")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise CostModelError(f"{where}: expected START:STOP or START:STOP:STEP, received {spec!r}")
        start, stop = (parse_count(p, where) for p in parts[:2])
        step = parse_count(parts[2], where) if len(parts) == 3 else 1
        if stop < start:
            raise CostModelError(f"{where}: expected START <= STOP, received {start} > {stop}")
        if (stop - start) // step + 1 > MAX_POINTS:
            raise CostModelError(f"{where}: more than {MAX_POINTS:,} values")
        return name, range(start, stop + 1, step)
    values = spec.split(",")
    if len(values) > MAX_POINTS:
        raise CostModelError(f"{where}: more than {MAX_POINTS:,} values")
    return name, list(dict.fromkeys(parse_count(p, where) for p in values))


def axes(grid: Mapping[str, Sequence[int]] | Sequence[str]) -> dict[str, Sequence[int]]:
    """The grid as name → a ``range`` or a tuple of positive Python ints; nothing is expanded."""
    if not isinstance(grid, Mapping):
        grid = dict(parse_grid(g) for g in grid)
    out: dict[str, Sequence[int]] = {}
    for name, values in grid.items():
        if isinstance(values, range):
            if len(values) and min(values[0], values[-1]) < 1:
                raise CostModelError(f"--grid {name}: expected positive whole numbers, received {values}")
            out[str(name)] = values
            continue
        if len(values) > MAX_POINTS:
            raise CostModelError(f"--grid {name}: more than {MAX_POINTS:,} values")
        try:
            vals = tuple(operator.index(v) for v in values)
        except TypeError:
            raise CostModelError(f"--grid {name}: expected whole numbers, received {list(values)[:5]}") from None
        bad = [v for v in vals if isinstance(v, bool) or v < 1]
        if bad:
            raise CostModelError(f"--grid {name}: expected positive whole numbers, received {bad[0]!r}")
        out[str(name)] = tuple(int(v) for v in vals)
    return out


def check_budget(grid: Mapping[str, Sequence[int]], metrics: Sequence[str], exact: bool) -> int:
    """The number of configs, after refusing more configs, or configs × metrics, than a sweep takes."""
    n = math.prod(len(v) for v in grid.values())
    limit, values = (MAX_EXACT_POINTS, MAX_EXACT_VALUES) if exact else (MAX_POINTS, MAX_VALUES)
    mode = " with --exact" if exact else ""
    if n > limit:
        raise CostModelError(f"sweep: {n:,} configs; expected at most {limit:,}{mode}")
    if n * max(1, len(metrics)) > values:
        raise CostModelError(
            f"sweep: {units.plural(n, 'config')} × {units.plural(len(metrics), 'metric')} = {units.plural(n * len(metrics), 'value')}; "
            f"expected at most {values:,}{mode} (fewer configs or metrics per sweep)"
        )
    return n
