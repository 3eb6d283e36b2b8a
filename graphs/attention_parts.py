"""Attention, in parts, for the decoders that vary it: GPT-NeoX, Falcon, StarCoder2, gpt-oss, Llama 4.

:func:`blocks.grouped_query_attention` is one fixed recipe; these families change one step each (a
rotary part of the head, keys and values copied to every query head, an ALiBi bias, a learned sink
logit in the softmax, a norm or a temperature on q), so their attention is written from the parts
below. The axes are those of :mod:`blocks` (``g`` key/value heads, ``m`` query heads per key/value
head, ``k`` head dim, ``w`` keys of a window), plus ``p``, the rotary part of a head (GPT-NeoX's
``rotary_pct``), and ``n = k − p``, the rest.

The score chain is always ``scores → element-wise ops with one input → softmax → context``, so the
``flash_attention`` pass fuses it (a sink travels with the softmax into the fused op).
"""

from __future__ import annotations

import sympy

from costmodel.kit import GraphBuilder, Tensor
from costmodel.symbols import T

Q, KV = "b g m t k", "b g t k"  # the query and key/value layouts (GQA: g key/value heads, m per group)


def projections(b: GraphBuilder, x: Tensor, *, bias: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """q ``b g m t k``, k and v ``b g t k``, each with a bias over its output when ``bias``.

    A fused ``query_key_value`` matrix (GPT-NeoX, Falcon) is these three side by side: the same
    FLOPs and parameters (Falcon's ``(h + 2·n_kv)·d_head`` columns).
    """
    q = b.matmul("q", x, f"b t d, d g m k -> {Q}", bias="g m k" if bias else None)
    k = b.matmul("k", x, f"b t d, d g k -> {KV}", bias="g k" if bias else None)
    v = b.matmul("v", x, f"b t d, d g k -> {KV}", bias="g k" if bias else None)
    return q, k, v


def rope(b: GraphBuilder, name: str, x: Tensor, axes: str, *, partial: bool = False) -> Tensor:
    """RoPE on the head dim ``k`` (last of ``axes``), or with ``partial`` on its first ``p`` dims only.

    Partial (GPT-NeoX's ``rotary_pct``): the ``p`` rotated dims and the ``n`` others are views of ``x``,
    the rotated part is concatenated back with the rest (a copy), as transformers' ``torch.cat`` does.
    """
    if not partial:
        return b.elementwise(name, "rope", x, axes)
    head = axes.rsplit(" ", 1)[0]  # every axis but k
    rotated = b.reshape(f"{name}_part", x, f"{axes} -> {head} p")  # x[..., :p], a view
    kept = b.reshape(f"{name}_pass", x, f"{axes} -> {head} n")  # x[..., p:], a view
    rotated = b.elementwise(name, "rope", rotated, f"{head} p")
    return b.op(f"{name}_cat", "reshape", [rotated, kept], f"{head} p, {head} n -> {axes}", attrs={"copy": True})


def to_query_heads(b: GraphBuilder, name: str, x: Tensor) -> Tensor:
    """``b g t k -> b g m t k``: keys or values copied for each of the ``m`` query heads of their group.

    Falcon's new decoder architecture does this before RoPE and the cache (its
    ``broadcast_to(...).transpose(1, 2).reshape(...)`` makes a copy), so its cache holds ``h`` heads.
    """
    return b.reshape(name, x, f"{KV} -> {Q}", copy=True)


def cached(b: GraphBuilder, x: Tensor, window: object = None) -> Tensor:
    """Tag ``x`` as kept by the KV cache: every position, or the last ``window − 1`` of them.

    transformers' sliding-window cache (``DynamicSlidingWindowLayer``, also used for Llama 4's
    chunks) keeps ``min(T, W − 1)`` tokens: the new token's own key makes ``W``.
    """
    return b.tag(x, "kv_cache", positions=None if window is None else sympy.Min(T, window - 1))


def attend(
    b: GraphBuilder,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    kv: str = "g",
    window: bool = False,
    alibi: bool = False,
    sink: bool = False,
) -> Tensor:
    """Scores, softmax and context: ``b g m t k`` queries against keys and values laid out ``b {kv} s k``.

    ``kv="g"``: one key/value head per group (GQA, MQA, MHA with ``m = 1``); ``kv="g m"``: keys and
    values already copied to every query head (:func:`to_query_heads`). ``window``: each query meets
    the ``w`` keys of its window (T×W scores, a windowed kernel); otherwise the full causal T×T square,
    as a dense kernel with a mask computes it and as PyTorch counts. ``alibi``: a bias fixed by the
    positions is added to every score (one FLOP each; Falcon-RW). ``sink``: a learned logit per query
    head joins each row of the softmax (gpt-oss): softmax over ``s + 1`` columns, the sink's dropped.
    """
    keys = "t w" if window else "s"
    if window:  # the w keys of each query's window: a strided view (unfold), no copy
        k = b.reshape("k_windows", k, f"b {kv} s k -> b {kv} t w k")
        v = b.reshape("v_windows", v, f"b {kv} s k -> b {kv} t w k")
    scores_axes = f"b g m t {keys[-1]}"
    scores = b.contract("scores", q, k, f"{Q}, b {kv} {keys} k -> {scores_axes}", causal=not window)
    if alibi:
        scores = b.elementwise("alibi", "add", scores, scores_axes)  # + slope·(key position), a constant
    scores = b.elementwise("scale", "scale", scores, scores_axes)
    scores = b.elementwise("mask", "mask", scores, scores_axes)
    attrs = {"axis": keys[-1], "sink": "g m" if sink else None}
    probs = b.op("softmax", "softmax", [scores], scores_axes, attrs=attrs)
    return b.contract("context", probs, v, f"{scores_axes}, b {kv} {keys} k -> {Q}", causal=not window)


def output(b: GraphBuilder, context: Tensor, *, bias: bool = False) -> Tensor:
    """The output projection ``g m k -> d``."""
    return b.matmul("o", context, f"{Q}, g m k d -> b t d", bias="d" if bias else None)
