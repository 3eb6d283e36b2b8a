"""The serving validation page is what the code gives, its fit is deterministic, and the factors it stores act."""

import dataclasses
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from costmodel import CostModelError
from costmodel.serving import validation as v
from costmodel.serving.analytic import Shape, Solver
from costmodel.serving.batch import Limits
from costmodel.serving.measured import runs
from costmodel.serving.profiles import profile

PAGE = Path(__file__).resolve().parents[2] / "docs/serving-validation.md"


def test_the_worst_held_out_rows_on_the_page_are_recomputed():
    """Each row of the page's 'furthest off' table, predicted again one run at a time (the page's solver shares a
    grid per setting; a lone run is evaluated exactly at its concurrency too, so the numbers agree)."""
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("## The runs furthest off")[1].split("## What limits")[0]
    by_line = {r.line: r for r in runs()}
    cells = [row.split("|")[1:-1] for row in table.splitlines() if re.match(r"\| \d+ \|", row)]
    assert len(cells) == 15
    for c in cells[:4]:  # a small subset: each prediction builds its step
        r = by_line[int(c[0])]
        assert not v.in_slice(r, v.FIT_SLICE)  # held out
        p = v.predict(r)
        ttft = c[9].split("/")
        assert f"{r.ttft_s * 1e3:.0f}" == ttft[0].strip() and f"{p['ttft'] * 1e3:.0f}" == ttft[1].strip()
        assert f"{p['tpot'] * 1e3:.1f}" == c[10].split("/")[1].strip()


def test_the_page_is_what_the_code_gives():
    rows = runs()
    assert PAGE.read_text(encoding="utf-8") == v.render(rows, v.predict_all(rows)) + "\n"


def test_summary_arithmetic_by_hand():
    r = runs()[0]
    # predicted = measured x 1.1 for TTFT and TPOT: each error 10 %, E2E then also 10 %
    pred = {"ttft": r.ttft_s * 1.1, "tpot": r.tpot_s * 1.1, "e2e": r.e2e_s * 1.1}
    s = v.summary([r], [pred])
    assert s["ttft"][0] == pytest.approx(10) and s["tpot"][0] == pytest.approx(10) and s["e2e"][0] == pytest.approx(10)
    assert s["groups"] == 0  # one concurrency: no largest throughput


def test_levenberg_marquardt_is_deterministic_and_respects_bounds():
    # residuals of y = a·x + b at x = 0..4 for a = 2, b = 1: the least squares answer is exact
    xs = np.arange(5.0)
    f = lambda t: t[0] * xs + t[1] - (2 * xs + 1)  # noqa: E731
    x = v.levenberg_marquardt(f, [0.5, 0.0], [0, 0], [10, 10])
    assert x == pytest.approx([2, 1], abs=1e-6)
    assert np.array_equal(x, v.levenberg_marquardt(f, [0.5, 0.0], [0, 0], [10, 10]))
    bounded = v.levenberg_marquardt(f, [0.5, 0.0], [0, 0], [1.5, 10])
    assert bounded[0] <= 1.5


def test_fitted_profiles_say_what_they_were_fitted_to():
    fit_rows = [r for r in runs() if v.in_slice(r, v.FIT_SLICE)]
    for engine in ("vllm-v1", "sglang", "trtllm"):
        p = profile(engine)
        versions = {r.engine_version or "unstated" for r in fit_rows if r.engine == engine}
        assert set(p.calibrated_for) == versions
        assert "silicon_sample.csv" in p.sources["calibration"] and v.FIT_SLICE[1] in p.sources["calibration"]


def test_queue_share_adds_the_other_users_prompts_by_hand():
    # a step of t = 1 ms + 1 µs per new token: T_d(n) = 1 ms + n µs, T_f = 1 ms + (n - 1 + c) µs, so a prompt of
    # P = 100 tokens costs P·(T_f - T_d)/c = 100·(c - 1)/c µs; with c = 100 (budget 8192 >> P) that is 99 µs
    step = lambda b: 1e-3 + 1e-6 * sum(c for c, _ in b)  # noqa: E731
    lim = Limits(max_num_seqs=64, max_num_batched_tokens=8192, block_size=16, num_blocks=10_000)
    s = Solver(step, lim, Shape(100, 10), points=(8,))
    a0, a1 = s.closed_loop(8), s.closed_loop(8, 0.5)
    # q·(C - 1)·99 µs = 0.5·7·99 µs more to wait, TPOT unchanged
    assert a1["ttft_s"] - a0["ttft_s"] == pytest.approx(0.5 * 7 * 99e-6)
    assert a1["tpot_s"] == a0["tpot_s"]
    with pytest.raises(CostModelError, match="queue_share"):
        s.closed_loop(8, 1.5)


def test_bad_factors_are_refused():
    with pytest.raises(CostModelError, match="a factor > 0"):
        profile("vllm-v1", {"memory_time_scale": "0"})
    with pytest.raises(CostModelError, match=r"a share in \[0, 1\]"):
        profile("vllm-v1", {"prefill_queue_share": "2"})


def test_step_factors_and_kv_format_act_where_they_should():
    from costmodel import load
    from costmodel.devices.table import device
    from costmodel.memory.device import prepared
    from costmodel.options import Options
    from costmodel.serving.step import step_model

    m = load("llama3-8b")

    def build(**kw):
        return step_model(prepared(m.graph, Options(inference=True)), m.values, device("h100-sxm"), **kw)

    decode = [(1, 4000)] * 32  # memory-bound: weights and a long cache
    base, fp8, slow = build(), build(kv_dtype="fp8"), build(memory_scale=2)
    # an fp8 cache is 1 byte an element against bf16's 2: the cache's part of the step halves
    assert fp8.breakdown(decode)["kv"] == pytest.approx(base.breakdown(decode)["kv"] / 2)
    # memory time doubled: the memory-bound parts double, the fixed kernel times do not move
    b, s = base.breakdown(decode), slow.breakdown(decode)
    assert s["weights"] == pytest.approx(2 * b["weights"]) and s["overhead"] == pytest.approx(b["overhead"])
    with pytest.raises(CostModelError, match="time scales must be > 0"):
        build(compute_scale=0)


def test_request_overhead_is_per_version_and_a_user_override_wins():
    p = profile("trtllm")
    fitted = dict(p.request_overhead_by_version)
    assert fitted  # the fit writes one per version of the fit slice
    version, seconds = next(iter(fitted.items()))
    assert p.request_overhead_for(version) == seconds
    assert p.request_overhead_for("no-such-version") == p.request_overhead_s  # the documented default
    assert p.request_overhead_for("") == p.request_overhead_for("unstated")
    # --engine-set request_overhead_s=0.25: every version pays the user's overhead
    o = profile("trtllm", {"request_overhead_s": "0.25"})
    assert o.request_overhead_for(version) == Fraction(1, 4) and o.limits(100).request_overhead_s == 0.25
    with pytest.raises(CostModelError, match="seconds >= 0"):
        profile("trtllm", {"request_overhead_by_version": {"1.0": "-1"}})


def test_attainable_share_is_the_device_tables_curve_asymptote():
    import json

    from costmodel.serving import error_slices

    table = json.loads((Path(v.__file__).parents[1] / "devices/data/hardware.json").read_text(encoding="utf-8"))
    gemm = {name: table["devices"][name]["efficiency"]["gemm"] for name in ("h200", "b200")}
    r = runs()[0]
    # b200 has a measured fp8 curve; h200 has bf16's only, which fp8 weights fall back to
    b200 = dataclasses.replace(r, hardware="b200", weights_dtype="fp8")
    h200 = dataclasses.replace(r, hardware="h200", weights_dtype="fp8")
    assert error_slices.attainable_share(b200) == float(gemm["b200"]["fp8"]["efficiency"])
    assert error_slices.attainable_share(h200) == float(gemm["h200"]["bf16"]["efficiency"])


def test_fp8_weights_read_the_fp8_gemm_curve_where_the_device_has_one():
    from costmodel import load
    from costmodel.devices.table import device
    from costmodel.memory.device import prepared
    from costmodel.options import Options
    from costmodel.serving.step import step_model

    m = load("llama3-8b")
    G = prepared(m.graph, Options(inference=True))
    dev = device("b200")
    eff = dev.attained

    def with_curve(dtype, factor):
        curve = eff.gemm[dtype]
        slower = dataclasses.replace(curve, efficiency=curve.efficiency / factor)
        return dataclasses.replace(dev, efficiency=dataclasses.replace(eff, gemm={**eff.gemm, dtype: slower}))

    prompt = [(4096, 0)]  # compute-bound GEMMs
    base = step_model(G, m.values, dev, weights_dtype="fp8")(prompt)
    # a slower bf16 curve leaves an fp8 step alone; a slower fp8 curve slows it
    assert step_model(G, m.values, with_curve("bf16", 2), weights_dtype="fp8")(prompt) == pytest.approx(base)
    assert step_model(G, m.values, with_curve("fp8", 2), weights_dtype="fp8")(prompt) > 1.3 * base


def test_the_replayed_protocol_starts_users_together_and_staggers_them_by_hand():
    """Two users, prompts of 4 tokens, 3 output tokens, a budget of 5 tokens a step, every step 1 s, 0.5 s a
    request. aiperf's profiling starts after every warm-up response, so both users send at t = 0: step 1 prefills
    A (4 tokens) and 1 token of B's prompt; step 2 decodes A and ends B's prompt (3 tokens): TTFT 1 s and 2 s.
    A finishes in step 3 (t = 3, its third token), B in step 4 (t = 4): round 2 arrives one step apart, each prompt
    computed whole in the step after its arrival beside the other's decode, TTFT 1 s each; E2E 3 s in both rounds
    for A, 4 s then 3 s for B."""
    from costmodel.serving.measured import Run

    r = Run("", 1, "m", "h", "e", "", "bf16", 1, 4, 3, 2, 1.0, 1.0)
    wl = v.protocol(r, rounds=2)
    assert len(wl) == 4 and wl.concurrency == 2 and {q.arrival_s for q in wl.requests} == {0.0}
    limits = Limits(max_num_seqs=8, max_num_batched_tokens=5, block_size=4, num_blocks=64, request_overhead_s=0.5)
    means, rounds = v.replay(r, lambda batch: 1.0, limits, rounds=2)
    assert rounds["ttft"].tolist() == [(1 + 2) / 2 + 0.5, 1 + 0.5]
    assert rounds["e2e"].tolist() == [(3 + 4) / 2 + 0.5, 3 + 0.5]
    assert means["ttft"] == pytest.approx((2.0 + 1.5) / 2) and means["e2e"] == pytest.approx((4.0 + 3.5) / 2)
    assert means["tpot"] == pytest.approx((means["e2e"] - means["ttft"]) / 2)
    # one round simulated, the second taken to repeat it
    once, _ = v.replay(r, lambda batch: 1.0, limits, rounds=2, simulated_rounds=1)
    assert once["ttft"] == pytest.approx(2.0) and once["e2e"] == pytest.approx(4.0)


def test_the_simulated_section_sets_both_solvers_errors_side_by_side():
    """Two fit-slice runs predicted 10 % high by one solver and 20 % low by the other: the 'fit | all' row reads
    10.0 (10.0) / 20.0 (20.0) for TTFT, TPOT and E2E (E2E = TTFT + (O − 1)·TPOT moves by the same share)."""
    rows = [r for r in runs() if v.in_slice(r, v.FIT_SLICE)][:2]
    hi = [{"ttft": r.ttft_s * 1.1, "tpot": r.tpot_s * 1.1, "e2e": r.e2e_s * 1.1} for r in rows]
    lo = [{"ttft": r.ttft_s * 0.8, "tpot": r.tpot_s * 0.8, "e2e": r.e2e_s * 0.8} for r in rows]
    lines = v.simulated_section(rows, hi, lo, rounds=v.ROUNDS)
    row = next(x for x in lines if x.startswith("| fit | all |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2] == "2" and cells[3:6] == ["10.0 (10.0) / 20.0 (20.0)"] * 3
    assert "the rest taken to repeat" not in " ".join(lines)
    assert "the rest taken to repeat the last" in " ".join(v.simulated_section(rows, hi, lo, rounds=3))
