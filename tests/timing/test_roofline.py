"""Roofline per op and per step: intensities as limits, bounds against hand arithmetic, fusion, FlashAttention."""

import pytest
import sympy

from costmodel import load
from costmodel.devices.table import device
from costmodel.graph.decode import decode_graph, prefill_graph
from costmodel.graph.passes import flash_attention, fuse_elementwise
from costmodel.kit import GraphBuilder, leading_term, limit, totals
from costmodel.kit import symbols as s
from costmodel.symbols import B, C, T
from costmodel.timing.roofline import roofline, total, variants

H100 = device("h100-sxm")
PEAK, BW = 989_400_000_000_000, 3_350_000_000_000  # H100 SXM: whitepaper BF16 dense, datasheet HBM3


def square_matmul():
    """The lecture's A(B×d) · W(d×d) in bf16."""
    b = GraphBuilder("mm", b=s.B, d=s.d)
    b.matmul("w", b.input("x", "b d", dtype="bf16"), "b d, d e -> b e", e=s.d)
    return b.graph


def test_matmul_intensity_limits():
    # FLOPs 2·B·d²; bytes 2·(B·d + d² + B·d) (read A and W, write the result; 2 bytes each)
    i = totals(square_matmul()).forward.intensity
    assert sympy.simplify(i - s.B * s.d**2 / (2 * s.B * s.d + s.d**2)) == 0
    assert limit(i, s.d, sympy.oo) == s.B  # small batch: intensity ∝ B (JAX scaling book: BDF/(BD+DF+BF) → B)
    assert limit(i, s.B, sympy.oo) == s.d / 2  # large batch: O(d) (the lecture's "Bd²/Bd = O(d)")
    assert leading_term(i, s.B, 0) == s.B


def test_matmul_bounds_by_hand():
    G = square_matmul()
    [r] = roofline(G, {B: 1, s.d: 4096}, H100)
    assert r.bound == "memory"
    assert r.time_s == sympy.Rational(2 * (4096 + 4096**2 + 4096), BW)  # bytes / bandwidth
    assert r.attainable == r.intensity * BW
    [r] = roofline(G, {B: 4096, s.d: 4096}, H100)
    assert r.bound == "compute"
    assert r.time_s == sympy.Rational(2 * 4096**3, PEAK)  # FLOPs / peak
    assert r.attainable == PEAK
    assert r.ridge == sympy.Rational(PEAK, BW)


@pytest.fixture(scope="module")
def gpt67():
    return load("gpt3-6.7b")


def test_step_is_the_sum_of_op_bounds(gpt67):
    rows = roofline(prefill_graph(gpt67.graph), {**gpt67.values, B: 1}, H100)
    t = total(rows)
    assert t.time_s == sum(max(r.flops / PEAK, r.bytes / BW) for r in rows)
    assert t.time_s >= max(t.flops / PEAK, t.bytes / BW)  # summing bounds never beats the pooled bound


def test_prefill_matmuls_compute_bound_elementwise_memory_bound(gpt67):
    rows = roofline(prefill_graph(gpt67.graph), {**gpt67.values, B: 1, T: 2048}, H100)
    kinds = {r.name: (r.kind, r.bound, float(r.intensity)) for r in rows}
    for name, (kind, bound, intensity) in kinds.items():
        if kind == "matmul":
            assert bound == "compute" and intensity > 295, name
        if kind in ("elementwise", "norm", "softmax"):
            assert bound == "memory" and intensity < 10, name
    assert "loss" not in kinds  # inference has no loss


def test_decode_every_op_memory_bound_at_batch_1(gpt67):
    rows = roofline(decode_graph(gpt67.graph), {**gpt67.values, B: 1, C: 4096}, H100)
    assert rows and all(r.bound == "memory" for r in rows)
    mm = next(r for r in rows if r.name == "layers.mlp.fc")
    assert mm.flops == 32 * (2 * 4096 * 16384 + 16384)  # one token: 2·d·4d and the bias add, 32 layers


def test_training_phase_adds_forward_and_backward(gpt67):
    v = {**gpt67.values, B: 1}
    fwd = total(roofline(gpt67.graph, v, H100, phase="forward"))
    bwd = total(roofline(gpt67.graph, v, H100, phase="backward"))
    both = total(roofline(gpt67.graph, v, H100, phase="training"))
    assert both.time_s == fwd.time_s + bwd.time_s and both.flops == fwd.flops + bwd.flops


def mlp(fn):
    b = GraphBuilder("mlp", b=s.B, d=s.d, f=s.d_ff)
    u = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    b.elementwise("act", fn, u, "b f")
    return b.graph


def test_fusion_saves_the_intermediate_round_trip():
    G = mlp("gelu")
    # inference: the B×f bf16 intermediate is neither written nor read back: 2·2·B·f bytes
    H = fuse_elementwise(G, training=False)
    assert sympy.expand(totals(G).forward.bytes - totals(H).forward.bytes) == 4 * s.B * s.d_ff
    # training: gelu saves its input for backward, so the kernel still writes it; only the read-back goes
    H = fuse_elementwise(G, training=True)
    assert sympy.expand(totals(G).forward.bytes - totals(H).forward.bytes) == 2 * s.B * s.d_ff
    for t in (totals(G), totals(H)):  # same FLOPs, parameters, saved activations
        assert (t.forward.flops, t.params) == (totals(G).forward.flops, totals(G).params)
    [name] = [n for n, d in H.nodes(data=True) if "op" in d]
    assert name == "act" and H.nodes[name]["op"].attr("names") == ("fc", "act")


def test_fused_gpt_keeps_counts():
    G = load("gpt2-small").graph
    for H in (fuse_elementwise(G), fuse_elementwise(flash_attention(G), training=False)):
        a, b = totals(G), totals(H)
        assert sympy.expand(a.training.flops - b.training.flops) == 0
        assert sympy.expand(a.params - b.params) == 0 and sympy.expand(a.params_embedding - b.params_embedding) == 0
    from costmodel.memory.activations import activations

    assert sympy.expand(activations(fuse_elementwise(G)).bytes - activations(G).bytes) == 0


def test_flash_attention_removes_the_t_squared_bytes():
    G = load("gpt").graph
    saved = sympy.expand(totals(G).forward.bytes - totals(flash_attention(G)).forward.bytes)
    # per score element (bf16): written by scores (2), read+written by scale (4), mask (4), softmax (4),
    # read by context (2) = 16 bytes, for B·h·T² scores in each of L layers
    assert sympy.Poly(saved, T).coeff_monomial(T**2) == 16 * s.B * s.h * s.L
    assert sympy.degree(totals(flash_attention(G)).forward.bytes, T) == 1  # nothing T×T is left


def test_variants_order(gpt67):
    v = variants(prefill_graph(gpt67.graph), {**gpt67.values, B: 1}, H100)
    assert v["flash+fused"].time_s < v["flash"].time_s < v["unfused"].time_s
    assert v["fused"].time_s < v["unfused"].time_s
    assert v["fused"].flops == v["unfused"].flops
