"""The step time of a mixed batch (costmodel.serving.step): its FLOPs against PyTorch's FlopCounterMode on a
transformers model built from the same config.json, its sums against brute force, and its time's shape.

FlopCounterMode counts every query–key product of eager attention, the causal mask's zeros included: a chunk of c
new tokens after p cached ones is counted over the c × (p + c) rectangle, where the engine counts the causal
c·p + c(c+1)/2 pairs. The difference, c(c − 1)/2 masked pairs × 4·h·d_head FLOPs per layer, is written out in
the test. transformers is asked for the logits of the last position only (``logits_to_keep=1``), as an engine
samples one token per request.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import costmodel
from costmodel.devices.table import device
from costmodel.families import load
from costmodel.memory.device import prepared
from costmodel.options import Options
from costmodel.serving.profiles import profile
from costmodel.serving.step import pairs, step_model

LLAMA = {
    "model_type": "llama",
    "vocab_size": 96,
    "hidden_size": 64,
    "intermediate_size": 80,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def _step(path_or_name, **kw):
    m = load(path_or_name) if not isinstance(path_or_name, costmodel.families.Model) else path_or_name
    return step_model(prepared(m.graph, Options(inference=True)), m.values, device("h100-sxm"), **kw)


@pytest.mark.torch
def test_flops_of_a_mixed_batch_equal_flop_counter_per_request(tmp_path):
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in LLAMA.items()})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")

    def counted(c: int, p: int) -> int:
        """FlopCounterMode over c new tokens after a cache of p, less the masked pairs it counts."""
        cache = None
        with torch.no_grad():
            if p:
                cache = model(input_ids=torch.zeros(1, p, dtype=torch.long, device="meta"), use_cache=True).cache
            with FlopCounterMode(display=False) as fc:
                model(
                    input_ids=torch.zeros(1, c, dtype=torch.long, device="meta"),
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
        head_dim = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
        masked = c * (c - 1) // 2  # pairs above the causal diagonal of the chunk
        return fc.get_total_flops() - LLAMA["num_hidden_layers"] * 4 * LLAMA["num_attention_heads"] * head_dim * masked

    sm = _step(str(path))
    batch = [(1, 7), (5, 0), (3, 4), (1, 30)]
    assert sm.step_flops(batch, matmul=True) == sum(counted(c, p) for c, p in batch)
    assert sm.step_flops([(6, 0)], matmul=True) == counted(6, 0)


@given(c=st.integers(1, 60), p=st.integers(0, 80), w=st.one_of(st.none(), st.integers(1, 100)))
@settings(max_examples=200)
def test_pairs_closed_form_is_the_sum(c, p, w):
    assert pairs(c, p, w) == sum(min(p + j, w) if w else p + j for j in range(1, c + 1))


def test_decode_step_grows_with_batch_and_context_and_reads_weights_once():
    sm = _step(costmodel.load("llama3-8b"))
    one, many = sm([(1, 1024)]), sm([(1, 1024)] * 64)
    assert sm([(1, 4096)] * 64) > many > one
    # 64 sequences cost far less than 64 steps of one: the weights are read once per step
    assert many < 4 * one
    parts = sm.breakdown([(1, 1024)] * 64)
    assert sum(parts.values()) == pytest.approx(many, rel=1e-12)
    assert parts["weights"] > parts["compute"]  # decode at batch 64 is memory-bound


def test_prefill_is_compute_bound_and_linear_layers_scale_with_tokens():
    sm = _step(costmodel.load("llama3-8b"))
    parts = sm.breakdown([(4096, 0)])
    assert parts["compute"] > parts["weights"] + parts["kv"]
    # exact FLOPs: doubling the chunk doubles the per-token work and quadruples the pairs
    f1, f2 = sm.step_flops([(1024, 0)]), sm.step_flops([(2048, 0)])
    assert 2 * f1 < f2 < 4 * f1


def test_moe_decode_reads_the_experts_it_touches():
    # issue 30, item 3: a token touches top_k of E experts; B tokens about E·(1 − (1 − k/E)^B) of them
    m = costmodel.load("qwen3-30b-a3b")
    sm = _step(m)
    assert sm.routing == (128, 8)
    one, full = sm.breakdown([(1, 4096)])["weights"], sm.breakdown([(1, 4096)] * 512)["weights"]
    assert one < full / 5  # at batch 1, 8/128 of the expert weights and the attention weights


def test_cuda_graph_steps_pay_no_launches():
    p = profile("vllm-v1")
    sm = _step(
        costmodel.load("llama3-8b"),
        graph_sizes=p.cuda_graph_sizes,
        graph_kernel_overhead_s=p.graph_kernel_overhead_s,
        layer_overhead_s=p.layer_overhead_s,
    )
    assert sm.sizes([(1, 10)] * 8)[sm.eager] == 0
    assert sm.sizes([(1, 10)] * 600)[sm.eager] == 1  # past the largest captured size: eager
    assert sm.sizes([(2, 10)])[sm.eager] == 1  # a prefill chunk runs eagerly
    assert sm.breakdown([(1, 10)] * 8)["overhead"] < sm.breakdown([(1, 10)] * 600)["overhead"]


def test_tensor_parallel_step_is_faster_and_communicates():
    m = costmodel.load("llama3-70b")
    one = _step(m, tp=1)
    four = _step(m, tp=4, allreduce_latency_s=1e-5)
    batch = [(1, 2048)] * 32
    assert four(batch) < one(batch)
    assert four.breakdown(batch)["communication"] > 0 == one.breakdown(batch)["communication"]
    assert four.step_flops(batch) * 4 == pytest.approx(one.step_flops(batch), rel=0.02)


def test_serving_formulas_evaluate_to_the_step_and_the_ridge():
    import sympy

    from costmodel.serving.formulas import BANDWIDTH, PEAK, P, decode_time, prefill_time, symbolic
    from costmodel.symbols import B, C

    m = costmodel.load("llama3-8b")
    sm = _step(m)
    tpot, ttft = decode_time(sm), prefill_time(sm)
    assert float(tpot.subs({B: 16, C: 1000})) == pytest.approx(sm([(1, 1000)] * 16), rel=1e-12)
    assert float(ttft.subs({P: 3000})) == pytest.approx(sm([(3000, 0)]), rel=1e-12)
    s = symbolic(prepared(m.graph, Options(inference=True)))
    # at the critical batch the decode step's FLOPs per byte equal the ridge P_peak/W (its defining property)
    at = {**{k: v for k, v in m.values.items() if k not in (B, C)}, C: 128, PEAK: 989 * 10**12, BANDWIDTH: 3 * 10**12}
    b_star = s["critical_batch"].subs(at)
    assert b_star > 0
    ratio = (s["decode_flops"] / s["decode_bytes"]).subs(at).subs(B, b_star)
    assert sympy.nsimplify(ratio) == sympy.Rational(989, 3) or abs(float(ratio) - 989 / 3) < 1e-9


def test_expert_parallel_step_dispatches_and_shares_the_experts():
    m = costmodel.load("qwen3-30b-a3b")
    one = _step(m)
    tp = _step(m, tp=4, allreduce_latency_s=1e-5)
    ep = _step(m, tp=4, ep=4, allreduce_latency_s=1e-5)
    hot = _step(m, tp=4, ep=4, allreduce_latency_s=1e-5, imbalance=1.5)
    batch = [(1, 2048)] * 64
    # every device computes a quarter of the token-expert work, whether tp or ep shards the experts
    assert tp.step_flops(batch) == ep.step_flops(batch)
    assert 4 * ep.step_flops(batch) == pytest.approx(one.step_flops(batch), rel=0.01)
    # the all-to-all of dispatch and combine is communication tp alone does not have
    assert ep.breakdown(batch)["communication"] > tp.breakdown(batch)["communication"]
    assert hot.step_flops(batch) > ep.step_flops(batch) and hot(batch) >= ep(batch)
    with pytest.raises(costmodel.CostModelError, match="imbalance"):
        _step(m, imbalance=0.5)
    with pytest.raises(costmodel.CostModelError, match="ep"):
        costmodel.serve("qwen3-30b-a3b", "h100-sxm", options=costmodel.Options.make(tp=2, ep=4), rate=1, requests=5)
