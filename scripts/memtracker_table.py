"""Write ``tests/data/memtracker.json``: the training peak of small transformers modules as torch's MemTracker
measures it (``tests/memory/memtracker.py``: FakeTensorMode, the second of two iterations) beside the engine's,
over the grid of ``tests/memory/peak_grid.py``, with ``--implementation fused`` (the numbers before issue 28's
rules: Korthikanti's kernels, resident gradients, no step point) and ``--implementation transformers``.

docs/memory.md's table is generated from the file (``docs/generate.py``, block ``memtracker``; no torch there);
``tests/memory/test_peak_memtracker.py`` checks its rows against the engine and MemTracker again. Run from the
repository root with the pinned torch and transformers (a minute or two)::

    PYTHONPATH=$PWD python scripts/memtracker_table.py
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.memory.memtracker import Setting, config, measure
from tests.memory.peak_grid import GRID, engine

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "memtracker.json")


def row(family: str, changes: dict) -> dict:
    """One setting: MemTracker's peak, phase and categories, and the engine's peak and label per implementation."""
    cfg, s = config(family), Setting().but(**changes)
    m = measure(cfg, s)
    out = {"family": family, "setting": changes, "measured": m["peak"], "phase": m["phase"][1]}
    out["breakdown"] = m["breakdown"]
    for impl in ("fused", "transformers"):
        peak, at, _ = engine(cfg, s, impl)
        out[impl] = {"peak": peak, "at": at}
    return out


def main() -> int:
    rows = [row(f, c) for f, c in GRID]
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump({"source": "scripts/memtracker_table.py", "rows": rows}, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {len(rows)} rows to {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
