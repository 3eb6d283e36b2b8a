"""Prefill and decode: memory-bound decoding, the KV cache, the critical batch as a limit."""

import pytest
import sympy

from costmodel import CostModelError, GraphBuilder, limit, load
from costmodel import symbols as s
from costmodel.analysis import evaluate
from costmodel.hardware import device
from costmodel.inference import (critical_batch, decode_graph, decode_step, kv_cache_bytes, prefill, summary,
                                 weight_bytes)
from costmodel.symbols import B, C, L, T, V, d

H100 = device("h100-sxm")
BW = 3_350_000_000_000


@pytest.fixture(scope="module")
def gpt67():
    return load("gpt3-6.7b")


def test_kv_cache_and_weights_by_hand():
    G = load("gpt").graph
    assert kv_cache_bytes(G) == 2 * 2 * B * C * L * d  # k and v, bf16, d per token per layer
    w = weight_bytes(G)
    matrices = 2 * (12 * L * d**2 + V * d)  # bf16: 4d² attention + 8d² MLP per layer; the tied unembedding
    # the rest is biases (9d), LayerNorm gains and biases (4d) per layer, ln_f, and the position row: O(L·d)
    assert sympy.degree(sympy.expand(w - matrices), d) == 1
    assert w.subs(T, 1) == w  # nothing of it grows with the context either


def test_decode_latency_is_weights_plus_kv_over_bandwidth(gpt67):
    v = {**gpt67.values, B: 1, C: 4096}
    _, step = decode_step(gpt67.graph, v, H100)
    # GPT-3 6.7B (L=32, d=4096, V=50257) in bf16: weights 2·(12·32·4096² + 50257·4096) = 13,296,607,232 B,
    # KV cache 2·2·32·4096·4096 = 2,147,483,648 B; the rest (activations, biases) is small
    floor = sympy.Rational(13_296_607_232 + 2_147_483_648, BW)
    assert floor <= step.time_s <= floor * sympy.Rational(101, 100)
    assert step.bound == "memory"


def test_summary_numbers(gpt67):
    out = summary(gpt67.graph, {**gpt67.values, B: 1, C: 4096}, H100, batches=(1, 8, 64))
    assert out["kv_cache_bytes"] == 2_147_483_648
    assert 13_296_607_232 <= out["weights_bytes"] <= 13_296_607_232 * 1.001  # the matrices, plus biases and gains
    assert out["tokens_per_s"] == pytest.approx(1 / out["step_s"])
    rates = [c["tokens_per_s"] for c in out["throughput"]]
    assert rates == sorted(rates)  # batching raises throughput
    assert out["critical_batch"] is None  # C = 4096 with full MHA: each sequence's KV read is below the ridge


def test_critical_batch_tends_to_the_ridge():
    G = load("gpt").graph
    ridge = sympy.Symbol("I_star", positive=True)
    b_star = critical_batch(G, ridge)
    # no KV cache (C → 0) and wide models (d → ∞): reading each bf16 weight (2 B) serves 2 FLOPs per sequence,
    # so intensity ≈ B and decoding turns compute-bound at B* = I*
    assert limit(limit(b_star, C, 0) / ridge, d, sympy.oo) == 1


def test_critical_batch_near_ridge_for_short_context(gpt67):
    b = evaluate(critical_batch(gpt67.graph, H100.ridge("bf16")), {**gpt67.values, C: 1})
    assert 295 < b < 2 * 295  # above I* ≈ 295: per-token activation traffic also grows with B


def test_prefill_is_the_forward_without_loss(gpt67):
    rows, t = prefill(gpt67.graph, {**gpt67.values, B: 1, T: 2048}, H100)
    assert all(r.kind != "loss" for r in rows)
    assert t.time_s >= t.flops / H100.peak("bf16")


def test_decode_needs_a_key_axis():
    b = GraphBuilder("mlp", b=s.B, t=s.T, d=s.d)
    b.matmul("fc", b.input("x", "b t d", dtype="bf16"), "b t d, d e -> b t e", e=s.d)
    with pytest.raises(CostModelError, match="no op reading the KV cache"):
        decode_graph(b.graph)


def test_batching_turns_short_context_decode_compute_bound(gpt67):
    out = summary(gpt67.graph, {**gpt67.values, B: 1, C: 16}, H100, batches=(64, 256, 1024, 2048))
    b_star = out["critical_batch"]
    assert 295 < b_star < 1024
    for point in out["throughput"]:  # the pooled step bound flips at B*
        assert point["bound"] == ("compute" if point["batch"] > b_star else "memory")
    assert 16 < out["max_context_compute_bound"] < 4096  # past it, no batch makes decoding compute-bound
    assert out["flops_expr"].endswith("*B") and "B*C" in out["bytes_expr"]


def test_fused_flash_decode_reads_exactly_the_kv_cache():
    from costmodel.inference import decode_cost, prefill_graph
    from costmodel.passes import flash_attention, fuse_elementwise

    G = fuse_elementwise(flash_attention(prefill_graph(load("gpt").graph)), training=False)
    per_step = decode_cost(G)
    # with attention fused, the only traffic growing with B·C is the KV cache: k and v, bf16, d per layer
    assert sympy.Poly(per_step.bytes, B, C).coeff_monomial(B * C) == 4 * L * d
    assert sympy.expand(weight_bytes(G) - weight_bytes(prefill_graph(load("gpt").graph))) == 0  # fusing moves no weight


def test_decode_intensity_is_the_batch():
    from costmodel.inference import decode_intensity

    i = decode_intensity(load("gpt").graph)
    # the lecture: small-batch decoding reads every weight for B tokens, so I ∝ B (no KV cache, wide model)
    assert limit(limit(i, C, 0), d, sympy.oo) == B
