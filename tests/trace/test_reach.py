"""The reach docs/tracer.md records (its section written by ``scripts/trace_reach.py --write-docs``) is what the
script measures: every type the section lists is traced again from its small config and compared with
FlopCounterMode and ``numel`` (slow: minutes per type; ``COSTMODEL_SLOW=1``), and the section's numbers are its
table's (fast)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def script():
    spec = importlib.util.spec_from_file_location("trace_reach", ROOT / "scripts" / "trace_reach.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sections_count_is_its_tables():
    reach = script()
    listed = reach.documented()
    text = (ROOT / "docs" / "tracer.md").read_text(encoding="utf-8").split(reach.BEGIN)[1]
    exact, measured = map(int, re.search(r"\*\*(\d+) of (\d+) exact\*\*", text).groups())
    assert measured == len(listed)
    assert exact == sum(1 for v in listed.values() if v.startswith("exact"))


@pytest.mark.slow
def test_the_docs_reach_is_measured(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    reach = script()
    listed = reach.documented()
    out = tmp_path / "reach.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "trace_reach.py"),
            "--types",
            ",".join(sorted(listed)),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    result = {t: label.split(",")[0] for t, label in listed.items()}  # exact or not (how T was fitted may be newer)
    assert {r["type"]: r["result"] for r in records} == result
