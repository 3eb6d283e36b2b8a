"""Disaggregated prefill and decode (costmodel.serving.disagg): a hand-computed request, the KV transfer's
arithmetic, and the property disaggregation exists for (decodes no longer wait behind prefills)."""

from __future__ import annotations

import pytest

import costmodel
from costmodel.serving.batch import Limits, Request
from costmodel.serving.disagg import Pools, kv_transfer_s, simulate_disaggregated
from costmodel.serving.metrics import metrics


def test_one_request_by_hand():
    # prefill: one step of 0.1 s emits the first token at 0.1; the KV takes 0.05 s; on the decode instance the
    # prompt and first token (17 tokens) are cached but for the partial block (17 - 16 = 1 token), computed in the
    # first step with token 2 at 0.15 + 0.01; tokens 3 and 4 at 0.17 and 0.18
    limits = Limits(max_num_seqs=8, max_num_batched_tokens=64, block_size=16, num_blocks=100)
    combined, prefill = simulate_disaggregated(
        [Request(0.0, 16, 4)], lambda b: 0.1, limits, lambda b: 0.01, limits, Pools(1, 1), lambda tokens: 0.05
    )
    assert prefill.first_token_s[0] == pytest.approx(0.1)
    assert combined.first_token_s[0] == pytest.approx(0.1)
    assert combined.finish_s[0] == pytest.approx(0.18)
    m = metrics(combined)
    assert m["ttft_s"]["mean"] == pytest.approx(0.1)
    assert m["tpot_s"]["mean"] == pytest.approx((0.18 - 0.1) / 3)
    assert m["e2e_s"]["mean"] == pytest.approx(0.18)


def test_kv_transfer_by_hand():
    # llama3-70b under tp 4: 2 (K, V) x 80 layers x 8/4 kv heads x 128 x 2 bytes = 81,920 bytes a token a rank;
    # 2,048 tokens over 45 GB/s: 167,772,160 / 45e9 = 3.728 ms, plus 20 us of latency; streamed by layer, 1/80 of it
    t = kv_transfer_s(2048, 81_920, 45e9, 20e-6, 80, overlap=False)
    assert t == pytest.approx(20e-6 + 167_772_160 / 45e9)
    assert kv_transfer_s(2048, 81_920, 45e9, 20e-6, 80, overlap=True) == pytest.approx(20e-6 + 167_772_160 / 45e9 / 80)
    assert Pools.parse("1:3") == Pools(1, 3) and Pools.parse("2:5:overlap").overlap
    with pytest.raises(costmodel.CostModelError, match="P:D"):
        Pools.parse("1-3")


def test_decodes_stop_waiting_behind_prefills():
    kw = {"rate": 3, "requests": 150, "input_len": "2048", "output_len": "128", "seed": 3}
    agg = costmodel.serve("llama3-8b", "h100-sxm", replicas=2, **kw)["serving"]
    dis = costmodel.serve("llama3-8b", "h100-sxm", disaggregate="1:1", **kw)["serving"]
    assert dis["gpus"] == agg["gpus"] == 2
    assert dis["tpot_s"]["p99"] < agg["tpot_s"]["p99"]
    assert dis["disaggregation"]["kv_transfer_s_mean_request"] > 0
    with pytest.raises(costmodel.CostModelError, match="replicas"):
        costmodel.serve("llama3-8b", "h100-sxm", disaggregate="1:1", replicas=2, rate=1, requests=10)
