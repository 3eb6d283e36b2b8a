"""Qwen3 and Qwen3-MoE: LLaMA's layer with an RMSNorm over each head's dims on queries and keys.

* **Qwen3** (dense): q/k norms (before RoPE), no biases (``attention_bias``: on q, k, v and o),
  a head dim of its own (``head_dim`` 128 while ``d/h`` is 64 for 0.6B), the unembedding tied
  in the small models. ``use_sliding_window`` (off in every release) makes layers from
  ``max_window_layers`` on slide: the layer pattern (:mod:`variants`) ``f…fs…s``.
* **Qwen3-MoE**: the same attention; each MoE layer's MLP is a softmax router over
  ``n_experts`` experts of width ``d_expert`` (HF ``moe_intermediate_size``), the top ``top_k``
  probabilities renormalised to sum to one (``norm_topk_prob``), the experts stacked and
  picked per token (``routed_matmul``), no shared expert. Layer ``i`` has a dense SwiGLU MLP
  of width ``d_ff`` instead when it is in ``mlp_only_layers`` or ``(i + 1) %
  decoder_sparse_step != 0``: the layer pattern of ``m`` (MoE) and ``d`` (dense) letters.
  ``params.active`` counts ``top_k`` of the experts, the router and the embeddings.

Sliding windows, where a config turns them on, bound the KV cache only (see :mod:`mistral`).

Sources of the presets: Qwen Team 2025, "Qwen3 Technical Report", Tables 1 (dense: layers,
heads, tied embeddings) and 2 (MoE: 128 experts, 8 activated); the ``config.json`` of each
``Qwen/Qwen3-*`` checkpoint (vocab 151936, head dim 128, context 40960); the model cards give
the counts (0.6B…32.8B; 30.5B total and 3.3B activated; 235B and 22B), keras-hub's
``qwen3*_presets.py`` the exact ones.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import T, W, d, d_expert, d_ff, d_head, h, n_experts, top_k

from .blocks import decoder, gated_mlp, mixture_of_experts, pre_norm_layer
from .variants import attention, hf_pattern, layer_kinds, layer_stacks, periodic
from .vocabulary import hf_experts, hf_settings, sizes


def _attention(bias: bool, cache_window: object, windowed: bool = False):
    def attn(b: GraphBuilder, x: Tensor) -> Tensor:
        return attention(b, x, bias=bias, qk_norm="head", cache_window=cache_window, window=windowed)

    return attn


def _window(window: object) -> dict[str, object]:
    """The key axis of a windowed count (``window=W``: T×min(T, W) scores), none for the dense count."""
    return {} if window is None else {"w": sympy.Min(T, window)}


def qwen3(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    tied: bool = False,
    attention_bias: bool = False,
    pattern: str = "f",
    tail: str = "",
    cache_window: object = W,
    window: object = None,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Qwen3 decoder: ``pattern`` of full (``f``) and sliding (``s``) layers, repeated, then ``tail``.

    ``cache_window``: the sliding layers' window W; ``window=W``: count their T×min(T, W) scores.
    """
    b = GraphBuilder("qwen3", dtype=dtype, **sizes(d_head, d_ff, **_window(window)))
    local = _attention(attention_bias, cache_window, window is not None)

    def layer(attn):
        return lambda b, x: pre_norm_layer(b, x, attn, gated_mlp)

    kinds = {"f": ("full", layer(_attention(attention_bias, None))), "s": ("sliding", layer(local))}
    return decoder(b, layer_stacks(pattern, tail, kinds), tied=tied)


def qwen3_moe(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    tied: bool = False,
    attention_bias: bool = False,
    pattern: str = "m",
    tail: str = "",
    normalize: bool = True,
    window: object = None,
    cache_window: object = None,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Qwen3-MoE decoder: ``pattern`` of MoE (``m``) and dense (``d``) layers, then ``tail``.

    ``normalize``: the top-k router weights are renormalised (HF ``norm_topk_prob``).
    ``cache_window=W``: every layer slides (HF ``use_sliding_window``); ``window`` as in :func:`qwen3`.
    """
    b = GraphBuilder(
        "qwen3_moe", dtype=dtype, **sizes(d_head, d_ff, e=n_experts, r=top_k, i=d_expert, **_window(window))
    )
    attn = _attention(attention_bias, window if cache_window is None else cache_window, window is not None)

    def moe(b: GraphBuilder, x: Tensor) -> Tensor:
        return mixture_of_experts(b, x, normalize=normalize)

    kinds = {
        "m": ("moe", lambda b, x: pre_norm_layer(b, x, attn, moe)),
        "d": ("dense", lambda b, x: pre_norm_layer(b, x, attn, gated_mlp)),
    }
    return decoder(b, layer_stacks(pattern, tail, kinds), tied=tied)


# -- Hugging Face config.json ------------------------------------------------------------------------


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``qwen3`` config.json (``head_dim`` and ``num_key_value_heads`` required).

    Layer ``i`` slides when ``use_sliding_window`` and ``i >= max_window_layers``, or as ``layer_types`` says.
    """
    where = "config.json (qwen3)"
    out = {
        **hf_settings(cfg, where),
        "d_head": field(cfg, "head_dim", where=where),
        "attention_bias": field(cfg, "attention_bias", bool, False, where=where),
    }
    sliding = field(cfg, "use_sliding_window", bool, False, where=where)
    first = field(cfg, "max_window_layers", int, out["L"], where=where, minimum=0) if sliding else out["L"]
    kinds = layer_kinds(
        cfg, out["L"], ["sliding_attention" if i >= first else "full_attention" for i in range(out["L"])], where
    )
    if "s" in kinds and not sliding:  # transformers drops the window then: every layer keeps its whole cache
        kinds = kinds.replace("s", "f")
    return {**out, **hf_pattern(cfg, kinds, where)}


def from_hf_moe(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``qwen3_moe`` config.json.

    ``head_dim`` absent: ``hidden_size / num_attention_heads``. Layer ``i`` is dense when it is in
    ``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step != 0``. ``use_sliding_window``: every
    layer slides.
    """
    where = "config.json (qwen3_moe)"
    out = {
        **hf_settings(cfg, where),
        **hf_experts(cfg, where, "num_experts"),
        "d_expert": field(cfg, "moe_intermediate_size", where=where),
        "attention_bias": field(cfg, "attention_bias", bool, False, where=where),
        "normalize": field(cfg, "norm_topk_prob", bool, False, where=where),
    }
    out["d_head"] = field(cfg, "head_dim", int, out["d"] // out["h"], where=where)
    step = field(cfg, "decoder_sparse_step", int, 1, where=where)
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
        raise CostModelError(f"{where}: field 'mlp_only_layers' must be a list of layer indices, received {dense!r}")
    listed = set(dense)  # a set: a list's `in` made this O(L·n)
    kinds = "".join("d" if i in listed or (i + 1) % step else "m" for i in range(out["L"]))
    if "m" not in kinds:
        raise CostModelError(
            f"{where}: no MoE layer among num_hidden_layers = {out['L']} (decoder_sparse_step = "
            f"{step}, mlp_only_layers = {dense if len(dense) <= 16 else f'{len(dense):,} layers'}); expected at least one"
        )
    pattern, tail = periodic(kinds)
    out.update(pattern=pattern, tail=tail)
    if field(cfg, "use_sliding_window", bool, False, where=where):
        out.update(cache_window=W, W=field(cfg, "sliding_window", where=where, minimum=2))
    return out


# -- presets -----------------------------------------------------------------------------------------

_SOURCE = "Qwen Team 2025 (Qwen3 Technical Report), Table {}; Qwen/Qwen3-{} config.json"


def _dense(size: str, L: int, d: int, h: int, d_ff: int, tied: bool) -> Preset:
    config = {"L": L, "d": d, "h": h, "n_kv": 8, "d_head": 128, "d_ff": d_ff, "V": 151936, "T": 40960, "tied": tied}
    return Preset(f"qwen3-{size.lower()}", "qwen3", config, _SOURCE.format(1, size), f"Qwen3 {size}")


PRESETS = (
    _dense("0.6B", 28, 1024, 16, 3072, True),
    _dense("1.7B", 28, 2048, 16, 6144, True),
    _dense("4B", 36, 2560, 32, 9728, True),
    _dense("8B", 36, 4096, 32, 12288, False),
    _dense("14B", 40, 5120, 40, 17408, False),
    _dense("32B", 64, 5120, 64, 25600, False),
)
_MOE = {"n_kv": 4, "d_head": 128, "n_experts": 128, "top_k": 8, "V": 151936, "T": 40960}
PRESETS_MOE = (
    Preset(
        "qwen3-30b-a3b",
        "qwen3_moe",
        {**_MOE, "L": 48, "d": 2048, "h": 32, "d_expert": 768},
        _SOURCE.format(2, "30B-A3B"),
        "Qwen3-30B-A3B (top-8 of 128 experts)",
    ),
    Preset(
        "qwen3-235b-a22b",
        "qwen3_moe",
        {**_MOE, "L": 94, "d": 4096, "h": 64, "d_expert": 1536},
        _SOURCE.format(2, "235B-A22B"),
        "Qwen3-235B-A22B (top-8 of 128 experts)",
    ),
)

FAMILY = Family(
    "qwen3",
    qwen3,
    "Qwen3: LLaMA layers with q/k RMSNorm over the head dim",
    PRESETS,
    defaults={"T": 40960},
    hf_model_types=("qwen3",),
    from_hf=from_hf,
)
FAMILY_MOE = Family(
    "qwen3_moe",
    qwen3_moe,
    "Qwen3-MoE: Qwen3 attention, top-k of stacked SwiGLU experts",
    PRESETS_MOE,
    defaults={"T": 40960, "d_head": d / h},
    hf_model_types=("qwen3_moe",),
    from_hf=from_hf_moe,
)
