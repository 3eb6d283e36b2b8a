"""Qwen2: LLaMA's layer with biases on the q, k and v projections (none on o or the MLP).

Source of the preset: Qwen Team 2024, "Qwen2 Technical Report", Table 1, and
``Qwen/Qwen2-7B/config.json`` (vocab 152064, 4 KV heads, untied unembedding).
Small Qwen2 models (0.5B, 1.5B) tie the unembedding: ``tie_word_embeddings``.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset
from costmodel.symbols import L, d, d_ff, h

from .blocks import decoder, gated_mlp, grouped_query_attention, pre_norm_layer
from .vocabulary import hf_settings, sizes


def qwen2(
    *, d_ff: sympy.Expr = d_ff, d_head: sympy.Expr = d / h, tied: bool = False, dtype: str = "bf16"
) -> nx.DiGraph:
    """The Qwen2 decoder as an op graph (q/k/v biases; ``d_head`` as in :func:`llama.llama`)."""
    b = GraphBuilder("qwen2", dtype=dtype, **sizes(d_head, d_ff))

    def attention(b: GraphBuilder, x):
        return grouped_query_attention(b, x, qkv_bias=True)

    def layer(b: GraphBuilder, x):
        return pre_norm_layer(b, x, attention, gated_mlp)

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``qwen2`` config.json (sliding windows are not applied: dense count)."""
    return hf_settings(cfg, "config.json (qwen2)")


PRESETS = (
    Preset(
        "qwen2-7b",
        "qwen2",
        {"L": 28, "d": 3584, "h": 28, "n_kv": 4, "d_ff": 18944, "V": 152064, "T": 32768},
        "Qwen Team 2024 (Qwen2 Technical Report), Table 1; Qwen/Qwen2-7B config.json",
        "Qwen2 7B",
        ("Qwen/Qwen2-7B",),
    ),
)

FAMILY = Family(
    "qwen2",
    qwen2,
    "Qwen2: LLaMA layers with q/k/v biases",
    PRESETS,
    defaults={"T": 32768},
    hf_model_types=("qwen2",),
    from_hf=from_hf,
)
