"""gpt-oss: alternating sliding-window and full attention with sinks, a mixture of biased SwiGLU experts.

Every layer is pre-norm (RMSNorm): grouped-query attention with RoPE, biases on q, k, v and o
(``attention_bias``) and an **attention sink** per query head (a learned logit that joins each row of
the softmax: ``s + 1`` columns, the sink's then dropped), then a mixture of experts: a router with a
bias picks ``top_k`` of ``n_experts`` experts per token, their logits are normalised by a softmax over
the ``top_k`` picked, and each expert is a SwiGLU MLP of width ``d_ff`` whose three matrices have a
bias **per expert**. Even layers (0, 2, ...) attend within a sliding window of ``W`` tokens, odd ones
to everything: ``L − ⌊L/2⌋`` sliding and ``⌊L/2⌋`` full layers.

Counting conventions: the sliding layers' FLOPs are the full causal T×T square by default (what
transformers computes under a window mask and ``FlopCounterMode`` counts), T×min(T, W) with
``window=W``; the KV cache of a sliding layer keeps the last W − 1 tokens (``cache_window``). The
experts' activation is counted as SwiGLU's: gpt-oss clamps the gate and the up projection and
computes ``(up + 1) · gate · σ(1.702 · gate)``, a few more element-wise FLOPs per hidden unit that no
matmul count sees. ``params.active`` counts ``top_k`` experts (their biases too); OpenAI's "active
parameters" leave out the token table only: ``params.active_non_embedding`` here.

Sources of the presets: OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1 (layers,
experts, total and active parameters), and ``openai/gpt-oss-{20b,120b}/config.json`` (width 2880,
64 heads of 64, 8 KV heads, expert width 2880, top-4, vocab 201088, window 128, context 131072).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, T, d_ff, d_head, n_experts, top_k

from . import attention_parts as parts
from .blocks import decoder, pre_norm_layer
from .vocabulary import hf_experts, sizes

SLIDING_LAYERS = L - sympy.floor(L / 2)  # layers 0, 2, 4, ... (transformers' default layer_types)
FULL_LAYERS = sympy.floor(L / 2)


def experts(b: GraphBuilder, x: Tensor) -> Tensor:
    """Router with a bias, softmax over the ``r`` picked logits, SwiGLU experts with per-expert biases."""
    logits = b.matmul("router", x, "b t d, d e -> b t e", bias="e")
    picked = b.reshape("top_k", logits, "b t e -> b t r")  # the r largest logits: a selection
    weights = b.softmax("router_probs", picked, "b t r", axis="r")
    gate = b.op(
        "gate", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs={"experts": "e", "route": "r", "bias": "e i"}
    )
    up = b.op(
        "up", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs={"experts": "e", "route": "r", "bias": "e i"}
    )
    gate = b.elementwise("act", "silu", gate, "b t r i")  # gpt-oss: gate·σ(1.702·gate), clamped; see the docstring
    u = b.elementwise("gated", "mul", [gate, up], "b t r i, b t r i -> b t r i")
    u = b.elementwise("weighted", "mul", [u, weights], "b t r i, b t r -> b t r i")
    return b.op(
        "down", "routed_matmul", [u], "b t r i, e i d -> b t d", attrs={"experts": "e", "route": "r", "bias": "e d"}
    )


def gpt_oss(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    window: object = None,
    cache_window: object = None,
    sinks: bool = True,
    attention_bias: bool = True,
    tied: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The gpt-oss decoder: ``L − ⌊L/2⌋`` sliding-window layers and ``⌊L/2⌋`` full-attention layers.

    ``window=None`` counts T×T scores in the sliding layers too (as PyTorch does), ``window=W``
    T×min(T, W); ``cache_window``: the model's window, which keeps their KV cache at W − 1 tokens
    (defaults to ``window``). ``sinks``: a learned sink logit per query head in every softmax.
    ``attention_bias``: biases on q, k, v and o. ``d_head``: the head dim (a symbol: gpt-oss's 64 is not d/h).
    """
    cache = window if cache_window is None else cache_window
    extra = {} if window is None else {"w": sympy.Min(T, window)}
    b = GraphBuilder("gpt_oss", dtype=dtype, **sizes(d_head, d_ff, e=n_experts, r=top_k, i=d_ff, **extra))

    def attention(sliding: bool):
        def attend(b: GraphBuilder, x: Tensor) -> Tensor:
            q, k, v = parts.projections(b, x, bias=attention_bias)
            q, k = parts.rope(b, "q_rope", q, parts.Q), parts.rope(b, "k_rope", k, parts.KV)
            kept = cache if sliding else None
            parts.cached(b, k, kept), parts.cached(b, v, kept)
            context = parts.attend(b, q, k, v, window=sliding and window is not None, sink=sinks)
            return parts.output(b, context, bias=attention_bias)

        return attend

    def layer(sliding: bool):
        return lambda b, x: pre_norm_layer(b, x, attention(sliding), experts)

    return decoder(
        b, [("sliding_layers", SLIDING_LAYERS, layer(True)), ("full_layers", FULL_LAYERS, layer(False))], tied=tied
    )


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``gpt_oss`` config.json.

    ``layer_types`` (absent: transformers' default) must alternate sliding and full layers starting
    with a sliding one, the pattern of every released model; ``head_dim`` is required (transformers'
    default, 64, is not ``hidden_size / heads``).
    """
    where = "config.json (gpt_oss)"
    get = lambda name, kind=int, default=...: field(cfg, name, kind, default, where=where)  # noqa: E731
    out: dict[str, object] = {
        "L": get("num_hidden_layers"),
        "d": get("hidden_size"),
        "h": get("num_attention_heads"),
        "n_kv": get("num_key_value_heads"),
        "V": get("vocab_size"),
        "d_ff": get("intermediate_size"),
        "T": get("max_position_embeddings"),
        "tied": get("tie_word_embeddings", bool, False),
        "attention_bias": get("attention_bias", bool, True),
    }
    experts_field = "num_local_experts" if "num_local_experts" in cfg or "num_experts" not in cfg else "num_experts"
    out.update(hf_experts(cfg, where, experts_field))
    if out["h"] % out["n_kv"]:
        raise CostModelError(
            f"{where}: num_attention_heads = {out['h']} is not a multiple of num_key_value_heads = "
            f"{out['n_kv']}; expected whole groups"
        )
    out["d_head"] = get("head_dim")
    if out["L"] < 2:
        raise CostModelError(
            f"{where}: num_hidden_layers = {out['L']} leaves no full-attention layer (layer 1 is the "
            "first); expected at least 2 layers"
        )
    expected = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(out["L"])]
    layer_types = get("layer_types", list, expected)
    if layer_types != expected:
        raise CostModelError(
            f"{where}: layer_types {layer_types!r} do not alternate sliding_attention and "
            "full_attention from layer 0; expected that pattern (every gpt-oss model has it)"
        )
    if "sliding_window" in cfg and cfg["sliding_window"] is None:
        raise CostModelError(f"{where}: sliding_window is null; expected the window of the sliding layers")
    # absent: transformers' default, 128. It bounds the sliding layers' KV cache; their FLOPs stay dense
    out["cache_window"] = get("sliding_window", int, 128)
    return out


_SOURCE = "OpenAI 2025 (gpt-oss-120b & gpt-oss-20b Model Card), Table 1; openai/gpt-oss-{} config.json"
_COMMON = {
    "d": 2880,
    "h": 64,
    "n_kv": 8,
    "d_head": 64,
    "d_ff": 2880,
    "top_k": 4,
    "V": 201088,
    "T": 4096,
    "cache_window": 128,
}

PRESETS = (
    Preset(
        "gpt-oss-20b",
        "gpt_oss",
        {**_COMMON, "L": 24, "n_experts": 32},
        _SOURCE.format("20b"),
        "gpt-oss-20b (top-4 of 32 experts), dense T×T attention count",
    ),
    Preset(
        "gpt-oss-120b",
        "gpt_oss",
        {**_COMMON, "L": 36, "n_experts": 128},
        _SOURCE.format("120b"),
        "gpt-oss-120b (top-4 of 128 experts), dense T×T attention count",
    ),
)

FAMILY = Family(
    "gpt_oss",
    gpt_oss,
    "gpt-oss: alternating sliding/full attention with sinks, biased SwiGLU experts",
    PRESETS,
    defaults={"T": 131072},
    hf_model_types=("gpt_oss",),
    from_hf=from_hf,
)
