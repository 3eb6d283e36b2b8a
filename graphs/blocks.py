"""Reusable transformer blocks, written with costmodel's builder.

Axis names used throughout (sizes are given to the builder by each family):
``b`` batch, ``t`` query positions, ``s`` key positions, ``d`` width, ``v``
vocabulary, ``h`` heads, ``k`` head dim, ``f`` MLP hidden width.
"""

from __future__ import annotations

from costmodel import GraphBuilder, Tensor


def dropout(b: GraphBuilder, name: str, x: Tensor, pattern: str, enabled: bool) -> Tensor:
    """Dropout saves a 1-byte mask per element; a no-op when disabled."""
    return b.elementwise(name, "dropout", x, pattern) if enabled else x


def causal_self_attention(b: GraphBuilder, x: Tensor, *, bias: bool, dropout_p: bool) -> Tensor:
    """Multi-head causal self-attention with materialised scores (what eager PyTorch does).

    q, k, v: ``b t d -> b h t k``; scores ``b h t k, b h s k -> b h t s``; the
    softmax over ``s``; context ``b h t s, b h s k -> b h t k``; output ``h k -> d``.
    """
    q = b.matmul("q", x, "b t d, d h k -> b h t k", bias="h k" if bias else None)
    k = b.tag(b.matmul("k", x, "b t d, d h k -> b h t k", bias="h k" if bias else None), "kv_cache")
    v = b.tag(b.matmul("v", x, "b t d, d h k -> b h t k", bias="h k" if bias else None), "kv_cache")
    scores = b.contract("scores", q, k, "b h t k, b h s k -> b h t s", causal=True)
    scores = b.elementwise("scale", "scale", scores, "b h t s")
    scores = b.elementwise("mask", "mask", scores, "b h t s")
    probs = b.softmax("softmax", scores, "b h t s", axis="s")
    probs = dropout(b, "dropout", probs, "b h t s", dropout_p)
    context = b.contract("context", probs, v, "b h t s, b h s k -> b h t k", causal=True)
    out = b.matmul("proj", context, "b h t k, h k d -> b t d", bias="d" if bias else None)
    return dropout(b, "resid_dropout", out, "b t d", dropout_p)


def gelu_mlp(b: GraphBuilder, x: Tensor, *, bias: bool, dropout_p: bool) -> Tensor:
    """``d -> f``, GELU, ``f -> d``."""
    u = b.matmul("fc", x, "b t d, d f -> b t f", bias="f" if bias else None)
    u = b.elementwise("gelu", "gelu", u, "b t f")
    y = b.matmul("proj", u, "b t f, f d -> b t d", bias="d" if bias else None)
    return dropout(b, "dropout", y, "b t d", dropout_p)


def residual(b: GraphBuilder, name: str, x: Tensor, y: Tensor) -> Tensor:
    return b.elementwise(name, "add", [x, y], "b t d, b t d -> b t d")
