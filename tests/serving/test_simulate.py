"""The discrete-event simulation on small cases computed by hand: the schedule step by step, chunking,
preemption by recompute, CUDA-graph padding, prefix-cache hits, whole prefills, closed loops and saturation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pytest import approx

from costmodel.errors import CostModelError
from costmodel.serving.batch import Limits, Request
from costmodel.serving.simulate import simulate
from costmodel.serving.workload import Workload, workload


def affine(batch):
    """10 ms a step + 1 µs a new token."""
    return 0.010 + 1e-6 * sum(new for new, _ in batch)


class Recorder:
    """A step time that keeps every batch it was given."""

    def __init__(self, step=affine):
        self.step, self.batches = step, []

    def __call__(self, batch):
        self.batches.append(list(batch))
        return self.step(batch)


def limits(**kw):
    base = dict(max_num_seqs=8, max_num_batched_tokens=4, block_size=16, num_blocks=100)
    return Limits(**{**base, **kw})


def test_two_requests_four_prompt_tokens_three_outputs_budget_four():
    # Requests A and B at t = 0, prompts of 4 tokens, 3 outputs each, a budget of 4 tokens a step:
    # step 0: A's prompt (4, 0)                       10 ms + 4 µs → ends 0.010004; A's 1st token (TTFT A)
    # step 1: A decodes (1, 4); B's first 3 (3, 0)    10 ms + 4 µs → 0.020008; A's 2nd token
    # step 2: A (1, 5); B's last prompt token (1, 3)  10 ms + 2 µs → 0.030010; A's 3rd (E2E A), B's 1st (TTFT B)
    # step 3: B (1, 4)                                10 ms + 1 µs → 0.040011
    # step 4: B (1, 5)                                10 ms + 1 µs → 0.050012; B's 3rd token (E2E B)
    rec = Recorder()
    sim = simulate([Request(0, 4, 3), Request(0, 4, 3)], rec, limits())
    assert rec.batches == [[(4, 0)], [(1, 4), (3, 0)], [(1, 5), (1, 3)], [(1, 4)], [(1, 5)]]
    assert sim.first_token_s.tolist() == approx([0.010004, 0.030010], abs=1e-12)
    assert sim.finish_s.tolist() == approx([0.030010, 0.050012], abs=1e-12)
    assert sim.token_times(0).tolist() == approx([0.010004, 0.020008, 0.030010], abs=1e-12)
    assert sim.token_times(1).tolist() == approx([0.030010, 0.040011, 0.050012], abs=1e-12)
    assert sim.busy_s == approx(0.050012) and not sim.saturated and sim.preemptions.tolist() == [0, 0]


def test_chunking_splits_a_prompt_across_steps():
    # a 10-token prompt at a budget of 4: chunks (4, 0), (4, 4), (2, 8); the first token at the end of the third
    # step (3·10 ms + 10 µs = 0.030010), then one decode (1, 10): 0.040011
    rec = Recorder()
    sim = simulate([Request(0, 10, 2)], rec, limits())
    assert rec.batches == [[(4, 0)], [(4, 4)], [(2, 8)], [(1, 10)]]
    assert sim.first_token_s[0] == approx(0.030010) and sim.finish_s[0] == approx(0.040011)


def test_one_partial_prefill_at_a_time():
    # budget 8: A (6 tokens) whole, B would be partial with 2 of its 6 — allowed, it is the only partial;
    # C (6) would be a second partial and waits
    rec = Recorder()
    simulate([Request(0, 6, 1), Request(0, 6, 1), Request(0, 6, 1)], rec, limits(max_num_batched_tokens=8))
    assert rec.batches[0] == [(6, 0), (2, 0)]
    assert rec.batches[1] == [(4, 2), (4, 0)]  # B finishes, C starts as the one partial


def test_without_chunked_prefill_a_prompt_is_prefilled_whole():
    rec = Recorder()
    lim = limits(max_num_batched_tokens=8, chunked_prefill=False)
    simulate([Request(0, 6, 2), Request(0, 6, 2)], rec, lim)
    assert rec.batches[:3] == [[(6, 0)], [(1, 6), (6, 0)], [(1, 6)]]
    with pytest.raises(CostModelError, match="exceeds max_num_batched_tokens 8 without chunked prefill"):
        simulate([Request(0, 9, 2)], affine, lim)


def test_preemption_by_recompute_when_blocks_run_out():
    # blocks of 2 tokens, 4 blocks; A and B: prompts of 2, 4 outputs each, at t = 0, budget 8
    # step 0: both prompts (2, 0) (2, 0): a block each, 2 free          → 0.010004, 1st tokens
    # step 1: decodes (1, 2) (1, 2) each start a block: 0 free          → 0.020006
    # step 2: (1, 3) (1, 3) within their blocks                         → 0.030008, 3rd tokens
    # step 3: A's (1, 4) needs a block: B (latest admitted) is preempted, its 2 blocks freed; A alone
    #         → 0.040009, A's 4th token: A is done, its 3 blocks freed
    # step 4: B again, its prompt and 3 tokens made (5, 0): 3 blocks    → 0.050014, B's 4th token
    rec = Recorder()
    lim = limits(max_num_batched_tokens=8, block_size=2, num_blocks=4)
    sim = simulate([Request(0, 2, 4), Request(0, 2, 4)], rec, lim)
    assert rec.batches == [[(2, 0), (2, 0)], [(1, 2), (1, 2)], [(1, 3), (1, 3)], [(1, 4)], [(5, 0)]]
    assert sim.preemptions.tolist() == [0, 1]
    assert sim.finish_s.tolist() == approx([0.040009, 0.050014])
    assert sim.token_times(1).tolist() == approx([0.010004, 0.020006, 0.030008, 0.050014])
    assert sim.peak_blocks == 4


def test_a_request_larger_than_the_kv_cache_is_an_error():
    with pytest.raises(CostModelError, match="needs 3 KV blocks of 2 tokens, the replica has 2"):
        simulate([Request(0, 2, 4)], affine, limits(block_size=2, num_blocks=2))


def test_cuda_graph_padding_changes_the_decode_step_time():
    # three decodes run as the captured graph of 4: a pad (1, 0); at 1 ms an entry the step costs 14 ms, not 13
    def per_entry(batch):
        return 0.010 + 1e-3 * len(batch)

    reqs = [Request(0, 2, 3) for _ in range(3)]
    rec = Recorder(per_entry)
    padded = simulate(reqs, rec, limits(max_num_batched_tokens=8, cuda_graph_sizes=(1, 2, 4, 8)))
    assert rec.batches[0] == [(2, 0)] * 3  # a prefill step is not padded
    assert rec.batches[1] == [(1, 2)] * 3 + [(1, 0)]
    plain = simulate(reqs, per_entry, limits(max_num_batched_tokens=8))
    assert padded.finish_s[0] - plain.finish_s[0] == approx(2e-3)  # two decode steps, 1 ms each


def test_prefix_cache_hits_reduce_the_prefill_tokens():
    # a 40-token prompt of which 35 are a shared prefix: blocks of 16 → 32 tokens hit, 8 computed after them
    rec = Recorder()
    lim = dict(max_num_batched_tokens=64, prefix_caching=True)
    simulate([Request(0, 40, 1, prefix_tokens=35)], rec, limits(**lim))
    assert rec.batches == [[(8, 32)]]
    rec = Recorder()
    simulate([Request(0, 32, 1, prefix_tokens=32)], rec, limits(**lim))
    assert rec.batches == [[(1, 31)]]  # the last token is always computed
    rec = Recorder()
    simulate([Request(0, 40, 1, prefix_tokens=35)], rec, limits(max_num_batched_tokens=64))
    assert rec.batches == [[(40, 0)]]  # the cache off


def test_decode_first_off_gives_prefills_the_budget():
    # budget 4: A decoding, B's prompt of 4 arrives; prefill first takes all 4 tokens and A's decode waits
    rec = Recorder()
    reqs = [Request(0, 2, 3), Request(0.015, 4, 1)]
    simulate(reqs, rec, limits(decode_first=False))
    assert rec.batches[:3] == [[(2, 0)], [(1, 2)], [(4, 0)]]
    assert rec.batches[3] == [(1, 3)]


def test_the_clock_jumps_to_the_next_arrival():
    sim = simulate([Request(5.0, 4, 1)], affine, limits())
    assert sim.first_token_s[0] == approx(5.010004)


def test_a_closed_loop_issues_a_request_when_one_finishes():
    w = workload(3, concurrency=1, input_len=4, output_len=2)
    sim = simulate(w, affine, limits())
    assert sim.arrival_s[0] == 0 and sim.arrival_s[1:].tolist() == approx(sim.finish_s[:2].tolist())
    assert [r.arrival_s for r in sim.requests] == sim.arrival_s.tolist()


def test_saturation_stops_with_a_reason_not_an_exception():
    w = workload(2000, rate=1000.0, input_len=64, output_len=64, seed=1)
    sim = simulate(w, affine, limits(max_num_batched_tokens=256, max_num_seqs=4), max_waiting=1000)
    assert sim.saturated and re.match(r"rate past saturation: \d+ requests waiting \(more than 1000\)", sim.reason)
    assert 0 < sim.finished.sum() < 2000
    offline = simulate(Workload(w.requests[:300]), affine, limits(max_num_batched_tokens=256, max_num_seqs=4))
    assert not offline.saturated  # 300 requests, under the bound


def test_rate_inf_is_never_called_saturated():
    w = workload(2000, rate=float("inf"), input_len=8, output_len=2)
    sim = simulate(w, affine, limits(max_num_batched_tokens=256, max_num_seqs=64), max_waiting=10)
    assert not sim.saturated and sim.finished.all()


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_step_time_that_is_not_a_duration_is_an_error(bad):
    with pytest.raises(CostModelError, match="the step time of a batch of 1 requests is"):
        simulate([Request(0, 4, 2)], lambda batch: bad, limits())


def test_a_run_stops_at_its_step_limit_and_says_so():
    sim = simulate([Request(0, 4, 50)], affine, limits(), max_steps=10)
    assert not sim.saturated and sim.reason == "stopped at the step limit: 10 steps, 0 of 1 requests finished"
    assert len(sim.step_end_s) == 10 and not sim.finished.any()


def test_prompts_in_steps_of_their_own_hold_the_decodes_back():
    # every step takes 1 s. A (t 0, 4 prompt tokens, 3 outputs) and B (t 0.5, 4, 2):
    # mixed (vLLM): step 1 A's prompt (A's 1st token at 1); step 2 A decodes with B's prompt (A 2nd, B 1st at 2);
    #   step 3 both decode (A 3rd, B 2nd at 3): A E2E 3, B TTFT 1.5, E2E 2.5
    # separate (SGLang): step 2 is B's prompt alone (B 1st at 2), step 3 both decode (A 2nd, B 2nd at 3), step 4
    #   A's 3rd at 4: A E2E 4, B TTFT 1.5, E2E 2.5
    reqs = [Request(0, 4, 3), Request(0.5, 4, 2)]
    lim = Limits(max_num_seqs=8, max_num_batched_tokens=64, block_size=16, num_blocks=100)
    mixed = simulate(reqs, lambda b: 1.0, lim)
    alone = simulate(reqs, lambda b: 1.0, Limits(**{**lim.__dict__, "mixed_batches": False}))
    assert mixed.first_token_s.tolist() == [1.0, 2.0] and mixed.finish_s.tolist() == [3.0, 3.0]
    assert alone.first_token_s.tolist() == [1.0, 2.0] and alone.finish_s.tolist() == [4.0, 3.0]


def test_a_profile_file_without_mixed_batches_mixes():
    import json

    from costmodel.serving.profiles import WHERE, parse_profiles, profile

    data = json.loads((Path(__file__).resolve().parents[2] / WHERE).read_text(encoding="utf-8"))
    for entry in data["engines"].values():
        del entry["mixed_batches"]
    assert all(p.mixed_batches for p in parse_profiles(data, "test").values())
    # the built-in SGLang profile runs prompts alone, and says where that comes from
    assert not profile("sglang").mixed_batches and "get_next_batch_to_run" in profile("sglang").sources["mixed_batches"]
