"""The two solvers, one answer: the analytic solver against the discrete-event simulation on fixed-length
workloads with an affine step (10 ms + 50 µs a new token + 10 ns a past token + 20 µs an entry).

Measured (seed 0; DES metrics with 20 % warm-up in a closed loop of 20·C requests, 10 % in an open loop of 2000):
closed-loop throughput within 0.6 % and TPOT within 2.8 % at every concurrency from 1 to past ``n_max``; open loop
at ρ = 0.3–0.7 of the analytic capacity: mean TTFT within 7.7 %, E2E within 5.2 %, TPOT within 5.9 %. The
assertions below leave margin on those. Where the KV cache binds (preemption by recompute, which the analytic
solver does not model) the simulation serves up to 12.4 % less than the analytic capacity: asserted as a bounded,
one-sided gap; a roofline step (a max, not a sum) is 4.5 % optimistic in a closed loop, asserted within 8 %.
Closed-loop TTFT below ``n_max`` is not compared: fixed lengths keep a simulated closed loop
synchronised in groups that wait for each other's prefills.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.serving.analytic import Shape, Solver, capacity, closed_loop, open_loop
from costmodel.serving.batch import Limits
from costmodel.serving.metrics import metrics
from costmodel.serving.simulate import simulate
from costmodel.serving.workload import workload


def step(batch):
    new = past = 0
    for n, p in batch:
        new += n
        past += p
    return 0.010 + 5e-5 * new + 1e-8 * past + 2e-5 * len(batch)


CASES = {
    "decode-bound": (
        Limits(max_num_seqs=128, max_num_batched_tokens=2048, block_size=16, num_blocks=100000),
        1024,
        128,
        0,
    ),
    "prefill-bound": (
        Limits(max_num_seqs=64, max_num_batched_tokens=512, block_size=16, num_blocks=100000),
        2000,
        64,
        0,
    ),
    "prefix-and-graphs": (
        Limits(
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            block_size=16,
            num_blocks=100000,
            prefix_caching=True,
            cuda_graph_sizes=(1, 2, 4, 8, 16, 32, 48, 64),
        ),
        1024,
        128,
        600,
    ),
}


def rel(a, b):
    return abs(a - b) / b


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("C", [1, 32, 128])
def test_closed_loop_throughput_and_tpot_agree(case, C):
    lim, P, O, h = CASES[case]
    w = workload(max(20 * C, 200), concurrency=C, input_len=P, output_len=O, prefix_tokens=h, seed=0)
    m = metrics(simulate(w, step, lim), warmup=0.2)
    a = closed_loop(step, lim, Shape(P, O, h), C)
    assert rel(a["requests_per_s"], m["throughput"]["requests_per_s"]) < 0.03
    assert rel(a["output_tokens_per_s"], m["throughput"]["output_tokens_per_s"]) < 0.03
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.05


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_open_loop_latencies_agree_at_moderate_load(case, rho):
    lim, P, O, h = CASES[case]
    lam = rho * capacity(step, lim, Shape(P, O, h))
    m = metrics(
        simulate(workload(2000, rate=lam, input_len=P, output_len=O, prefix_tokens=h, seed=0), step, lim), warmup=0.1
    )
    a = open_loop(step, lim, Shape(P, O, h), lam)
    assert not m["saturated"] and not a["saturated"]
    assert rel(a["ttft_s"], m["ttft_s"]["mean"]) < 0.12
    assert rel(a["e2e_s"], m["e2e_s"]["mean"]) < 0.08
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.09


def test_where_the_kv_cache_binds_the_simulation_serves_less_by_a_bounded_gap():
    lim = Limits(max_num_seqs=256, max_num_batched_tokens=2048, block_size=16, num_blocks=2000)
    sol = Solver(step, lim, Shape(512, 256))
    assert sol.n_max == 49 and sol.bound == "kv_cache"  # 2000 blocks / ((512 + 128) / 16 + ½) = 49.4
    assert Solver(step, *CASES["decode-bound"][:1], Shape(1024, 128)).bound == "max_num_seqs"
    m = metrics(simulate(workload(2560, concurrency=128, input_len=512, output_len=256), step, lim), warmup=0.2)
    served, predicted = m["throughput"]["requests_per_s"], float(sol.closed_loop(128)["requests_per_s"])
    assert m["preemptions"] > 0 and 0 < (predicted - served) / served < 0.18


def test_past_capacity_the_open_loop_is_saturated_in_both():
    lim, P, O, h = CASES["decode-bound"]
    sol = Solver(step, lim, Shape(P, O, h))
    a = sol.open_loop([0.5 * sol.capacity, 1.5 * sol.capacity, float("inf")])
    assert a["saturated"].tolist() == [False, True, True]
    m = metrics(simulate(workload(3000, rate=1.5 * sol.capacity, input_len=P, output_len=O, seed=0), step, lim))
    assert m["saturated"] and m["saturation"].startswith("rate past saturation")


def test_the_solver_is_vectorised():
    lim, P, O, h = CASES["decode-bound"]
    sol = Solver(step, lim, Shape(P, O, h))
    many = sol.closed_loop([1, 2, 4, 300])
    assert many["requests_per_s"].shape == (4,)
    assert float(many["tpot_s"][1]) == pytest.approx(float(sol.closed_loop(2)["tpot_s"]))
    assert (abs(sol.open_loop([1.0, 2.0])["ttft_s"] - [sol.open_loop(r)["ttft_s"] for r in (1.0, 2.0)]) < 1e-12).all()


def roofline(batch):
    """benchmarks/serve_bench.py's 70B on four H100s: the larger of memory and compute time, plus 3 ms."""
    new = past = 0
    for n, p in batch:
        new += n
        past += p
    return max(35e9 / 3.35e12 + 81_920 / 3.35e12 * (past + new), 2 * 70e9 / 4 / (0.6 * 989e12) * new) + 3e-3


def test_a_roofline_step_agrees_within_a_wider_band():
    # A max of terms, not a sum: a step holding prompts is compute-bound and its decodes ride free, so prompts
    # that arrive together (a closed loop's finishes cluster: steps of 3–4 prompts) cost more than the analytic
    # solver's evenly spread prefills. Measured: closed loop at 128, throughput 4.5 % and TPOT 2.8 % optimistic;
    # open loop at ρ = 0.5, TTFT 4.5 %, E2E 1.0 %, TPOT 0.8 %.
    lim = Limits(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=60000)
    sol = Solver(roofline, lim, Shape(2048, 256))
    m = metrics(simulate(workload(2560, concurrency=128, input_len=2048, output_len=256), roofline, lim), warmup=0.2)
    a = sol.closed_loop(128)
    assert 0 < a["requests_per_s"] / m["throughput"]["requests_per_s"] - 1 < 0.08
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.06
    lam = 0.5 * sol.capacity
    m = metrics(simulate(workload(2000, rate=lam, input_len=2048, output_len=256), roofline, lim), warmup=0.1)
    a = sol.open_loop(lam)
    assert rel(a["ttft_s"], m["ttft_s"]["mean"]) < 0.12
    assert rel(a["e2e_s"], m["e2e_s"]["mean"]) < 0.08
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.09


@pytest.mark.parametrize("case", ["decode-bound", "prefill-bound"])
@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_bursty_arrivals_agree_on_e2e_and_tpot(case, cv):
    # gamma arrivals of coefficient of variation cv at ρ = 0.6, 5000 requests (bursty runs are noisy: 2000 requests
    # put E2E up to 16 % off): measured E2E within 3.9 %, TPOT within 10.2 %, TTFT within 12.3 % at cv = 0.5
    # (TTFT is not compared above cv = 1: Kingman's wait is short of the DES's, 1.1–1.8× over cv = 2–4)
    lim, P, O, h = CASES[case]
    sol = Solver(step, lim, Shape(P, O, h))
    lam = 0.6 * sol.capacity
    w = workload(5000, rate=lam, burstiness=cv, input_len=P, output_len=O, seed=0)
    m = metrics(simulate(w, step, lim), warmup=0.1)
    a = sol.open_loop(lam, cv)
    assert rel(a["e2e_s"], m["e2e_s"]["mean"]) < 0.08
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.15
    if cv < 1:
        assert rel(a["ttft_s"], m["ttft_s"]["mean"]) < 0.2


def _separate(case):
    lim, P, O, h = CASES[case]
    return dataclasses.replace(lim, mixed_batches=False), P, O


@pytest.mark.parametrize("case", ["decode-bound", "prefill-bound"])
@pytest.mark.parametrize("C", [1, 8, 32])
def test_prompts_in_steps_of_their_own_closed_loop_agrees_in_waves(case, C):
    """SGLang's scheduling (``mixed_batches`` off): a simulated closed loop of fixed lengths runs in waves, every
    user's prompt computed before the decodes go on, which is ``queue_share`` ½. Measured (seed 0): throughput
    within 2.0 %, TPOT within 2.2 %, TTFT within 6.3 % (C 1 to 32 in both cases; at C 1 exactly)."""
    lim, P, O = _separate(case)
    w = workload(max(20 * C, 200), concurrency=C, input_len=P, output_len=O, seed=0)
    m = metrics(simulate(w, step, lim), warmup=0.2)
    a = Solver(step, lim, Shape(P, O)).closed_loop(C, 0.5)
    assert rel(a["requests_per_s"], m["throughput"]["requests_per_s"]) < 0.04
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < 0.04
    assert rel(a["ttft_s"], m["ttft_s"]["mean"]) < 0.09


@pytest.mark.parametrize("case", ["decode-bound", "prefill-bound"])
@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_prompts_in_steps_of_their_own_open_loop_agrees_at_moderate_load(case, rho):
    """Measured (seed 0): TTFT within 2.6 %; TPOT and E2E within 1.0 % where decodes bind, 6.6 % and 5.6 % where
    prompts do at ρ = 0.3, 18.3 % and 16.4 % at ρ = 0.7 (chunked prompts arrive in bursts there and hold the decodes back longer
    than the mean share of time in prefill steps says)."""
    lim, P, O = _separate(case)
    lam = rho * capacity(step, lim, Shape(P, O))
    m = metrics(simulate(workload(2000, rate=lam, input_len=P, output_len=O, seed=0), step, lim), warmup=0.1)
    a = open_loop(step, lim, Shape(P, O), lam)
    assert not m["saturated"] and not a["saturated"]
    assert rel(a["ttft_s"], m["ttft_s"]["mean"]) < 0.05
    tol = 0.1 if case == "decode-bound" else 0.22
    assert rel(a["e2e_s"], m["e2e_s"]["mean"]) < tol
    assert rel(a["tpot_s"], m["tpot_s"]["mean"]) < tol
