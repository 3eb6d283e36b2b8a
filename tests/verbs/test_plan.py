"""The layout planner: every layout it lists divides, fits and is ranked by the same step ``estimate`` gives
(the compiled symbolic-layout formula against the numeric derivation: two doors, one number)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel import CostModelError
from costmodel.verbs.plan.plan import layouts, pareto, plan

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
    bad_only = (["--only", "tpp=2"], ["--only", "zero=9"], ["--only", "zero=0|"], ["--overlap-comm", "xx"])
    for bad in (["--reference", "tp8"], ["--ep", "0"], ["--reference", "tpp=2"], *bad_only):  # one line, exit 2
        assert main([*argv, *bad]) == 2
    assert "--reference" in capsys.readouterr().err


def test_ties_broken_and_ranks_reported(planned):
    rows = planned["layouts"]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["step_rank"] for r in rows] == sorted(r["step_rank"] for r in rows)
    for a, b in zip(rows, rows[1:]):
        if a["step_rank"] == b["step_rank"]:  # a tie: the smaller memory first, then its place in the tie
            assert a["memory_bytes"] <= b["memory_bytes"] and b["tie_position"] == a["tie_position"] + 1
        else:
            assert b["step_s"] > a["step_s"] and b["tie_position"] == 1
    assert all(1 <= r["tie_position"] <= r["tie_size"] for r in rows)


def test_reference_layout_is_placed():
    kw = dict(settings=TINY, hardware="h100-sxm", devices=16, batch=32, seq=256, progress=False, top=10**6)
    r = plan("gpt", reference={"tp": 2, "pp": 2, "schedule": "1f1b"}, **kw)
    ref, rows = r["reference"], r["layouts"]
    first = next(x for x in rows if (x["tp"], x["pp"], x["schedule"]) == (2, 2, "1f1b"))
    assert ref["rank"] == first["rank"] and ref["of_best"] == pytest.approx(first["step_s"] / rows[0]["step_s"])
    assert plan("gpt", reference={"tp": 16, "pp": 2}, **kw)["reference"] is None  # 16·2 > 16 devices
    with pytest.raises(CostModelError, match="unknown field 'tpp'"):
        plan("gpt", reference={"tpp": 2}, **kw)


def test_expert_parallel_sizes_searched_and_sharded():
    from costmodel import estimate
    from costmodel.devices.table import device
    from costmodel.families import load
    from costmodel.options import Options
    from costmodel.sections.run import resolve
    from costmodel.verbs.plan.plan import derive, evaluate

    moe = {"L": 2, "d": 64, "h": 4, "n_kv": 2, "V": 128, "d_ff": 128, "n_experts": 8, "top_k": 2}
    lay = layouts(16, 32, 2, 256, heads=4, experts=8)
    assert set(lay["ep"]) == {1, 2, 4, 8} and np.all(lay["dp"] % lay["ep"] == 0)
    assert set(layouts(16, 32, 2, 256, heads=4)["ep"]) == {1}  # a dense model
    assert set(layouts(16, 32, 2, 256, heads=4, experts=8, eps=(4, 3))["ep"]) == {4}  # 3 does not divide 8
    m = load("mixtral-8x7b", moe)
    o = Options.make(batch=32, seq=256, flash=True)
    c = derive(m, device("h100-sxm"), resolve(m, o), o)
    one = dict(tp=1, pp=1, dp=16, cp=1, vpp=1, b=1, m=2, recompute=0, zero=0, schedule=0)
    (t1, t8), (m1, m8) = evaluate(c, {k: np.array([v, v]) for k, v in one.items()} | {"ep": np.array([1, 8])})
    e1, e8 = (
        estimate(m, batch=32, seq=256, hardware="h100-sxm", devices=16, dp=16, ep=ep, micro_batch=1) for ep in (1, 8)
    )
    # what ep = 8 takes off the model states and adds in all-to-alls is the estimate's (a tiny model is latency-bound)
    assert m1 - m8 == pytest.approx(e1["memory_bytes"]["total"] - e8["memory_bytes"]["total"], rel=1e-3)
    assert t8 - t1 == pytest.approx(e8["time"]["step_s"] - e1["time"]["step_s"], rel=0.02)
