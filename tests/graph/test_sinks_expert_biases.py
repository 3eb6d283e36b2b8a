"""Three op facts the gpt-oss and Llama 4 families need: attention sinks, per-expert biases, norms without a gain.

Golden numbers as arithmetic with their reason; B, T, h, ... stay symbols so each count is an identity.
"""

from __future__ import annotations

import pytest
import sympy

from costmodel.kit import CostModelError, GraphBuilder, flash_attention, kind_of, op_cost, totals
from costmodel.symbols import B, T, d, d_ff, h, n_experts, top_k

k = sympy.Symbol("k", positive=True, integer=True)  # head dim


def attention(sink: str | None) -> GraphBuilder:
    """q·k → scale → mask → softmax (with learned sink logits over ``sink``) → ·v, as blocks write it."""
    b = GraphBuilder("attn", b=B, t=T, s=T, h=h, k=k)
    q, key, v = (b.input(n, "b h t k" if n == "q" else "b h s k", dtype="bf16") for n in ("q", "key", "v"))
    scores = b.contract("scores", q, key, "b h t k, b h s k -> b h t s", causal=True)
    scores = b.elementwise("mask", "mask", b.elementwise("scale", "scale", scores, "b h t s"), "b h t s")
    probs = b.op("softmax", "softmax", [scores], "b h t s", attrs={"axis": "s", "sink": sink})
    b.contract("context", probs, v, "b h t s, b h s k -> b h t k", causal=True)
    return b


def test_a_sink_adds_a_column_to_every_softmax_row():
    with_sink, without = (op_cost(attention(s).graph.nodes["softmax"]["op"]) for s in ("h", None))
    rows = B * h * T  # one row per (sequence, head, query)
    assert with_sink.forward.flops == 5 * rows * (T + 1) and without.forward.flops == 5 * rows * T
    assert with_sink.backward.flops == 4 * rows * (T + 1)
    assert with_sink.params == h and without.params == 0  # one learned logit per head
    assert with_sink.saved[0].elements == rows * (T + 1)  # the probabilities, the sink's column too


def test_flash_attention_keeps_the_sink():
    G = attention("h").graph
    H = flash_attention(G)
    fused = H.nodes["context"]["op"]
    assert fused.attr("sink") == "h" and kind_of("softmax").attention_attrs == ("sink",)
    t, u = totals(G), totals(H)
    assert t.params == u.params == h
    assert sympy.expand(t.forward.flops - u.forward.flops) == 0
    assert sympy.expand(t.training.flops - u.training.flops) == 0
    assert t.training.matmul_flops == u.training.matmul_flops == 3 * 4 * B * h * T**2 * k


def test_a_sink_over_an_unknown_axis_is_refused():
    with pytest.raises(CostModelError, match="sink axes"):
        attention("g")


def routed(bias: str | None, pattern: str = "b t d, e d f -> b t r f") -> object:
    b = GraphBuilder("moe", b=B, t=T, d=d, e=n_experts, r=top_k, f=d_ff)
    x = b.input("x", pattern.split(",")[0], dtype="bf16")
    b.op("w", "routed_matmul", [x], pattern, attrs={"experts": "e", "route": "r", "bias": bias})
    return op_cost(b.graph.nodes["w"]["op"])


def test_per_expert_biases_are_stacked_routed_and_added_per_copy():
    up, plain = routed("e f"), routed(None)
    # each expert owns a bias of d_ff; a token's r copies each add theirs: B·T·r·d_ff adds
    assert up.params - plain.params == n_experts * d_ff
    assert sympy.expand(up.active_params - plain.active_params - top_k * d_ff) == 0
    assert sympy.expand(up.forward.flops - plain.forward.flops - B * T * top_k * d_ff) == 0
    assert sympy.expand(up.backward.flops - plain.backward.flops - B * T * top_k * d_ff) == 0  # its gradient
    assert up.forward.matmul_flops == plain.forward.matmul_flops == 2 * B * T * top_k * d * d_ff
    assert [w.stack for w in up.weights] == [n_experts, n_experts]  # both split by expert parallelism
    # the down projection sums the r copies after each added its expert's bias
    down = routed("e d", "b t r f, e f d -> b t d")
    assert sympy.expand(down.forward.flops - 2 * B * T * top_k * d_ff * d - B * T * top_k * d) == 0


def test_an_expert_bias_without_the_experts_axis_is_refused():
    with pytest.raises(CostModelError, match="experts axis"):
        routed("f")


@pytest.mark.parametrize("rms, per_element", [(True, 3), (False, 5)])
def test_a_norm_without_affine_has_no_parameters_and_a_flop_less_each(rms, per_element):
    b = GraphBuilder("norm", b=B, t=T, d=d)
    x = b.input("x", "b t d", dtype="bf16")
    b.op("n", "norm", [x], "b t d", attrs={"rms": rms, "affine": False})
    c = op_cost(b.graph.nodes["n"]["op"])
    assert c.params == 0  # Llama 4's L2 norm of q and k: x / rms(x), no gain
    assert c.forward.flops == per_element * B * T * d and c.backward.flops == 2 * per_element * B * T * d
