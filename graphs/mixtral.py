"""Mixtral: Mistral's attention with a sparse mixture of SwiGLU experts in every layer.

Each token is routed to ``top_k`` of ``n_experts`` experts of width ``d_ff``
(HF ``intermediate_size``). ``params.active`` counts the experts a token uses
(the embeddings included: Mixtral's "12.9B active" of 46.7B).

Source of the preset: Jiang et al. 2024, "Mixtral of Experts", Table 1, and
``mistralai/Mixtral-8x7B-v0.1/config.json`` (8 experts, top-2, vocab 32000,
context 32768).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, field
from costmodel.symbols import L, d, d_ff, h, n_experts, top_k

from .blocks import decoder, mixture_of_experts, pre_norm_layer
from .mistral import sliding_attention
from .vocabulary import hf_experts, hf_settings, sizes


def mixtral(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    window: object = None,
    cache_window: object = None,
    tied: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Mixtral decoder; ``window`` and ``cache_window`` as in :func:`mistral.mistral`."""
    extra, attention = sliding_attention(window, cache_window)
    b = GraphBuilder("mixtral", dtype=dtype, **sizes(d_head, d_ff, e=n_experts, r=top_k, i=d_ff, **extra))

    def layer(b: GraphBuilder, x):
        return pre_norm_layer(b, x, attention, mixture_of_experts)

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``mixtral`` config.json."""
    where = "config.json (mixtral)"
    window = field(cfg, "sliding_window", int, None, where=where)  # bounds the KV cache; FLOPs stay dense
    return {
        **hf_settings(cfg, where),
        **hf_experts(cfg, where, "num_local_experts"),
        **({"cache_window": window} if window else {}),
    }


PRESETS = (
    Preset(
        "mixtral-8x7b",
        "mixtral",
        {"L": 32, "d": 4096, "h": 32, "n_kv": 8, "d_ff": 14336, "V": 32000, "n_experts": 8, "top_k": 2, "T": 32768},
        "Jiang et al. 2024 (Mixtral of Experts), Table 1; mistralai/Mixtral-8x7B-v0.1 config.json",
        "Mixtral 8x7B (top-2 of 8 experts)",
        ("mistralai/Mixtral-8x7B-v0.1",),
    ),
)

FAMILY = Family(
    "mixtral",
    mixtral,
    "Mixtral: Mistral attention, top-k routed SwiGLU experts",
    PRESETS,
    defaults={"T": 32768},
    hf_model_types=("mixtral",),
    from_hf=from_hf,
)
