"""The CLI's JSON contract does not move: every key and value of the golden files is still produced.

``tests/golden/cases/*.json`` hold the output of command lines written before a change (see
``tests/golden/generate.py``). A case that exited 0 must still exit 0 and give every key it gave, with the
same value (keys may be added, none renamed or dropped). A case that was refused may now succeed (a bug
fixed), and if it is still refused it exits 2.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from tests.golden.generate import run

CASES = sorted((pathlib.Path(__file__).parents[1] / "golden" / "cases").glob("*.json"))


def _flat(obj, prefix=""):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flat(v, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): obj}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    return a == b


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden_case(path):
    golden = json.loads(path.read_text())
    code, result = run(golden["argv"])
    if golden["exit"] != 0:
        assert code in (0, 2), result
        return
    assert code == 0, result
    old, new = _flat(golden["result"]), _flat(result)
    missing = [k for k in old if k not in new]
    assert not missing, f"keys dropped: {missing[:10]}"
    changed = {k: (old[k], new[k]) for k in old if not _same(old[k], new[k])}
    assert not changed, f"{len(changed)} values changed: " + "; ".join(
        f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(changed.items())[:8]
    )
