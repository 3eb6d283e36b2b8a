"""The blocks' pieces: the routed matmul rule, KV-cache tags, passes on the new graphs."""

from __future__ import annotations

import pytest
import sympy

from costmodel import CostModelError, load
from costmodel.graph.analysis import op_nodes
from costmodel.graph.passes import flash_attention
from costmodel.kit import GraphBuilder, totals
from costmodel.symbols import d_rope, h, n_kv, r_kv


def routed(pattern: str, **attrs):
    b = GraphBuilder("moe", b=2, t=3, d=4, e=8, r=2, f=5)
    x = b.input("x", "b t d", dtype="bf16")
    b.op("up", "routed_matmul", [x], pattern, attrs={"experts": "e", "route": "r", **attrs})
    return totals(b.graph)


def test_routed_matmul_counts_routed_tokens_and_all_weights():
    t = routed("b t d, e d f -> b t r f")
    # 2 FLOPs per multiply-add × 2·3 tokens × 2 routes each × 4·5 weights of the chosen expert
    assert t.forward.matmul_flops == 2 * (2 * 3) * 2 * (4 * 5) == 480
    assert t.backward.matmul_flops == 2 * 480  # input gradient + weight gradient
    assert t.params == 8 * 4 * 5  # every expert's weights
    assert t.params_active == 2 * 4 * 5  # the 2 a token uses


@pytest.mark.parametrize(
    "pattern, attrs, message",
    [
        ("b t d, e d f -> b t r f", {"experts": "d"}, "experts='d' must be an axis of the weight only"),
        ("b t d, e d f -> b t f", {}, "route='r' must be an axis of exactly one"),
        ("b t d, e d f -> b t r f", {"route": "f"}, "route=.f. must be an axis of exactly one"),
    ],
)
def test_routed_matmul_errors(pattern, attrs, message):
    with pytest.raises(CostModelError, match=message):
        routed(pattern, **attrs)


def cached_elements_per_token(name: str) -> sympy.Expr:
    """Elements per token (B = T = 1) of the tensors tagged kv_cache, summed over the layers."""
    m = load(name)
    one = {sympy.Symbol("B", positive=True, integer=True): 1, sympy.Symbol("T", positive=True, integer=True): 1}
    total = sympy.Integer(0)
    for _, data in op_nodes(m.graph):
        if "kv_cache" in data.get("tags", ()):
            op = data["op"]
            total += sympy.Mul(*(op.size[a] for a in op.parsed.output)).subs(one) * data["count"]
    return sympy.expand(total)


def test_kv_cache_tags():
    L, d = sympy.symbols("L d", positive=True, integer=True)
    # GQA caches k and v: n_kv heads of d/h each, per layer
    assert cached_elements_per_token("llama") == sympy.expand(2 * n_kv * d / h * L)
    # MLA caches the latent (r_kv) and the shared RoPE key (d_rope), per layer, dense or MoE
    assert cached_elements_per_token("deepseek_v3") == sympy.expand((r_kv + d_rope) * L)


@pytest.mark.parametrize("name", ["llama", "mixtral", "mistral-7b-swa"])
def test_flash_attention_fuses_gqa_and_keeps_matmul_flops(name):
    G = load(name).graph
    H = flash_attention(G)
    assert any(d["op"].kind == "attention" for _, d in op_nodes(H))
    assert sympy.expand(totals(G).training.matmul_flops - totals(H).training.matmul_flops) == 0


def test_windowed_attention_counts_what_a_windowed_kernel_computes():
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from costmodel.kit import breakdown, evaluate

    B, T, W, heads, kv, k = 2, 16, 5, 4, 2, 8
    # an independent windowed attention: each query meets exactly its W most recent keys
    # (left-padded, unfolded into windows), as a sliding-window kernel computes it
    q = torch.empty(B, kv, heads // kv, T, k, device="meta")
    keys = torch.empty(B, kv, T, k, device="meta")
    windows = F.pad(keys, (0, 0, W - 1, 0)).unfold(2, W, 1)  # b g t k w
    with FlopCounterMode(display=False) as fc:
        probs = torch.einsum("bgmtk,bgtkw->bgmtw", q, windows).softmax(-1)
        torch.einsum("bgmtw,bgtkw->bgmtk", probs, windows)
    ops = breakdown(load("mistral", {"window": W}).graph)
    values = {"B": B, "T": T, "L": 1, "d": heads * k, "h": heads, "n_kv": kv}
    engine = sum(evaluate(ops[f"layers.attn.{n}"].forward.matmul_flops, values) for n in ("scores", "context"))
    assert engine == fc.get_total_flops() == 2 * (2 * B * heads * T * W * k)  # two contractions, T×W each
