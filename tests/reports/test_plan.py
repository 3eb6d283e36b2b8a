"""The layout planner: every layout it lists divides, fits and is ranked by the same step ``estimate`` gives
(the compiled symbolic-layout formula against the numeric derivation: two doors, one number)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel import CostModelError
from costmodel.reports.plan import layouts, pareto, plan

TINY = {"L": 4, "d": 64, "h": 4, "V": 100, "T_max": 256}


@pytest.fixture(scope="module")
def planned():
    return plan(
        "gpt", settings=TINY, hardware="h100-sxm", devices=16, batch=32, seq=256, top=6, verify=True, progress=False
    )


def test_every_layout_divides():
    lay = layouts(16, 32, 4, 256, heads=4)
    tp, pp, dp, cp, b, m = (lay[k] for k in ("tp", "pp", "dp", "cp", "b", "m"))
    assert np.all(tp * pp * dp * cp == 16) and np.all(dp * b * m == 32) and np.all(4 % pp == 0)
    assert np.all(4 % tp == 0)  # heads split evenly
    assert np.all((pp == 1) | (m >= pp))
    with pytest.raises(CostModelError, match="no layout"):
        layouts(3, 2, 4, 256)


def test_ranked_by_the_step_estimate_gives(planned):
    rows = planned["layouts"]
    assert len(rows) == 6 and planned["fitting"] <= planned["searched"]
    assert [r["step_s"] for r in rows] == sorted(r["step_s"] for r in rows)
    for r in rows:  # the screened step is the estimate's (ZeRO 1/2 move only the optimizer's small share)
        assert r["step_s"] == pytest.approx(r["verified"]["step_s"], rel=0.02)
        assert r["memory_bytes"] == pytest.approx(r["verified"]["memory_bytes"], rel=0.1)


def test_pareto_front_is_not_dominated(planned):
    front = planned["pareto"]
    assert front and front[0]["step_s"] == planned["layouts"][0]["step_s"]
    for a in front:
        assert not any(b["step_s"] < a["step_s"] and b["memory_bytes"] < a["memory_bytes"] for b in front)
    t, mem = np.array([3.0, 1.0, 2.0, 1.0]), np.array([1.0, 5.0, 2.0, 4.0])
    assert list(pareto(t, mem)) == [3, 2, 0]


def test_plan_cli_json_and_csv(capsys):
    from costmodel.cli import main

    argv = [
        "plan",
        "gpt",
        *sum((["--set", f"{k}={v}"] for k, v in TINY.items()), []),
        "--hardware",
        "h100-sxm",
        "--devices",
        "8",
        "--batch",
        "16",
        "--seq",
        "256",
        "--top",
        "3",
    ]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["layouts"]) == 3 and {"step_s", "memory_bytes", "schedule"} <= set(r["layouts"][0])
    assert main([*argv, "--csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("tp,pp,vpp") and len(lines) == 4
    assert main([*argv[:-2], "--top", "0"]) == 2
