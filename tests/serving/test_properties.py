"""Properties of the simulation over random small workloads and scheduler limits (hypothesis, the profile of
tests/conftest.py): every request finishes with exactly its output tokens, in order; no step exceeds its limits
or the KV cache; tokens come no faster than the step times allow; throughput grows with concurrency."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from costmodel.serving.analytic import Shape, closed_loop
from costmodel.serving.batch import Limits, Request
from costmodel.serving.metrics import metrics
from costmodel.serving.simulate import simulate
from costmodel.serving.workload import workload


@st.composite
def cases(draw):
    chunked = draw(st.booleans())
    reqs = [
        Request(
            draw(st.floats(0, 0.5)),
            inp := draw(st.integers(1, 40)),
            draw(st.integers(1, 20)),
            draw(st.integers(0, inp)),
        )
        for _ in range(draw(st.integers(1, 12)))
    ]
    bs = draw(st.integers(1, 8))
    need = max(-(-(r.input_tokens + r.output_tokens - 1) // bs) for r in reqs)
    budget = draw(st.integers(1 if chunked else max(r.input_tokens for r in reqs), 64))
    sizes = draw(st.lists(st.integers(1, 16), max_size=4, unique=True))
    lim = Limits(
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=budget,
        block_size=bs,
        num_blocks=draw(st.integers(need, 3 * need)),
        chunked_prefill=chunked,
        max_partial_prefills=draw(st.integers(1, 3)),
        decode_first=draw(st.booleans()),
        prefix_caching=draw(st.booleans()),
        cuda_graph_sizes=tuple(sorted(sizes)),
    )
    a, b, c = draw(st.floats(1e-3, 1e-2)), draw(st.floats(0, 1e-4)), draw(st.floats(0, 1e-6))
    return reqs, lim, (a, b, c)


class Checked:
    """An affine step time that checks every batch against the limits as it is handed one."""

    def __init__(self, lim, coeffs):
        self.lim, (self.a, self.b, self.c), self.shortest = lim, coeffs, np.inf

    def __call__(self, batch):
        lim = self.lim
        # a pad is (1, 0), as is a one-token prompt: leave both out of the checks below (each a lower bound)
        real = [e for e in batch if e != (1, 0)]
        assert 1 <= len(batch) <= lim.padded(lim.max_num_seqs) and len(real) <= lim.max_num_seqs
        assert all(new >= 1 and past >= 0 for new, past in batch)
        if lim.chunked_prefill:
            assert sum(new for new, _ in real) <= lim.max_num_batched_tokens
        # the scheduled requests alone hold at least these blocks
        assert sum(-(-(new + past) // lim.block_size) for new, past in real) <= lim.num_blocks
        t = self.a + self.b * sum(n for n, _ in batch) + self.c * sum(p for _, p in batch)
        self.shortest = min(self.shortest, t)
        return t


@given(cases())
def test_every_request_finishes_with_exactly_its_tokens_within_the_limits(case):
    reqs, lim, coeffs = case
    step = Checked(lim, coeffs)
    sim = simulate(reqs, step, lim)
    assert sim.finished.all() and not sim.saturated
    assert sim.peak_blocks <= lim.num_blocks
    for i, r in enumerate(sim.requests):
        times = sim.token_times(i)
        assert len(times) == r.output_tokens
        assert np.all(np.diff(times) > 0)
        assert times[0] == sim.first_token_s[i] > r.arrival_s and times[-1] == sim.finish_s[i]
    # every token is made by a step that ran its request: at most one a request a step
    assert sim.output_tokens.sum() <= sim.step_seqs.sum()
    # the clock never runs faster than the steps: the busy time fits before the last finish, and tokens/s stays
    # under the most a step can make (max_num_seqs tokens) over the shortest step
    assert sim.busy_s <= sim.finish_s.max() + 1e-12
    m = metrics(sim)
    assert m["throughput"]["output_tokens_per_s"] <= lim.max_num_seqs / step.shortest * (1 + 1e-9)
    # computed tokens: at least every prompt (less its hits) and every output but the last
    hits = sum(min(r.prefix_tokens // lim.block_size * lim.block_size, r.input_tokens - 1) for r in reqs)
    least = sum(r.input_tokens + r.output_tokens - 1 for r in reqs) - (hits if lim.prefix_caching else 0)
    assert sim.step_tokens.sum() >= least
    assert sim.preemptions.sum() > 0 or sim.step_tokens.sum() == least


@given(cases(), st.integers(0, 2**32 - 1))
def test_a_seed_fixes_the_whole_simulation(case, seed):
    _, lim, coeffs = case
    lim = replace(lim, num_blocks=1000)
    step = Checked(lim, coeffs)
    longest = lim.max_num_batched_tokens if not lim.chunked_prefill else 40
    w = workload(20, rate=50.0, input_len=f"uniform:1:{longest}", output_len="uniform:1:10", seed=seed)
    one, two = simulate(w, step, lim), simulate(w, step, lim)
    assert np.array_equal(one.finish_s, two.finish_s) and np.array_equal(one.segments, two.segments)


@given(
    st.floats(1e-3, 2e-2),
    st.floats(1e-7, 1e-4),
    st.integers(1, 64),
    st.integers(2, 32),
)
def test_throughput_grows_with_concurrency_for_an_affine_step(a, b, prompt, out):
    def step(batch):
        return a + b * sum(n for n, _ in batch)

    lim = Limits(max_num_seqs=16, max_num_batched_tokens=256, block_size=16, num_blocks=10000)
    served = []
    for C in (1, 2, 4, 8, 16):
        sim = simulate(workload(6 * C, concurrency=C, input_len=prompt, output_len=out), step, lim)
        served.append(metrics(sim)["throughput"]["output_tokens_per_s"])
    assert all(later >= 0.9 * earlier for earlier, later in zip(served, served[1:]))
    predicted = closed_loop(step, lim, Shape(prompt, out), np.array([1, 2, 4, 8, 16]))["output_tokens_per_s"]
    assert np.all(np.diff(predicted) >= -1e-9 * predicted[:-1])
