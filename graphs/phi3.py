"""Phi-3 (and Phi-4, whose config.json says ``phi3``): LLaMA's layer with fused projections.

q, k and v come out of one ``qkv_proj`` matmul (``d -> (h + 2·n_kv)·d_head``) and are slices
of its output; the MLP's gate and up are one ``gate_up_proj`` (``d -> 2·d_ff``), halved. The
parameters and FLOPs are those of the separate matrices; the graph has fewer, wider matmuls,
as the model does. No biases, untied unembedding. A config's ``sliding_window`` makes every
layer a sliding-window layer: FLOPs count the dense T×T square (as PyTorch does), the KV cache
keeps the last W − 1 tokens (``cache_window``; see :mod:`mistral`). Partial rotary embeddings
(``partial_rotary_factor``) rotate fewer dims of q and k: no matmul, no parameter, ignored here.

Sources of the presets:

* Phi-3-mini-4k: Abdin et al. 2024, "Phi-3 Technical Report", §2 (3.8B parameters, 32 layers,
  width 3072, 32 heads, vocab 32064) and ``microsoft/Phi-3-mini-4k-instruct/config.json``
  (sliding window 2047, context 4096); keras-hub ``phi3_mini_4k_instruct_en``: 3,821,079,552.
* Phi-3-medium-4k: the same report (14B: 40 layers, width 5120, 40 heads, 10 KV heads) and
  ``microsoft/Phi-3-medium-4k-instruct/config.json`` (MLP 17920, window 2047).
* Phi-4: Abdin et al. 2024, "Phi-4 Technical Report", §3 (14B, the Phi-3-medium architecture
  with the tiktoken vocabulary) and ``microsoft/phi-4/config.json`` (vocab 100352, no window,
  context 16384).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, T, W, d, d_ff, h

from .blocks import decoder, pre_norm_layer
from .variants import attention, fused_gated_mlp
from .vocabulary import hf_settings, sizes


def phi3(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    tied: bool = False,
    window: object = None,
    cache_window: object = None,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Phi-3 decoder: fused ``qkv`` and ``gate_up`` matmuls.

    ``cache_window=W``: every layer slides (its KV cache keeps W − 1 tokens); ``window``, as in
    :func:`mistral.mistral`: count T×min(T, W) scores (a windowed kernel) instead of T×T.
    """
    extra = {} if window is None else {"w": sympy.Min(T, window)}
    b = GraphBuilder("phi3", dtype=dtype, **sizes(d_head, d_ff, **extra))
    cache = window if cache_window is None else cache_window

    def attn(b: GraphBuilder, x: Tensor) -> Tensor:
        return attention(b, x, fused_qkv=True, cache_window=cache, window=window is not None)

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        return pre_norm_layer(b, x, attn, fused_gated_mlp)

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``phi3`` config.json (``num_key_value_heads`` absent: multi-head)."""
    where = "config.json (phi3)"
    window = field(cfg, "sliding_window", int, None, where=where, minimum=2)
    return {**hf_settings(cfg, where, mha_default=True), **({"cache_window": W, "W": window} if window else {})}


_P3 = "Abdin et al. 2024 (Phi-3 Technical Report), section 2; microsoft/{} config.json"
_MINI = {"L": 32, "d": 3072, "h": 32, "n_kv": 32, "d_ff": 8192, "V": 32064, "T": 4096}
_MEDIUM = {"L": 40, "d": 5120, "h": 40, "n_kv": 10, "d_ff": 17920}

PRESETS = (
    Preset(
        "phi3-mini-4k",
        "phi3",
        {**_MINI, "cache_window": W, "W": 2047},
        _P3.format("Phi-3-mini-4k-instruct"),
        "Phi-3-mini-4k (3.8B; every layer a 2047-token window)",
    ),
    Preset(
        "phi3-medium-4k",
        "phi3",
        {**_MEDIUM, "V": 32064, "T": 4096, "cache_window": W, "W": 2047},
        _P3.format("Phi-3-medium-4k-instruct"),
        "Phi-3-medium-4k (14B, GQA; every layer a 2047-token window)",
    ),
    Preset(
        "phi4",
        "phi3",
        {**_MEDIUM, "V": 100352, "T": 16384},
        "Abdin et al. 2024 (Phi-4 Technical Report), section 3; microsoft/phi-4 config.json",
        "Phi-4 (14B: Phi-3-medium's shape, vocab 100352, no window)",
    ),
)

FAMILY = Family(
    "phi3",
    phi3,
    "Phi-3/Phi-4: LLaMA layers with fused qkv and gate_up matmuls, optional window",
    PRESETS,
    defaults={"T": 4096},
    hf_model_types=("phi3",),
    from_hf=from_hf,
)
