"""Derivations the architecture graphs must show: 6·N·D, what GQA changes, 6·N_active·D."""

from __future__ import annotations

import sympy

from costmodel import derive, load
from costmodel.kit import breakdown, leading_term, limit, totals
from costmodel.symbols import B, T, d, d_ff, h, n_kv, top_k


def test_llama_training_flops_tend_to_6ND():
    # LLaMA sizes its MLP as 2/3 · 4d (rounded) and its heads as d/h: let both grow with d
    t = totals(load("llama", {"d_ff": sympy.Rational(8, 3) * d}).graph)
    six_nd = 6 * t.params * B * T  # D = B·T tokens per step
    assert sympy.simplify(limit(t.training.matmul_flops / six_nd, d) - 1) == 0
    assert sympy.simplify(limit(t.training.flops / six_nd, d) - 1) == 0  # the element-wise FLOPs are O(d), too
    assert leading_term(t.training.matmul_flops, d) == leading_term(six_nd, d)
    # what 6ND misses at finite d: the attention scores and context (3 passes × 2 contractions ×
    # 2·B·T²·d per layer) are not in N; the norm gains (2 per layer + 1 final, d each) are in N
    # but do no matmul; the embedding is a gather; the untied unembedding is a matmul in N
    L = sympy.Symbol("L", positive=True, integer=True)
    scores = 3 * 2 * 2 * B * T**2 * d * L
    norms = 6 * B * T * (2 * L * d + d)
    assert sympy.expand(t.training.matmul_flops - (6 * (t.params - t.params_embedding) * B * T + scores - norms)) == 0


def test_gqa_shrinks_only_the_kv_projections():
    ops = breakdown(load("llama").graph)
    mha = {n: c.forward.matmul_flops.subs(n_kv, h) for n, c in ops.items()}
    gqa = {n: c.forward.matmul_flops for n, c in ops.items()}
    L = sympy.Symbol("L", positive=True, integer=True)
    for proj in ("k", "v"):
        # 2 · B·T tokens · d inputs · n_kv heads · d/h head dim, in each of L layers
        assert gqa[f"layers.attn.{proj}"] == 2 * B * T * d * n_kv * (d / h) * L
        assert sympy.simplify(gqa[f"layers.attn.{proj}"] / mha[f"layers.attn.{proj}"]) == n_kv / h
    for name in ("q", "o", "scores", "context"):
        assert n_kv not in gqa[f"layers.attn.{name}"].free_symbols  # heads attend as h heads, not n_kv
    # the scores: 2 · B · h heads · T queries · T keys · d/h = 2·B·T²·d per layer, whatever n_kv is
    assert gqa["layers.attn.scores"] == 2 * B * T**2 * d * L


def test_moe_training_flops_tend_to_6_N_active_D():
    t = totals(load("mixtral", {"d_ff": sympy.Rational(7, 2) * d}).graph)
    six_nd = 6 * t.params_active_non_embedding * B * T
    assert sympy.simplify(limit(t.training.matmul_flops / six_nd, d) - 1) == 0
    # with all parameters instead, 6·N·D overstates the work (here 2 of 8 experts)
    ratio = limit(t.training.matmul_flops / (6 * t.params_non_embedding * B * T), d)
    experts = sympy.Symbol("n_experts", positive=True, integer=True)
    assert ratio.subs({top_k: 2, experts: 8, h: 32, n_kv: 8}) < sympy.Rational(1, 2)


def test_deepseek_active_params_count_top_k_and_shared_experts():
    t = totals(load("deepseek_v3").graph)
    n_experts, d_expert = sympy.symbols("n_experts d_expert", positive=True, integer=True)
    L, L_dense = sympy.symbols("L L_dense", positive=True, integer=True)
    # per MoE layer, (n_experts - top_k) experts of 3·d·d_expert parameters sit idle for a token
    assert sympy.expand(t.params - t.params_active - (L - L_dense) * (n_experts - top_k) * 3 * d * d_expert) == 0


def test_derive_llama_shows_gqa_and_swiglu():
    r = derive("llama")
    ops = r["ops"]
    assert ops["layers.attn.k"]["pattern"] == "b t d, d g k -> b g t k"  # kv heads g = n_kv
    assert ops["layers.mlp.gate"]["kind"] == ops["layers.mlp.up"]["kind"] == "matmul"  # SwiGLU: 3 matrices
    # 2 × 4 attention matrices (q, o: d·d; k, v: d·n_kv·d/h) + 3 MLP matrices + 2 norms, per layer
    L, V = sympy.symbols("L V", positive=True, integer=True)
    expected = L * (2 * d**2 + 2 * d * n_kv * d / h + 3 * d * d_ff + 2 * d) + 2 * V * d + d
    assert sympy.expand(r["expressions"]["params.total"] - expected) == 0


def test_flash_attention_fuses_mla_split_scores_keeping_every_flop():
    # MLA's scores are q_nope·k_nope + q_rope·k_rope: the pass fuses both contractions, the add,
    # the epilogue, the softmax and the context into one attention op per layer
    from costmodel.families import load
    from costmodel.graph.passes import flash_attention
    from costmodel.kit import totals

    G = load("deepseek_v3").graph
    H = flash_attention(G)
    fused = [n for n, d in H.nodes(data=True) if "op" in d and d["op"].kind == "attention"]
    assert len(fused) == 2  # the dense layers' and the MoE layers' attention
    assert all(len(H.nodes[n]["op"].parsed.inputs) == 5 for n in fused)  # q_nope, k_nope, q_rope, k_rope, v
    before, after = totals(G), totals(H)
    for pass_ in ("forward", "backward"):
        for field in ("flops", "matmul_flops"):
            assert sympy.expand(getattr(getattr(before, pass_), field) - getattr(getattr(after, pass_), field)) == 0
    T = sympy.Symbol("T", positive=True, integer=True)
    from costmodel.memory.activations import activations

    assert sympy.degree(activations(G).bytes, T) == 2 and sympy.degree(activations(H).bytes, T) == 1  # no T² saved
