"""Write ``tests/data/families_check.json``: ``costmodel check FAMILY --against transformers`` for every built-in
family (its small config, the transformers class it describes, 3 examples a property, seed 0), with the result,
the conventions the comparison stated and the first difference of each failing property.

docs/verify.md's table of families is generated from the file (``docs/generate.py``, block ``families-check``;
no torch there); ``tests/testing/test_against_transformers.py`` checks every family again and that the file
lists every family. Run from the repository root with the pinned torch and transformers (a few minutes)::

    PYTHONPATH=$PWD python scripts/families_check.py [FAMILY ...]
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import costmodel
from costmodel.families import families
from costmodel.testing import subject
from costmodel.testing.hf import against, config_path

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "families_check.json")
EXAMPLES = 3


def row(name: str) -> dict:
    """One family's check: passed, the module's class, the conventions stated, the symbols pinned to the small
    file's values (no one config field sets them), what failed (or the error)."""
    out: dict[str, object] = {"family": name}
    start = time.perf_counter()
    try:
        path = config_path(name)
        report = costmodel.check(path, against="transformers", examples=EXAMPLES)
        pinned = against(path, {str(s) for s in subject(path).graph_symbols})[2]
    except costmodel.CostModelError as exc:
        out.update(result="error", reason=str(exc))
    else:
        out.update(
            result="pass" if report.passed else "fail",
            module=report.module,
            conventions=report.conventions,
            properties=len(report.properties),
            skipped=sum(bool(p.skipped) for p in report.properties),
            pinned=pinned,
            failed=[f"{p.name}: {p.differences[0].text()}" for p in report.failed],
        )
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def main(argv: list[str]) -> int:
    names = argv or list(families())
    old = {}
    if argv and os.path.exists(OUT):
        with open(OUT, encoding="utf-8") as f:
            old = {r["family"]: r for r in json.load(f)["families"]}
    for name in names:
        old[name] = row(name)
        print(name, old[name]["result"], old[name]["seconds"], "s", flush=True)
    rows = [old[n] for n in families() if n in old]
    data = {
        "source": "scripts/families_check.py",
        "examples": EXAMPLES,
        "seed": 0,
        "torch": __import__("torch").__version__,
        "transformers": __import__("transformers").__version__,
        "families": rows,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return 0 if all(r["result"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
