"""An additive bias of the attention scores (T5's relative positions) is part of the attention chain.

``flash_attention`` fuses scores → add(bias) → (mask) → softmax → context into one ``attention`` op whose
operands after v are the biases, each read once: the same FLOPs under every counting, no B·T×T tensor.
"""

from __future__ import annotations

import pytest
import sympy

from costmodel import CostModelError, load
from costmodel.graph.analysis import op_nodes, totals
from costmodel.graph.decode import decode_graph, prefill_graph
from costmodel.graph.passes import flash_attention
from costmodel.kit import GraphBuilder
from costmodel.kit import symbols as s
from costmodel.memory.activations import activations
from costmodel.options import Counting

T5 = load("t5").graph
B, T, T_src, h, k = s.B, s.T, s.T_src, s.h, s.d_head


def fused(G):
    return {n: d["op"] for n, d in op_nodes(G) if d["op"].kind == "attention"}


def test_t5_attention_fuses_with_its_bias():
    ops = fused(flash_attention(T5))
    assert ops["encoder.layers.attn.context"].pattern == "b h s k, b h u k, b h u k, h s u -> b h s k"
    assert ops["decoder.layers.self_attn.context"].pattern == "b h t k, b h r k, b h r k, h t r -> b h t k"
    assert ops["decoder.layers.cross_attn.context"].pattern == "b h t k, b h s k, b h s k -> b h t k"  # no bias
    assert tuple(o.attr("fn") for o in ops["decoder.layers.self_attn.context"].attr("epilogue")) == ("add", "mask")


@pytest.mark.parametrize(
    "counting",
    [Counting(), Counting(causal="half"), Counting(elementwise="softmax"), Counting(elementwise="none")],
    ids=["default", "half", "softmax", "none"],
)
def test_fusing_keeps_every_flop(counting):
    before, after = totals(T5, counting), totals(flash_attention(T5), counting)
    for phase in ("forward", "backward"):
        for field in ("flops", "matmul_flops"):
            assert sympy.expand(getattr(getattr(before, phase), field) - getattr(getattr(after, phase), field)) == 0


def test_the_bias_is_read_once_and_no_per_sequence_square_is_kept():
    op = fused(flash_attention(T5))["encoder.layers.attn.context"]
    from costmodel.graph.registry import op_cost

    # q, k, v (B·h·T_src·d_head each) and the bias (h·T_src², shared by the batch), 2 bytes each
    assert sympy.expand(op_cost(op).forward.bytes_read - 2 * (3 * B * h * T_src * k + h * T_src**2)) == 0
    kept = sympy.expand(activations(flash_attention(T5)).bytes.coeff(B))  # what each sequence keeps
    assert sympy.degree(kept, T_src) == 1 and sympy.degree(kept, T) == 1
    assert sympy.degree(sympy.expand(activations(T5).bytes.coeff(B)), T_src) == 2  # unfused: the scores


def test_decode_of_the_fused_graph_counts_what_the_unfused_one_does():
    fused_step = totals(decode_graph(flash_attention(prefill_graph(T5)))).forward.matmul_flops
    assert sympy.expand(fused_step - totals(decode_graph(T5)).forward.matmul_flops) == 0


def graph(bias_first: bool = False):
    """Scores plus a per-head bias (ALiBi-like), a scale, the softmax and the context."""
    b = GraphBuilder("biased", b=B, t=T, s=T, h=h, k=k)
    q, key, v = (b.input(n, "b h t k", dtype="bf16") for n in ("q", "k", "v"))
    bias = b.input("bias", "h t s", dtype="bf16")
    scores = b.contract("scores", q, key, "b h t k, b h s k -> b h t s")
    inputs = [bias, scores] if bias_first else [scores, bias]
    pattern = "h t s, b h t s -> b h t s" if bias_first else "b h t s, h t s -> b h t s"
    scores = b.elementwise("add_bias", "add", inputs, pattern)
    probs = b.softmax("softmax", b.elementwise("scale", "scale", scores, "b h t s"), "b h t s", axis="s")
    b.contract("context", probs, v, "b h t s, b h s k -> b h t k")
    return b.graph


def test_a_bias_before_the_scale_fuses_and_a_bias_given_first_is_refused():
    assert fused(flash_attention(graph()))["context"].pattern == "b h t k, b h s k, b h s k, h t s -> b h t k"
    with pytest.raises(CostModelError, match="reads the scores as its input 1, expected as its first"):
        flash_attention(graph(bias_first=True))
