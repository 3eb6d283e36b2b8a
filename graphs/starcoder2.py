"""StarCoder2: Mistral's skeleton with LayerNorms, biases, a GELU MLP and sliding-window attention.

Pre-norm layers with LayerNorm (gain and bias), grouped-query attention with RoPE and biases on q,
k, v and o (``use_bias``), a two-matrix MLP ``c_proj(gelu(c_fc(x)))`` with biases, a final
LayerNorm; the unembedding is tied unless ``tie_word_embeddings`` is false (15B).

Sliding windows are counted as in :mod:`mistral`: ``window=None`` (default) counts the full causal
T×T square that transformers' eager and SDPA paths compute under a window mask (what
``FlopCounterMode`` counts); ``window=W`` counts T×min(T, W) scores, a windowed kernel's work. A
config's ``sliding_window`` sets ``cache_window``: the KV cache keeps the last W − 1 tokens, as
transformers' sliding-window cache does, whichever FLOP count is chosen.

Sources of the presets: Lozhkov et al. 2024, "StarCoder 2 and The Stack v2: The Next Generation"
(the 3B, 7B and 15B models), and ``bigcode/starcoder2-{3b,7b,15b}/config.json`` (vocab
49152, sliding window 4096, context 16384; 3B and 7B leave ``tie_word_embeddings`` at transformers'
default, true; 15B sets it false).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, T, d, d_ff, h

from .blocks import decoder, gelu_mlp, grouped_query_attention, pre_norm_layer
from .vocabulary import hf_settings, sizes


def starcoder2(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    window: object = None,
    cache_window: object = None,
    bias: bool = True,
    tied: bool = True,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The StarCoder2 decoder: ``window=None`` counts T×T scores (as PyTorch does), ``window=W`` T×min(T, W).

    ``cache_window``: the model's sliding window (``sliding_window``), which keeps the KV cache at
    W − 1 tokens; defaults to ``window``. ``bias``: biases on the attention and MLP matrices
    (``use_bias``; the LayerNorms always have theirs). ``tied``: the unembedding reuses the token table.
    """
    cache = window if cache_window is None else cache_window
    extra = {} if window is None else {"w": sympy.Min(T, window)}
    b = GraphBuilder("starcoder2", dtype=dtype, **sizes(d_head, d_ff, **extra))

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        return grouped_query_attention(
            b, x, qkv_bias=bias, out_bias=bias, window=window is not None, cache_window=cache
        )

    def mlp(b: GraphBuilder, x: Tensor) -> Tensor:
        return gelu_mlp(b, x, bias=bias, dropout_p=False)

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        return pre_norm_layer(b, x, attention, mlp, rms=False)

    return decoder(b, [("layers", L, layer)], tied=tied, rms=False)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``starcoder2`` config.json (the dense count: see the module docstring)."""
    where = "config.json (starcoder2)"
    out = {
        **hf_settings(cfg, where),
        "tied": field(cfg, "tie_word_embeddings", bool, True, where=where),
        "bias": field(cfg, "use_bias", bool, True, where=where),
    }
    window = field(cfg, "sliding_window", int, None, where=where)  # bounds the KV cache; FLOPs stay dense
    return {**out, **({"cache_window": window} if window else {})}


_SOURCE = "Lozhkov et al. 2024 (StarCoder 2 and The Stack v2); bigcode/starcoder2-{} config.json"
_COMMON = {"V": 49152, "T": 16384, "cache_window": 4096}

PRESETS = (
    Preset(
        "starcoder2-3b",
        "starcoder2",
        {**_COMMON, "L": 30, "d": 3072, "h": 24, "n_kv": 2, "d_ff": 12288},
        _SOURCE.format("3b"),
        "StarCoder2-3B (tied), dense T×T attention count",
    ),
    Preset(
        "starcoder2-7b",
        "starcoder2",
        {**_COMMON, "L": 32, "d": 4608, "h": 36, "n_kv": 4, "d_ff": 18432},
        _SOURCE.format("7b"),
        "StarCoder2-7B (tied), dense T×T attention count",
    ),
    Preset(
        "starcoder2-15b",
        "starcoder2",
        {**_COMMON, "L": 40, "d": 6144, "h": 48, "n_kv": 4, "d_ff": 24576, "tied": False},
        _SOURCE.format("15b"),
        "StarCoder2-15B (untied), dense T×T attention count",
    ),
)

FAMILY = Family(
    "starcoder2",
    starcoder2,
    "StarCoder2: GQA + RoPE with biases, LayerNorm, GELU MLP, sliding window",
    PRESETS,
    defaults={"T": 16384},
    hf_model_types=("starcoder2",),
    from_hf=from_hf,
)
