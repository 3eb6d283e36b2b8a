"""OLMo 2: LLaMA's sublayers with the norms moved to their outputs, and q/k norms over whole projections.

Each layer is ``x + norm(attn(x))`` then ``x + norm(mlp(x))`` (:func:`blocks.post_norm_layer`:
no norm on the sublayers' inputs). The queries and keys are RMS-normed over the whole
projection, before the split into heads (``q_norm`` over ``h·d_head``, ``k_norm`` over
``n_kv·d_head``), then rotated (RoPE). SwiGLU MLP, untied unembedding; ``attention_bias``
puts biases on q, k, v and o.

Sources of the presets: Team OLMo 2024, "2 OLMo 2 Furious", Table 1 (7B: 32 layers, width
4096, 32 heads; 13B: 40 layers, width 5120, 40 heads; QK-norm and reordered norms, §2.2) and
``allenai/OLMo-2-1124-{7B,13B}/config.json`` (MLP 11008 and 13824, vocab 100352, context 4096).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, d, d_ff, h

from .blocks import decoder, gated_mlp, post_norm_layer
from .variants import attention
from .vocabulary import hf_settings, sizes


def olmo2(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    tied: bool = False,
    attention_bias: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The OLMo 2 decoder: post-norm sublayers, q/k RMSNorm over the whole projection."""
    b = GraphBuilder("olmo2", dtype=dtype, **sizes(d_head, d_ff))

    def attn(b: GraphBuilder, x: Tensor) -> Tensor:
        return attention(b, x, bias=attention_bias, qk_norm="full")

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        return post_norm_layer(b, x, attn, gated_mlp)

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``olmo2`` config.json (``num_key_value_heads`` absent: multi-head)."""
    where = "config.json (olmo2)"
    return {
        **hf_settings(cfg, where, mha_default=True),
        "attention_bias": field(cfg, "attention_bias", bool, False, where=where),
    }


_SOURCE = "Team OLMo 2024 (2 OLMo 2 Furious), Table 1; allenai/OLMo-2-1124-{} config.json"
_CONFIG = {"V": 100352, "T": 4096}

PRESETS = (
    Preset(
        "olmo2-7b",
        "olmo2",
        {"L": 32, "d": 4096, "h": 32, "n_kv": 32, "d_ff": 11008, **_CONFIG},
        _SOURCE.format("7B"),
        "OLMo 2 7B (November 2024)",
    ),
    Preset(
        "olmo2-13b",
        "olmo2",
        {"L": 40, "d": 5120, "h": 40, "n_kv": 40, "d_ff": 13824, **_CONFIG},
        _SOURCE.format("13B"),
        "OLMo 2 13B (November 2024)",
    ),
)

FAMILY = Family(
    "olmo2",
    olmo2,
    "OLMo 2: post-norm sublayers, q/k RMSNorm over whole projections, SwiGLU",
    PRESETS,
    defaults={"T": 4096},
    hf_model_types=("olmo2",),
    from_hf=from_hf,
)
