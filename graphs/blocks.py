"""Reusable transformer blocks, written with costmodel's builder.

Every block is a function ``(b, x, ...) -> Tensor`` that adds ops to the
builder ``b``; the family that calls it gives the builder the size of every axis.
Variants are axes and graph structure, not flags inside the engine: grouped-query
attention is a ``g`` (key/value heads) axis with ``m`` query heads per group, a
sliding window is a ``w`` key axis, a mixture of experts is a routed matmul over
an ``e`` (experts) axis.

Axis names used throughout:

====  ==========================================  ====  =========================================
axis  meaning                                     axis  meaning
====  ==========================================  ====  =========================================
b     batch                                       e     routed experts
t     query positions                             r     experts a token is routed to (top-k)
s     key positions (= t)                         i     hidden width of one expert
w     keys in a sliding window                    n     shared experts
d     width                                       h     heads (multi-head latent attention)
v     vocabulary                                  k     head dim (MLA: the non-RoPE part)
g     key/value heads                             p     RoPE head dim (MLA, decoupled)
m     query heads per key/value head (h / g)      o     value head dim (MLA)
f     MLP hidden width                            l, c  query and key/value latents (MLA)
====  ==========================================  ====  =========================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx
import sympy

from costmodel.kit import GraphBuilder, Tensor
from costmodel.symbols import T

Block = Callable[[GraphBuilder, Tensor], Tensor]


def dropout(b: GraphBuilder, name: str, x: Tensor, pattern: str, enabled: bool) -> Tensor:
    """Dropout saves a 1-byte mask per element; a no-op when disabled."""
    return b.elementwise(name, "dropout", x, pattern) if enabled else x


def residual(b: GraphBuilder, name: str, x: Tensor, y: Tensor) -> Tensor:
    return b.elementwise(name, "add", [x, y], "b t d, b t d -> b t d")


# -- attention ---------------------------------------------------------------------------------


def causal_self_attention(b: GraphBuilder, x: Tensor, *, bias: bool, dropout_p: bool) -> Tensor:
    """Multi-head causal self-attention with materialised scores (what eager PyTorch does).

    q, k, v: ``b t d -> b h t k``; scores ``b h t k, b h s k -> b h t s``; the
    softmax over ``s``; context ``b h t s, b h s k -> b h t k``; output ``h k -> d``.
    """
    q = b.matmul("q", x, "b t d, d h k -> b h t k", bias="h k" if bias else None)
    k = b.tag(b.matmul("k", x, "b t d, d h k -> b h t k", bias="h k" if bias else None), "kv_cache")
    v = b.tag(b.matmul("v", x, "b t d, d h k -> b h t k", bias="h k" if bias else None), "kv_cache")
    scores = b.contract("scores", q, k, "b h t k, b h s k -> b h t s", causal=True)
    probs = _softmax(b, scores, "b h t s", dropout_p)
    context = b.contract("context", probs, v, "b h t s, b h s k -> b h t k", causal=True)
    out = b.matmul("proj", context, "b h t k, h k d -> b t d", bias="d" if bias else None)
    return dropout(b, "resid_dropout", out, "b t d", dropout_p)


def _softmax(b: GraphBuilder, scores: Tensor, axes: str, dropout_p: bool = False) -> Tensor:
    """Scale, causal mask, softmax over the last axis, optional dropout."""
    scores = b.elementwise("scale", "scale", scores, axes)
    scores = b.elementwise("mask", "mask", scores, axes)
    probs = b.softmax("softmax", scores, axes, axis=axes.split()[-1])
    return dropout(b, "dropout", probs, axes, dropout_p)


def grouped_query_attention(
    b: GraphBuilder,
    x: Tensor,
    *,
    qkv_bias: bool = False,
    out_bias: bool = False,
    rope: bool = True,
    window: bool = False,
    cache_window: object = None,
) -> Tensor:
    """Grouped-query attention: ``g`` key/value heads, each shared by ``m`` query heads.

    ``g = h`` (``m = 1``) is multi-head attention, ``g = 1`` multi-query attention;
    the head dim ``k`` is whatever the family sizes it (``d/h`` or a config's
    ``head_dim``). Only the k and v projections see ``g`` alone; the scores and
    the context see ``g m = h`` heads.

    ``window=True`` counts a sliding window as a windowed kernel computes it: each
    query meets ``w`` keys (``T×W`` scores); ``False`` counts the full ``T×T``
    square a dense kernel computes with a mask (what PyTorch counts).

    ``cache_window=W``: the model attends to a sliding window of W tokens, so an
    inference KV cache keeps only the last W − 1 (the new token's own key makes W),
    as transformers' sliding-window cache does, whichever FLOP count is chosen.
    """
    q = b.matmul("q", x, "b t d, d g m k -> b g m t k", bias="g m k" if qkv_bias else None)
    k = b.matmul("k", x, "b t d, d g k -> b g t k", bias="g k" if qkv_bias else None)
    kept = None if cache_window is None else sympy.Min(T, cache_window - 1)
    v = b.tag(b.matmul("v", x, "b t d, d g k -> b g t k", bias="g k" if qkv_bias else None), "kv_cache", positions=kept)
    if rope:
        q = b.elementwise("q_rope", "rope", q, "b g m t k")
        k = b.elementwise("k_rope", "rope", k, "b g t k")
    b.tag(k, "kv_cache", positions=kept)  # the cache keeps keys after RoPE
    keys = "s"
    if window:  # the w keys of each query's window: a strided view (unfold), no copy
        k = b.reshape("k_windows", k, "b g s k -> b g t w k")
        v = b.reshape("v_windows", v, "b g s k -> b g t w k")
        keys = "t w"
    scores = b.contract("scores", q, k, f"b g m t k, b g {keys} k -> b g m t {keys[-1]}", causal=not window)
    probs = _softmax(b, scores, f"b g m t {keys[-1]}")
    context = b.contract("context", probs, v, f"b g m t {keys[-1]}, b g {keys} k -> b g m t k", causal=not window)
    return b.matmul("o", context, "b g m t k, g m k d -> b t d", bias="d" if out_bias else None)


def latent_attention(b: GraphBuilder, x: Tensor, *, q_latent: bool = True, bias: bool = False) -> Tensor:
    """DeepSeek's multi-head latent attention (MLA), as DeepSeek-V2/V3 compute it in training.

    Queries go through a low-rank latent ``l`` (``q_latent=False``: a full
    ``d -> h (k p)`` projection); keys and values through one latent ``c`` shared by
    all heads, expanded per head to the non-RoPE key part ``k`` and the value ``o``.
    RoPE is decoupled: a ``p``-wide query part per head and one ``p``-wide key
    shared by every head. The scores are the sum of the two parts. The KV cache
    keeps only the latent and the RoPE key. ``bias``: biases on the down
    projections and the output (HF ``attention_bias``).
    """
    if q_latent:
        lq = b.matmul("q_a", x, "b t d, d l -> b t l", bias="l" if bias else None)
        lq = b.norm("q_a_norm", lq, "b t l", rms=True)
        q_nope = b.matmul("q_b_nope", lq, "b t l, l h k -> b h t k")
        q_pe = b.matmul("q_b_rope", lq, "b t l, l h p -> b h t p")
    else:
        q_nope = b.matmul("q_nope", x, "b t d, d h k -> b h t k")
        q_pe = b.matmul("q_rope", x, "b t d, d h p -> b h t p")
    c = b.matmul("kv_a", x, "b t d, d c -> b t c", bias="c" if bias else None)
    k_pe = b.matmul("k_rope", x, "b t d, d p -> b t p", bias="p" if bias else None)
    c = b.tag(b.norm("kv_a_norm", c, "b t c", rms=True), "kv_cache")
    q_pe = b.elementwise("q_pe", "rope", q_pe, "b h t p")
    k_pe = b.tag(b.elementwise("k_pe", "rope", k_pe, "b t p"), "kv_cache")
    k_nope = b.matmul("kv_b_k", c, "b t c, c h k -> b h t k")
    v = b.matmul("kv_b_v", c, "b t c, c h o -> b h t o")
    s_nope = b.contract("scores_nope", q_nope, k_nope, "b h t k, b h s k -> b h t s", causal=True)
    s_pe = b.contract("scores_rope", q_pe, k_pe, "b h t p, b s p -> b h t s", causal=True)
    scores = b.elementwise("scores", "add", [s_nope, s_pe], "b h t s, b h t s -> b h t s")
    probs = _softmax(b, scores, "b h t s")
    context = b.contract("context", probs, v, "b h t s, b h s o -> b h t o", causal=True)
    return b.matmul("o", context, "b h t o, h o d -> b t d", bias="d" if bias else None)


# -- MLPs --------------------------------------------------------------------------------------


def gelu_mlp(b: GraphBuilder, x: Tensor, *, bias: bool, dropout_p: bool) -> Tensor:
    """``d -> f``, GELU, ``f -> d``."""
    u = b.matmul("fc", x, "b t d, d f -> b t f", bias="f" if bias else None)
    u = b.elementwise("gelu", "gelu", u, "b t f")
    y = b.matmul("proj", u, "b t f, f d -> b t d", bias="d" if bias else None)
    return dropout(b, "dropout", y, "b t d", dropout_p)


def gated_mlp(b: GraphBuilder, x: Tensor, *, act: str = "silu", bias: bool = False, hidden: str = "f") -> Tensor:
    """A gated MLP with three matrices: ``down(act(gate(x)) · up(x))``.

    ``act="silu"`` is SwiGLU (LLaMA), ``act="gelu"`` GeGLU. ``hidden`` names the
    hidden axes (``"f"``; DeepSeek's shared experts are ``"n i"``).
    """
    axes = f"b t {hidden}"
    gate = b.matmul("gate", x, f"b t d, d {hidden} -> {axes}", bias=hidden if bias else None)
    up = b.matmul("up", x, f"b t d, d {hidden} -> {axes}", bias=hidden if bias else None)
    gate = b.elementwise("act", act, gate, axes)
    u = b.elementwise("gated", "mul", [gate, up], f"{axes}, {axes} -> {axes}")
    return b.matmul("down", u, f"{axes}, {hidden} d -> b t d", bias="d" if bias else None)


def mixture_of_experts(
    b: GraphBuilder, x: Tensor, *, act: str = "silu", shared: bool = False, normalize: bool = False
) -> Tensor:
    """A routed mixture of gated experts (Mixtral, DeepSeek-MoE), with optional shared experts.

    A router scores the ``e`` experts; each token goes to ``r`` (top-k) of them.
    The expert matmuls are ``routed_matmul`` ops: FLOPs over the ``r`` routed copies
    of each token, parameters over all ``e`` weight sets (``active``: ``r`` of
    them). The down projection sums the ``r`` weighted expert outputs back into
    one token. ``shared``: ``n`` always-active experts of width ``i`` (DeepSeek). ``normalize``: the ``r``
    selected weights are divided by their sum (Qwen3-MoE's ``norm_topk_prob``).
    """
    logits = b.matmul("router", x, "b t d, d e -> b t e")
    probs = b.softmax("router_probs", logits, "b t e", axis="e")
    weights = b.reshape("top_k", probs, "b t e -> b t r")  # the r selected probabilities
    if normalize:  # one division per weight (a scale by 1/sum); the sum's r − 1 adds per token are not counted
        weights = b.elementwise("top_k_norm", "scale", weights, "b t r")
    route = {"experts": "e", "route": "r"}
    gate = b.op("gate", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs=route)
    up = b.op("up", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs=route)
    gate = b.elementwise("act", act, gate, "b t r i")
    u = b.elementwise("gated", "mul", [gate, up], "b t r i, b t r i -> b t r i")
    u = b.elementwise("weighted", "mul", [u, weights], "b t r i, b t r -> b t r i")
    y = b.op("down", "routed_matmul", [u], "b t r i, e i d -> b t d", attrs=route)
    if shared:
        with b.scope("shared"):
            y = residual(b, "add", y, gated_mlp(b, x, act=act, hidden="n i"))
    return y


# -- layers and the decoder ----------------------------------------------------------------------


def pre_norm_layer(
    b: GraphBuilder,
    x: Tensor,
    attention: Block,
    mlp: Block,
    *,
    rms: bool = True,
    post_norms: bool = False,
    norm_bias: bool | None = None,
) -> Tensor:
    """``x + attn(norm(x))``, then ``x + mlp(norm(x))`` (LLaMA, GPT-2).

    ``post_norms``: each sublayer's output is normed again before the residual add (Gemma 2 and 3:
    four norms per layer). ``norm_bias``: LayerNorm biases (default: on for LayerNorm, off for RMSNorm).
    """
    with b.scope("attn"):
        y = attention(b, b.norm("norm", x, "b t d", rms=rms, bias=norm_bias))
        if post_norms:
            y = b.norm("post_norm", y, "b t d", rms=rms, bias=norm_bias)
    x = residual(b, "attn_residual", x, y)
    with b.scope("mlp"):
        y = mlp(b, b.norm("norm", x, "b t d", rms=rms, bias=norm_bias))
        if post_norms:
            y = b.norm("post_norm", y, "b t d", rms=rms, bias=norm_bias)
    return residual(b, "mlp_residual", x, y)


def post_norm_layer(
    b: GraphBuilder, x: Tensor, attention: Block, mlp: Block, *, rms: bool = True, norm_bias: bool | None = None
) -> Tensor:
    """``x + norm(attn(x))``, then ``x + norm(mlp(x))`` (OLMo 2: the norms on the sublayers' outputs only)."""
    with b.scope("attn"):
        y = b.norm("post_norm", attention(b, x), "b t d", rms=rms, bias=norm_bias)
    x = residual(b, "attn_residual", x, y)
    with b.scope("mlp"):
        y = b.norm("post_norm", mlp(b, x), "b t d", rms=rms, bias=norm_bias)
    return residual(b, "mlp_residual", x, y)


def parallel_layer(
    b: GraphBuilder,
    x: Tensor,
    attention: Block,
    mlp: Block,
    *,
    rms: bool = False,
    shared_norm: bool = True,
    norm_bias: bool | None = None,
) -> Tensor:
    """``x + attn(norm(x)) + mlp(norm(x))``: attention and MLP read the same input in parallel (GPT-J, PaLM,
    GPT-NeoX, Falcon). ``shared_norm``: one norm for both (GPT-J, PaLM, Falcon 7B); otherwise each has its
    own (GPT-NeoX, Falcon 40B)."""
    if shared_norm:
        h = b.norm("norm", x, "b t d", rms=rms, bias=norm_bias)
        with b.scope("attn"):
            a = attention(b, h)
        with b.scope("mlp"):
            m = mlp(b, h)
    else:
        with b.scope("attn"):
            a = attention(b, b.norm("norm", x, "b t d", rms=rms, bias=norm_bias))
        with b.scope("mlp"):
            m = mlp(b, b.norm("norm", x, "b t d", rms=rms, bias=norm_bias))
    return residual(b, "mlp_residual", residual(b, "attn_residual", x, a), m)


def decoder(
    b: GraphBuilder,
    stacks: Sequence[tuple[str, object, Block]],
    *,
    tied: bool,
    rms: bool = True,
    embed_scale: bool = False,
    final_norm: bool = True,
    norm_bias: bool | None = None,
    head_bias: bool = False,
    logit_softcap: bool = False,
) -> nx.DiGraph:
    """Token embedding, each stack of layers ``(name, count, layer)`` in turn, final norm, unembedding, loss.

    ``layer(b, x)`` builds one layer; a stack is one subgraph with a count
    (DeepSeek-V3: ``("dense_layers", L_dense, ...)`` then ``("layers", L - L_dense, ...)``).
    ``tied``: the unembedding reuses the token embedding's table. ``embed_scale``: the embeddings are
    multiplied by a constant (Gemma: √d). ``head_bias``: the unembedding has a bias over the vocabulary.
    ``logit_softcap``: the logits go through ``c·tanh(x/c)`` (Gemma 2). ``final_norm``: a norm before the
    unembedding (every model here but the earliest).
    """
    ids = b.input("ids", "b t")
    x = b.gather("embed", ids, "b t, v d -> b t d")
    if embed_scale:
        x = b.elementwise("embed_scale", "scale", x, "b t d")
    for name, count, layer in stacks:
        with b.repeat(name, count):
            x = layer(b, x)
    if final_norm:
        x = b.norm("norm", x, "b t d", rms=rms, bias=norm_bias)
    logits = b.matmul(
        "lm_head", x, "b t d, v d -> b t v", tied="embed" if tied else None, bias="v" if head_bias else None
    )
    if logit_softcap:
        logits = b.elementwise("logit_softcap", "softcap", logits, "b t v")
    b.loss("loss", logits, "b t v -> b t")
    return b.graph
