"""Mistral: LLaMA's layer with sliding-window attention.

Sliding-window attention has two honest FLOP counts, a builder option:
``window=None`` (default) counts the full causal T×T square that a dense kernel
computes under a window mask — what PyTorch's eager and SDPA paths do and what
``FlopCounterMode`` counts; ``window=W`` (a size) counts T×min(T, W) scores,
what a windowed kernel (FlashAttention's ``window_size``) computes. A config's
``sliding_window`` bounds the KV cache (``cache_window``: the last W − 1 tokens, as
transformers keeps them) but not the FLOP count: ``--set window=4096`` applies it there.

Source of the preset: Jiang et al. 2023, "Mistral 7B", Table 1, and
``mistralai/Mistral-7B-v0.1/config.json`` (vocab 32000, sliding window 4096,
context 8192).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, T, W, d, d_ff, h

from .blocks import Block, decoder, gated_mlp, grouped_query_attention, pre_norm_layer
from .vocabulary import hf_settings, sizes


def sliding_attention(window: object, cache_window: object = None) -> tuple[dict[str, object], Block]:
    """The extra axis sizes and the attention block for ``window`` (None: the dense T×T count).

    ``cache_window`` (default: ``window``): the model's sliding window, which bounds
    its inference KV cache whichever FLOP count is chosen.
    """
    cache = window if cache_window is None else cache_window

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        return grouped_query_attention(b, x, window=window is not None, cache_window=cache)

    return ({} if window is None else {"w": sympy.Min(T, window)}), attention


def mistral(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    window: object = None,
    cache_window: object = None,
    tied: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Mistral decoder: ``window=None`` counts T×T scores (as PyTorch does), ``window=W`` T×min(T, W).

    ``cache_window``: the sliding window of the model (a config's ``sliding_window``),
    which keeps the KV cache at W − 1 tokens; defaults to ``window``.
    """
    extra, attention = sliding_attention(window, cache_window)
    b = GraphBuilder("mistral", dtype=dtype, **sizes(d_head, d_ff, **extra))

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        return pre_norm_layer(b, x, attention, gated_mlp)

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``mistral`` config.json (the dense count: see the module docstring)."""
    where = "config.json (mistral)"
    window = field(cfg, "sliding_window", int, None, where=where)  # bounds the KV cache; FLOPs stay dense
    return {**hf_settings(cfg, where), **({"cache_window": window} if window else {})}


_SOURCE = "Jiang et al. 2023 (Mistral 7B), Table 1; mistralai/Mistral-7B-v0.1 config.json"
_CONFIG = {"L": 32, "d": 4096, "h": 32, "n_kv": 8, "d_ff": 14336, "V": 32000, "T": 8192}

PRESETS = (
    Preset(
        "mistral-7b",
        "mistral",
        {**_CONFIG, "cache_window": 4096},
        _SOURCE,
        "Mistral 7B v0.1, dense T×T attention count",
        ("mistralai/Mistral-7B-v0.1",),
    ),
    Preset(
        "mistral-7b-swa",
        "mistral",
        {**_CONFIG, "window": W, "W": 4096},
        _SOURCE,
        "Mistral 7B v0.1, sliding-window count T×W (W = 4096)",
    ),
)

FAMILY = Family(
    "mistral",
    mistral,
    "Mistral: LLaMA layers, sliding-window attention (dense or windowed count)",
    PRESETS,
    defaults={"T": 8192},
    hf_model_types=("mistral",),
    from_hf=from_hf,
)
