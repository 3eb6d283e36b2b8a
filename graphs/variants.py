"""Decoder variants beyond LLaMA's layer: q/k norms, fused projections, soft-capped scores, layer patterns.

Used by Gemma 1/2/3, Phi-3, Qwen3 (dense and MoE) and OLMo 2. Axis names are those of
:mod:`blocks` (``b t s d v g m k f``); a few more name a flat projection before its head split:

=====  =====================================================================
axis   meaning
=====  =====================================================================
hk     every query head's dims side by side (``h·d_head``: OLMo 2's q_norm)
gk     every key/value head's dims side by side (``n_kv·d_head``)
qkv    Phi-3's fused q, k, v outputs (``(h + 2·n_kv)·d_head``)
2      a literal axis: Phi-3's fused gate and up halves
=====  =====================================================================

A *layer pattern* is a string with one letter per layer: ``"sssssf"`` is Gemma 3's
five sliding-window (``s``) layers then one full-attention (``f``) layer. A model's
layers are a repeated *unit* plus a *tail* (the layers left when L is not a multiple
of the unit): Gemma-3 1B's 26 layers are ``"sssssf"`` × 4 then ``"ss"``. The unit is
one subgraph repeated ``(L − len(tail)) / len(unit)`` times; its runs of one letter
are nested repeats, so the graph never grows with L.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

from costmodel.kit import CostModelError, GraphBuilder, Tensor, field
from costmodel.symbols import L, T

from .blocks import Block


def attention(
    b: GraphBuilder,
    x: Tensor,
    *,
    bias: bool = False,
    fused_qkv: bool = False,
    qk_norm: str | None = None,
    softcap: bool = False,
    cache_window: object = None,
    window: bool = False,
) -> Tensor:
    """Grouped-query attention with RoPE (as :func:`blocks.grouped_query_attention`) and its variants.

    ``bias``: biases on q, k, v and o (HF ``attention_bias``). ``fused_qkv``: one
    ``d -> (h + 2·n_kv)·d_head`` matmul whose output is sliced into q, k and v (views;
    Phi-3's ``qkv_proj``). ``qk_norm``: RMSNorm on queries and keys before RoPE,
    ``"head"`` over each head's ``d_head`` dims (Gemma 3, Qwen3) or ``"full"`` over the
    whole projection before the head split (OLMo 2). ``softcap``: the scaled scores go
    through ``c·tanh(x/c)`` before the mask (Gemma 2); the chain stays scores → scale →
    softcap → mask → softmax → context, which FlashAttention fuses. ``cache_window=W``:
    a sliding window of W tokens, so the KV cache keeps the last W − 1 (FLOPs still count
    the dense T×T square, as PyTorch computes it under a window mask). ``window=True``: count
    the window as a windowed kernel computes it instead, each query meeting the ``w`` keys
    of its window (the family sizes ``w = min(T, W)``), as :func:`blocks.grouped_query_attention`.
    """
    size = b.sizes
    if fused_qkv:
        if bias or qk_norm:
            raise CostModelError("attention: fused_qkv has no bias or q/k norm here (Phi-3 has neither)")
        # (q + 2·kv, d) as one weight; the q, k and v slices of its output are views
        qkv = b.matmul("qkv", x, "b t d, d qkv -> b t qkv", qkv=(size["g"] * size["m"] + 2 * size["g"]) * size["k"])
        q = b.reshape("q_slice", qkv, "b t qkv -> b g m t k")
        k = b.reshape("k_slice", qkv, "b t qkv -> b g t k")
        v = b.reshape("v_slice", qkv, "b t qkv -> b g t k")
    elif qk_norm == "full":
        hk, gk = size["g"] * size["m"] * size["k"], size["g"] * size["k"]
        q = b.matmul("q", x, "b t d, d hk -> b t hk", bias="hk" if bias else None, hk=hk)
        k = b.matmul("k", x, "b t d, d gk -> b t gk", bias="gk" if bias else None, gk=gk)
        q = b.reshape("q_heads", b.norm("q_norm", q, "b t hk", rms=True), "b t hk -> b g m t k")
        k = b.reshape("k_heads", b.norm("k_norm", k, "b t gk", rms=True), "b t gk -> b g t k")
        v = b.matmul("v", x, "b t d, d g k -> b g t k", bias="g k" if bias else None)
    else:
        q = b.matmul("q", x, "b t d, d g m k -> b g m t k", bias="g m k" if bias else None)
        k = b.matmul("k", x, "b t d, d g k -> b g t k", bias="g k" if bias else None)
        v = b.matmul("v", x, "b t d, d g k -> b g t k", bias="g k" if bias else None)
        if qk_norm == "head":
            q = b.norm("q_norm", q, "b g m t k", rms=True)
            k = b.norm("k_norm", k, "b g t k", rms=True)
        elif qk_norm is not None:
            raise CostModelError(f"attention: qk_norm must be 'head', 'full' or None, received {qk_norm!r}")
    kept = None if cache_window is None else sympy.Min(T, cache_window - 1)
    b.tag(v, "kv_cache", positions=kept)
    q = b.elementwise("q_rope", "rope", q, "b g m t k")
    k = b.tag(b.elementwise("k_rope", "rope", k, "b g t k"), "kv_cache", positions=kept)  # cached after RoPE
    keys = "s"
    if window:  # the w keys of each query's window: a strided view (unfold), no copy
        k = b.reshape("k_windows", k, "b g s k -> b g t w k")
        v = b.reshape("v_windows", v, "b g s k -> b g t w k")
        keys = "t w"
    axes = f"b g m t {keys[-1]}"
    scores = b.contract("scores", q, k, f"b g m t k, b g {keys} k -> {axes}", causal=not window)
    scores = b.elementwise("scale", "scale", scores, axes)
    if softcap:
        scores = b.elementwise("softcap", "softcap", scores, axes)
    probs = b.softmax("softmax", b.elementwise("mask", "mask", scores, axes), axes, axis=keys[-1])
    context = b.contract("context", probs, v, f"{axes}, b g {keys} k -> b g m t k", causal=not window)
    return b.matmul("o", context, "b g m t k, g m k d -> b t d", bias="d" if bias else None)


def fused_gated_mlp(b: GraphBuilder, x: Tensor, *, act: str = "silu") -> Tensor:
    """``down(act(gate) · up)`` with gate and up as one ``d -> 2·f`` matmul (Phi-3's ``gate_up_proj``).

    The literal axis ``2`` holds the two halves; each is a slice (a view) of the output.
    """
    gate_up = b.matmul("gate_up", x, "b t d, d 2 f -> b t 2 f")
    gate = b.elementwise("act", act, b.reshape("gate", gate_up, "b t 2 f -> b t f"), "b t f")
    up = b.reshape("up", gate_up, "b t 2 f -> b t f")
    u = b.elementwise("gated", "mul", [gate, up], "b t f, b t f -> b t f")
    return b.matmul("down", u, "b t f, f d -> b t d")


# -- layer patterns --------------------------------------------------------------------------------


def periodic(kinds: Sequence[str]) -> tuple[str, str]:
    """The shortest ``unit`` and the ``tail`` with ``kinds = unit × n + tail`` (n ≥ 1).

    >>> periodic("sssssf" * 4 + "ss")
    ('sssssf', 'ss')
    >>> periodic("ffff")
    ('f', '')
    """
    kinds = "".join(kinds)
    for p in range(1, len(kinds) + 1):
        if all(kinds[i] == kinds[i % p] for i in range(len(kinds))):
            return kinds[:p], kinds[len(kinds) // p * p :]
    raise CostModelError("layer pattern: expected at least one layer")


def _runs(kinds: str) -> list[tuple[str, int]]:
    """``"sssssf"`` → ``[("s", 5), ("f", 1)]``."""
    out: list[tuple[str, int]] = []
    for c in kinds:
        if out and out[-1][0] == c:
            out[-1] = (c, out[-1][1] + 1)
        else:
            out.append((c, 1))
    return out


def layer_stacks(
    pattern: str, tail: str, layers: Mapping[str, tuple[str, Block]], count: object = L
) -> list[tuple[str, object, Block]]:
    """The stacks of :func:`blocks.decoder` for ``count`` layers: ``pattern`` repeated, then ``tail``.

    ``layers`` maps each letter to (a name, the layer's builder). One letter repeated
    is one stack ``("layers", L, layer)``, as LLaMA's; a unit of several runs is a stack
    ``"layers"`` of ``(L − len(tail)) / len(pattern)`` units, each run a nested repeat named
    after its letter (``layers.sliding``: ×5, ``layers.full``: ×1 per unit); the tail's runs
    follow as stacks of their own (``sliding_tail``). The block count must come out a
    positive whole number (checked with the numbers).
    """
    for where, kinds in (("pattern", pattern), ("tail", tail)):
        bad = sorted(set(kinds) - set(layers)) if isinstance(kinds, str) else [kinds]
        if bad:
            raise CostModelError(
                f"layer {where} {kinds!r}: unknown layer kind {bad[0]!r}; expected "
                "letters among " + ", ".join(f"{c!r} ({n})" for c, (n, _) in layers.items())
            )
    if not pattern:
        raise CostModelError("layer pattern: expected at least one letter, received ''")
    runs = _runs(pattern)
    units = (count - len(tail)) / len(pattern)
    if len(runs) == 1 and runs[0][1] == 1:
        stacks = [("layers", units, layers[pattern][1])]
    else:

        def unit(b: GraphBuilder, x: Tensor) -> Tensor:
            for name, n, layer in _named(runs, layers, ""):
                with b.repeat(name, n):
                    x = layer(b, x)
            return x

        stacks = [("layers", units, unit)]
    return stacks + list(_named(_runs(tail), layers, "_tail"))


def _named(runs: list[tuple[str, int]], layers: Mapping[str, tuple[str, Block]], suffix: str):
    """(unique name, count, layer) for each run: a kind's second run is ``name_2``."""
    seen: dict[str, int] = {}
    for c, n in runs:
        name = layers[c][0]
        seen[name] = seen.get(name, 0) + 1
        yield f"{name}{suffix}" + (f"_{seen[name]}" if seen[name] > 1 else ""), n, layers[c][1]


# -- Hugging Face config.json -------------------------------------------------------------------------


def layer_kinds(cfg: Mapping[str, object], n_layers: int, default: list[str], where: str) -> str:
    """The config's ``layer_types`` (or ``default``) as one letter per layer: ``s`` sliding, ``f`` full."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = default
    letters = {"sliding_attention": "s", "full_attention": "f"}
    if (
        not isinstance(kinds, list)
        or any(not isinstance(k, str) or k not in letters for k in kinds)
        or len(kinds) != n_layers
    ):
        raise CostModelError(
            f"{where}: field 'layer_types' must list 'sliding_attention' or 'full_attention' for "
            f"each of the {n_layers} layers, received {kinds!r}"
        )
    return "".join(letters[k] for k in kinds)


def hf_pattern(cfg: Mapping[str, object], kinds: str, where: str) -> dict[str, object]:
    """``pattern``, ``tail`` and the window (required when a layer slides) for the layer kinds ``kinds``."""
    pattern, tail = periodic(kinds)
    out: dict[str, object] = {"pattern": pattern, "tail": tail}
    if "s" in kinds:  # the window bounds the local layers' cache (a field that must then be given)
        out["cache_window"] = field(cfg, "sliding_window", where=where, minimum=2)
    return out
