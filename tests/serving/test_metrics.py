"""Metrics: the hand-computed schedule's TTFT, both TPOTs, ITLs and E2E; percentiles against numpy on the raw
record; request overheads; the measured window; SLO grammar; goodput; the largest rate under SLOs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pytest import approx

from costmodel.errors import CostModelError
from costmodel.serving.analytic import Shape, Solver
from costmodel.serving.batch import Limits, Request
from costmodel.serving.metrics import Slo, analytic_metrics, max_rate_under_slo, metrics, parse_slos
from costmodel.serving.simulate import simulate
from costmodel.serving.workload import workload


def affine(batch):
    return 0.010 + 1e-6 * sum(new for new, _ in batch)


def hand(**kw):
    # tests/serving/test_simulate.py's schedule: TTFT 0.010004 and 0.030010, E2E 0.030010 and 0.050012
    lim = Limits(max_num_seqs=8, max_num_batched_tokens=4, block_size=16, num_blocks=100, **kw)
    return simulate([Request(0, 4, 3), Request(0, 4, 3)], affine, lim)


def test_the_hand_schedule_metrics():
    m = metrics(hand())
    assert m["ttft_s"]["mean"] == approx((0.010004 + 0.030010) / 2)
    assert m["e2e_s"]["mean"] == approx((0.030010 + 0.050012) / 2)
    # tpot: (E2E − TTFT) / (3 − 1): A (0.030010 − 0.010004)/2 = 0.010003, B (0.050012 − 0.030010)/2 = 0.010001
    assert m["tpot_s"]["mean"] == approx(0.010002)
    # tpot_incl_first: E2E / 3
    assert m["tpot_incl_first_s"]["mean"] == approx((0.030010 + 0.050012) / 6)
    # ITLs: A 0.010004, 0.010002; B 0.010001, 0.010001
    assert m["itl_s"]["mean"] == approx((0.010004 + 0.010002 + 0.010001 + 0.010001) / 4)
    assert m["itl_s"]["p50"] == approx(0.0100015)
    # the window: first arrival 0 to last finish 0.050012; 6 output tokens, 8 input tokens, 2 requests
    assert m["window_s"] == approx(0.050012)
    assert m["throughput"]["output_tokens_per_s"] == approx(6 / 0.050012)
    assert m["throughput"]["input_tokens_per_s"] == approx(8 / 0.050012)
    assert m["requests"] == 2 and m["preemptions"] == 0 and not m["saturated"]


def test_request_overhead_adds_to_ttft_and_e2e_not_to_tpot():
    plain, over = metrics(hand()), metrics(hand(request_overhead_s=0.5))
    assert over["ttft_s"]["p90"] == approx(plain["ttft_s"]["p90"] + 0.5)
    assert over["e2e_s"]["mean"] == approx(plain["e2e_s"]["mean"] + 0.5)
    assert over["tpot_s"] == approx(plain["tpot_s"])
    assert over["tpot_incl_first_s"]["mean"] == approx(plain["tpot_incl_first_s"]["mean"] + 0.5 / 3)


def test_percentiles_match_numpy_on_the_raw_record():
    lim = Limits(max_num_seqs=16, max_num_batched_tokens=512, block_size=16, num_blocks=2000)
    w = workload(300, rate=40.0, input_len="uniform:16:256", output_len="uniform:1:64", seed=3)
    sim = simulate(w, affine, lim)
    m = metrics(sim)
    ttft = sim.first_token_s - sim.arrival_s
    e2e = sim.finish_s - sim.arrival_s
    out = sim.output_tokens
    itl = np.concatenate([np.diff(sim.token_times(i)) for i in range(300)])
    tpot = ((e2e - ttft) / np.maximum(out - 1, 1))[out > 1]
    for key, values in [("ttft_s", ttft), ("e2e_s", e2e), ("itl_s", itl), ("tpot_s", tpot)]:
        for q in (50, 90, 99):
            assert m[key][f"p{q}"] == approx(np.percentile(values, q)), (key, q)
        assert m[key]["mean"] == approx(values.mean())
    assert sum(len(sim.token_times(i)) for i in range(300)) == out.sum()


def test_warmup_leaves_out_the_first_and_last_finishes():
    lim = Limits(max_num_seqs=4, max_num_batched_tokens=64, block_size=16, num_blocks=100)
    sim = simulate(workload(20, concurrency=4, input_len=8, output_len=4), affine, lim)
    m = metrics(sim, warmup=0.1)  # 2 of 20 left out at each end
    f = np.sort(sim.finish_s)
    assert m["requests"] == 16 and m["window_s"] == approx(f[17] - f[1])
    assert m["throughput"]["requests_per_s"] == approx(16 / (f[17] - f[1]))
    with pytest.raises(CostModelError, match="warmup is a fraction"):
        metrics(sim, warmup=0.5)


def test_slo_grammar():
    assert parse_slos("ttft_p90=2s, tpot_p99=50ms,e2e_mean=10s,itl_p99.9=0.2s") == (
        Slo("ttft", "p90", 2.0),
        Slo("tpot", "p99", 0.05),
        Slo("e2e", "mean", 10.0),
        Slo("itl", "p99.9", 0.2),
    )
    assert parse_slos("tpot_incl_first_p50=20ms") == (Slo("tpot_incl_first", "p50", 0.02),)


@pytest.mark.parametrize(
    "text, message",
    [
        ("ttft_p90=2", "has no unit; write it in s or ms"),
        ("ttfx_p90=2s", "unknown metric 'ttfx' \\(did you mean 'ttft'"),
        ("ttft=2s", "expected METRIC_STAT=LIMIT"),
        ("ttft_p90", "expected METRIC_STAT=LIMIT"),
        ("ttft_p101=2s", "between p0 and p100"),
        ("ttft_p90=2min", "expected a limit such as 2s or 50ms"),
        ("ttft_p90=0s", "must be > 0"),
        ("", "no SLO given"),
    ],
)
def test_bad_slos_say_what_is_wrong(text, message):
    with pytest.raises(CostModelError, match=message):
        parse_slos(text)


def test_goodput_and_attainment_on_the_hand_schedule():
    # TTFTs 0.010004 (A) and 0.030010 (B): under 20 ms only A; the population's p50 is 0.020007 > 20 ms
    m = metrics(hand(), slos="ttft_p50=20ms")
    row = m["slo"]["ttft_p50=0.02s"]
    assert row["value_s"] == approx(0.020007) and not row["met"] and row["attainment"] == 0.5
    assert m["goodput"]["fraction"] == 0.5 and m["goodput"]["requests_per_s"] == approx(1 / 0.050012)
    assert not m["slo_met"]
    ok = metrics(hand(), slos="ttft_p50=21ms,tpot_mean=11ms,itl_p99=11ms")
    assert ok["slo_met"] and ok["goodput"]["fraction"] == 0.5  # B's own TTFT still misses 21 ms


def test_the_largest_rate_under_slos_meets_them_and_the_next_fails():
    lim = Limits(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, num_blocks=4000)
    kw = dict(input_len=128, output_len=32, requests=300, iterations=6, seed=1)
    found = max_rate_under_slo(affine, lim, "tpot_p90=15ms", **kw)
    assert found["rate"] > 0 and found["metrics"]["slo_met"]
    assert found["metrics"]["tpot_s"]["p90"] <= 0.015 and found["failed_at"] > found["rate"]
    w = workload(300, rate=found["failed_at"], input_len=128, output_len=32, seed=1)
    assert not metrics(simulate(w, affine, lim), slos="tpot_p90=15ms", warmup=0.1)["slo_met"]
    never = max_rate_under_slo(affine, lim, "tpot_p90=1ms", **kw)
    assert never["rate"] == 0 and never["metrics"] is None


def test_an_empty_window_is_nan_not_an_error():
    lim = Limits(max_num_seqs=1, max_num_batched_tokens=64, block_size=16, num_blocks=100)
    sim = simulate(workload(3000, rate=1e4, input_len=8, output_len=200, seed=0), affine, lim, max_waiting=50)
    m = metrics(sim, slos="ttft_p90=1s")
    assert sim.saturated and m["requests"] == 0 and math.isnan(m["ttft_s"]["mean"]) and not m["slo_met"]


def test_the_analytic_answer_in_the_same_keys_and_its_largest_rate():
    lim = Limits(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, num_blocks=4000)
    sol = Solver(affine, lim, Shape(128, 32))
    m = analytic_metrics(sol.open_loop(0.5 * sol.capacity), slos="e2e_p99=1s")
    assert set(m) >= {"ttft_s", "tpot_s", "tpot_incl_first_s", "itl_s", "e2e_s", "throughput", "slo_met", "goodput"}
    assert math.isnan(m["e2e_s"]["p99"]) and m["slo"]["e2e_p99=1s"]["value_s"] == m["e2e_s"]["mean"]
    found = max_rate_under_slo(affine, lim, "e2e_mean=0.5s", input_len=128, output_len=32, solver="analytic")
    e2e = sol.open_loop(found["rate"])["e2e_s"]
    assert (
        e2e <= 0.5 and e2e == pytest.approx(0.5, rel=1e-6) and found["runs"] == 11
    )  # the bracket, then 10 rounds of 15 rates
    with pytest.raises(CostModelError, match="solver is 'des' or 'analytic'"):
        max_rate_under_slo(affine, lim, "e2e_mean=0.5s", solver="vidur")
    with pytest.raises(CostModelError, match="expected the result at one rate"):
        analytic_metrics(sol.open_loop([1.0, 2.0]))


def test_des_and_analytic_largest_rates_are_close():
    lim = Limits(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, num_blocks=4000)
    kw = dict(input_len=128, output_len=32, requests=400, iterations=5, seed=2)
    des = max_rate_under_slo(affine, lim, "e2e_mean=0.5s", **kw)
    ana = max_rate_under_slo(affine, lim, "e2e_mean=0.5s", **kw, solver="analytic")
    assert des["rate"] == pytest.approx(ana["rate"], rel=0.1)


def test_a_short_run_below_saturation_is_not_called_saturated_but_one_past_it_is():
    # 100 requests at ~half the capacity: the drain (the last requests' E2E) is a large part of the window, but the
    # saturation rule looks at the middle of the run only
    lim = Limits(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, num_blocks=4000)
    cap = Solver(affine, lim, Shape(128, 64)).capacity
    short = metrics(simulate(workload(100, rate=0.5 * cap, input_len=128, output_len=64, seed=4), affine, lim))
    assert not short["saturated"] and short["saturation"] == ""
    past = metrics(simulate(workload(600, rate=2 * cap, input_len=128, output_len=64, seed=4), affine, lim))
    assert past["saturated"] and past["saturation"].startswith("rate past saturation: served")


def test_both_answers_are_plain_json():
    lim = Limits(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, num_blocks=4000)
    sim = simulate(workload(50, rate=5.0, input_len=64, output_len=8), affine, lim)
    assert json.loads(json.dumps(metrics(sim, slos="ttft_p90=1s")))["slo_met"] is True
    a = Solver(affine, lim, Shape(64, 8)).open_loop(5.0)
    assert json.loads(json.dumps(analytic_metrics(a, slos="ttft_p90=1s")))["saturated"] is False
