"""Prefill and decode: memory-bound decoding, the KV cache, the critical batch as a limit."""

import pytest
import sympy

from costmodel import CostModelError, load
from costmodel.devices.table import device
from costmodel.graph.analysis import evaluate
from costmodel.graph.decode import decode_graph
from costmodel.kit import GraphBuilder, limit
from costmodel.kit import symbols as s
from costmodel.sections.decode import (
    critical_batch,
    decode_cost,
    decode_step,
    kv_cache_bytes,
    prefill,
    summary,
    weight_bytes,
)
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
    from costmodel.graph.decode import prefill_graph
    from costmodel.graph.passes import flash_attention, fuse_elementwise
    from costmodel.sections.decode import decode_cost

    G = fuse_elementwise(flash_attention(prefill_graph(load("gpt").graph)), training=False)
    per_step = decode_cost(G)
    # with attention fused, the only traffic growing with B·C is the KV cache: k and v, bf16, d per layer
    assert sympy.Poly(per_step.bytes, B, C).coeff_monomial(B * C) == 4 * L * d
    assert sympy.expand(weight_bytes(G) - weight_bytes(prefill_graph(load("gpt").graph))) == 0  # fusing moves no weight


def test_decode_intensity_is_the_batch():
    from costmodel.sections.decode import decode_intensity

    i = decode_intensity(load("gpt").graph)
    # the lecture: small-batch decoding reads every weight for B tokens, so I ∝ B (no KV cache, wide model)
    assert limit(limit(i, C, 0), d, sympy.oo) == B


# -- which ops read the cache: data flow from the kv_cache tags, not axis names ------------------


def _decoded(model: str, **settings):
    m = load(model, settings or None)
    return m, decode_graph(m.graph)


def test_sliding_window_decode_reads_min_c_w_keys():
    from costmodel.graph.registry import op_cost

    m, H = _decoded("mistral-7b-swa")
    v = {k: val for k, val in m.values.items() if k not in (B, C, T)}
    attn = sum(
        (op_cost(H.nodes[f"layers.attn.{n}"]["op"]).forward.matmul_flops for n in ("scores", "context")),
        sympy.Integer(0),
    )
    # one new query per sequence meets min(C, W) keys: scores and context, 2 FLOPs per multiply-add,
    # 32 heads of 128: 2·2·B·h·min(C, W)·d_head
    for c in (1000, 4096, 16384):
        assert evaluate(attn, {**v, B: 8, C: c}) == 2 * 2 * 8 * 32 * min(c, 4096) * 128
    # at C ≥ W the step equals dense attention over W keys; below W it grows with C
    flops = lambda c: evaluate(decode_cost(m.graph, v).flops, {B: 8, C: c})  # noqa: E731
    dense = load("mistral-7b")
    dense_flops = evaluate(decode_cost(dense.graph).flops, {**dense.values, B: 8, C: 4096})
    assert flops(16384) == flops(4096) == dense_flops
    assert flops(2048) < flops(4096)


def test_sliding_window_decode_step_reads_the_window():
    m, _ = _decoded("mistral-7b-swa")
    v = {k: val for k, val in m.values.items() if k not in (B, C, T)}
    moved = lambda c: evaluate(decode_cost(m.graph, v).bytes, {B: 1, C: c})  # noqa: E731
    # doubling the context from W/2 to W adds each layer's K and V for W/2 more keys at least:
    # 32 layers · 2 (k, v) · 8 kv heads · 2048 keys · 128 · 2 bytes
    assert moved(4096) - moved(2048) >= 32 * 2 * 8 * 2048 * 128 * 2
    assert moved(32768) == moved(4096)  # past the window nothing more is read
    assert moved(4096) - evaluate(weight_bytes(m.graph), v) >= 32 * 2 * 8 * 4096 * 128 * 2


def test_roofline_cli_decode_sliding_window(capsys):
    import json

    from costmodel.cli import main

    main(
        [
            "roofline",
            "mistral-7b-swa",
            "--hardware",
            "h100-sxm",
            "--decode",
            "--context",
            "16384",
            "--batch",
            "8",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    ops = {o["name"]: o for o in out["ops"]}
    # 32 layers × 2·B·h·min(C, W)·d_head = 32 · 2·8·32·4096·128 for each of scores and context
    assert ops["layers.attn.scores"]["flops"] == ops["layers.attn.context"]["flops"] == 32 * 2 * 8 * 32 * 4096 * 128
    assert "Min(4096, C)" in out["decode"]["flops_expr"]


def test_inference_pipeline_stages_hold_their_share_of_the_weights():
    from costmodel import estimate
    from costmodel.render.results import flatten

    one = flatten(estimate("llama2-7b", inference=True, context=4096))
    two = flatten(estimate("llama2-7b", inference=True, context=4096, pp=2))
    # LLaMA-2 7B: layer = 4d² + 3·d·d_ff + 2d = 4·4096² + 3·4096·11008 + 2·4096 = 202,383,360 params;
    # the embedding and the untied head 32000·4096 = 131,072,000 each; the final norm 4096
    layer, table = 202_383_360, 131_072_000
    assert one["memory_bytes.params"] == 2 * (32 * layer + 2 * table + 4096) == 13_476_831_232
    # pp = 2: 16 layers per stage; the last stage (head + final norm) outweighs the first (embedding)
    assert two["memory_bytes.params"] == 2 * (16 * layer + table + 4096) == 6_738_419_712
    assert two["memory_bytes.kv_cache"] * 2 == one["memory_bytes.kv_cache"]
    assert "last stage" in two["memory.conventions.params"]


def test_mla_decode_absorbs_the_up_projections():
    from costmodel.graph.registry import op_cost
    from costmodel.symbols import d_nope, d_rope, d_v, h, r_kv

    _, H = _decoded("deepseek-v3")
    flops = {
        n.removeprefix("layers.attn."): sympy.expand(op_cost(d["op"]).forward.matmul_flops)
        for n, d in H.nodes(data=True)
        if n.startswith("layers.attn.") and "op" in d
    }
    # absorbed MLA decode (DeepSeek-V2 §2.1.2): q·(c W_uk)ᵀ = (q W_ukᵀ)·cᵀ, p·(c W_uv) = (p·c) W_uv; per layer:
    assert flops["kv_b_k"] == 2 * B * h * d_nope * r_kv  # W_uk folded into the one new query
    assert flops["kv_b_v"] == 2 * B * h * r_kv * d_v  # W_uv applied to the one output
    assert flops["scores_nope"] == 2 * B * h * C * r_kv  # scores against the cached latent itself
    assert flops["scores_rope"] == 2 * B * h * C * d_rope  # and the cached shared RoPE key
    assert flops["context"] == 2 * B * h * C * r_kv  # the latent is the value too
    # the weights are the same matrices, read once a step
    m = load("deepseek-v3")
    assert sympy.expand(totals_params(H) - totals_params(m.graph)) == 0


def totals_params(G):
    from costmodel.graph.analysis import totals

    return totals(G).params


def test_mla_decode_reads_the_latent_cache_once():
    from costmodel.graph.decode import prefill_graph
    from costmodel.graph.passes import flash_attention
    from costmodel.symbols import d_rope, r_kv

    m = load("deepseek-v3")
    step = decode_cost(flash_attention(prefill_graph(m.graph)))
    # a fused kernel (FlashMLA) reads per sequence and cached position only the latent and the RoPE key,
    # bf16, in each of the L layers: B·C·L·(r_kv + d_rope)·2 bytes, which is the KV cache
    per_bc = sympy.Poly(step.bytes, B, C).coeff_monomial(B * C)
    assert per_bc == sympy.expand(2 * L * (r_kv + d_rope))
    assert sympy.expand(per_bc * B * C - kv_cache_bytes(m.graph)) == 0
    v = {**m.values, B: 1, C: 32768}  # DeepSeek-V3: 61 · 32768 · (512 + 64) · 2 = 2,302,672,896 bytes
    assert evaluate(per_bc * B * C, v) == 61 * 32768 * 576 * 2 == 2_302_672_896


def test_sliding_window_decode_matches_transformers_flop_counter():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(cfg).eval()
    m = load("mistral", {"L": 2, "d": 32, "h": 4, "n_kv": 2, "d_ff": 48, "V": 64, "T": 64, "window": s.W, "W": 8})
    ours = decode_cost(m.graph, m.values).matmul_flops
    for prompt in (5, 7, 20):  # below, at and past the window
        with torch.no_grad():
            cache = model(torch.randint(0, 64, (3, prompt)), use_cache=True).past_key_values
            with FlopCounterMode(display=False) as fc:  # eager attention: counted on CPU (SDPA would count 0)
                model(torch.randint(0, 64, (3, 1)), past_key_values=cache, use_cache=True)
        # the new token meets its own key too: C = prompt + 1 cached positions, of which min(C, W) are in the window
        assert fc.get_total_flops() == evaluate(ours, {B: 3, C: prompt + 1})
