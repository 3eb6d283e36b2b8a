"""Gemma 1, 2 and 3 (text): LLaMA-like decoders with GeGLU, √d-scaled embeddings and a tied unembedding.

* **Gemma** (1): RMSNorm pre-norm, multi-head or multi-query attention with a head dim of its
  own (``head_dim`` 256 while ``d/h`` is 128 or 192), GeGLU MLP (``gelu(gate)·up``), the
  embeddings multiplied by √d (an element-wise ``scale``), the unembedding tied to them.
* **Gemma 2** adds a norm after each sublayer too (four per layer), soft-caps the attention
  scores (``50·tanh(s/50)``, between the scale and the mask) and the final logits
  (``30·tanh(z/30)``), and alternates a sliding-window (local) layer with a full (global) one:
  the layer pattern ``"sf"``.
* **Gemma 3** keeps the four norms, drops the soft-caps (transformers ignores
  ``attn_logit_softcapping``; ``final_logit_softcapping`` is null in every release), adds an
  RMSNorm over each head's dims on queries and keys, and has five local layers per global
  one: the pattern ``"sssssf"`` (26 layers: ×4, then a tail ``"ss"``).

Local layers attend to a window of W tokens: FLOPs count the dense T×T square (PyTorch
computes it under a mask), the KV cache keeps the last W − 1 tokens (``cache_window``; see
:mod:`mistral`). Layer patterns: :mod:`variants`.

Sources of the presets (the parameter counts are those of transformers' ``*ForCausalLM`` built
from the cited config; exact published counts are keras-hub's ``gemma*_presets.py``):

* Gemma 2B/7B: Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and Technology",
  Table 1 (architecture) and Table 2 (non-embedding parameters 1,981,884,416 and
  7,751,248,896); ``google/gemma-{2b,7b}/config.json`` (vocab 256000, context 8192).
* Gemma 2 2B/9B/27B: Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical
  Size", Table 1 and §2 (window 4096, soft-caps 50 and 30); ``google/gemma-2-{2b,9b,27b}/config.json``.
* Gemma 3 1B/4B/12B/27B: Gemma Team 2025, "Gemma 3 Technical Report", Table 1 (parameter
  counts) and §2.1 (5:1 local/global, window 1024 — 512 for 1B — QK-norm);
  ``google/gemma-3-1b-pt/config.json`` and the ``text_config`` of ``google/gemma-3-{4b,12b,27b}-pt``
  (vocab 262144 for 1B, 262208 for the multimodal checkpoints; the vision tower is not counted).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import T, W, d_ff, d_head

from .blocks import decoder, gated_mlp, pre_norm_layer
from .variants import attention, hf_pattern, layer_kinds, layer_stacks
from .vocabulary import hf_settings, sizes


def _geglu(b: GraphBuilder, x: Tensor) -> Tensor:
    return gated_mlp(b, x, act="gelu")


def _gemma(
    name: str,
    *,
    d_ff: object,
    d_head: object,
    tied: bool,
    attention_bias: bool,
    pattern: str,
    tail: str,
    cache_window: object,
    window: object,
    post_norms: bool,
    qk_norm: str | None,
    attn_softcap: bool,
    logit_softcap: bool,
    dtype: str,
) -> nx.DiGraph:
    extra = {} if window is None else {"w": sympy.Min(T, window)}  # a windowed count's keys per query
    b = GraphBuilder(name, dtype=dtype, **sizes(d_head, d_ff, **extra))

    def layer(local: bool):
        def build(b: GraphBuilder, x: Tensor) -> Tensor:
            def attn(b: GraphBuilder, x: Tensor) -> Tensor:
                return attention(
                    b,
                    x,
                    bias=attention_bias,
                    qk_norm=qk_norm,
                    softcap=attn_softcap,
                    cache_window=cache_window if local else None,
                    window=local and window is not None,
                )

            return pre_norm_layer(b, x, attn, _geglu, post_norms=post_norms)

        return build

    kinds = {"s": ("sliding", layer(True)), "f": ("full", layer(False))}
    return decoder(b, layer_stacks(pattern, tail, kinds), tied=tied, embed_scale=True, logit_softcap=logit_softcap)


def gemma(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    tied: bool = True,
    attention_bias: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Gemma (1) decoder: every layer full attention, two norms per layer."""
    return _gemma(
        "gemma",
        d_ff=d_ff,
        d_head=d_head,
        tied=tied,
        attention_bias=attention_bias,
        pattern="f",
        tail="",
        cache_window=None,
        window=None,
        post_norms=False,
        qk_norm=None,
        attn_softcap=False,
        logit_softcap=False,
        dtype=dtype,
    )


def gemma2(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    tied: bool = True,
    attention_bias: bool = False,
    pattern: str = "sf",
    tail: str = "",
    cache_window: object = W,
    window: object = None,
    attn_softcap: bool = True,
    logit_softcap: bool = True,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Gemma 2 decoder: ``pattern`` of sliding (``s``) and full (``f``) layers, repeated, then ``tail``.

    ``cache_window``: the local layers' window W (their KV cache keeps W − 1 tokens).
    ``window=W``: count the local layers' T×min(T, W) scores, as a windowed kernel computes
    them (default: the dense T×T square, as PyTorch does). ``attn_softcap``/``logit_softcap``:
    soft-cap the attention scores / the final logits.
    """
    return _gemma(
        "gemma2",
        d_ff=d_ff,
        d_head=d_head,
        tied=tied,
        attention_bias=attention_bias,
        pattern=pattern,
        tail=tail,
        cache_window=cache_window,
        window=window,
        post_norms=True,
        qk_norm=None,
        attn_softcap=attn_softcap,
        logit_softcap=logit_softcap,
        dtype=dtype,
    )


def gemma3(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    tied: bool = True,
    attention_bias: bool = False,
    pattern: str = "sssssf",
    tail: str = "",
    cache_window: object = W,
    window: object = None,
    logit_softcap: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Gemma 3 text decoder: q/k RMSNorm over the head dim, ``pattern`` 5 local : 1 global, then ``tail``.

    ``cache_window`` and ``window`` as in :func:`gemma2`.
    """
    return _gemma(
        "gemma3",
        d_ff=d_ff,
        d_head=d_head,
        tied=tied,
        attention_bias=attention_bias,
        pattern=pattern,
        tail=tail,
        cache_window=cache_window,
        window=window,
        post_norms=True,
        qk_norm="head",
        attn_softcap=False,
        logit_softcap=logit_softcap,
        dtype=dtype,
    )


# -- Hugging Face config.json ------------------------------------------------------------------------


def _softcap(cfg: Mapping[str, object], name: str, default_on: bool, where: str) -> bool:
    """A soft-cap is on unless its field is null; an absent field takes transformers' default."""
    if name not in cfg:
        return default_on
    value = cfg[name]
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise CostModelError(f"{where}: field {name!r} must be a positive number or null, received {value!r}")
    return value is not None


def hf_gemma_settings(cfg: Mapping[str, object], where: str) -> dict[str, object]:
    """The fields every Gemma config.json shares: LLaMA's, with ``head_dim`` required and the
    unembedding tied unless ``tie_word_embeddings`` is false (transformers' Gemma default)."""
    out = hf_settings(cfg, where)
    out.update(
        d_head=field(cfg, "head_dim", where=where),
        tied=field(cfg, "tie_word_embeddings", bool, True, where=where),
        attention_bias=field(cfg, "attention_bias", bool, False, where=where),
    )
    return out


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``gemma`` config.json."""
    return hf_gemma_settings(cfg, "config.json (gemma)")


def from_hf2(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``gemma2`` config.json (layers alternate sliding, full unless ``layer_types``)."""
    where = "config.json (gemma2)"
    out = hf_gemma_settings(cfg, where)
    kinds = layer_kinds(
        cfg, out["L"], ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(out["L"])], where
    )
    return {
        **out,
        **hf_pattern(cfg, kinds, where),
        "attn_softcap": _softcap(cfg, "attn_logit_softcapping", True, where),
        "logit_softcap": _softcap(cfg, "final_logit_softcapping", True, where),
    }


def from_hf3(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``gemma3_text`` config.json.

    Layer ``i`` slides unless ``(i + 1) % sliding_window_pattern == 0`` (default 6), or as
    ``layer_types`` says. Bidirectional attention (an embedding model) is refused.
    """
    where = "config.json (gemma3_text)"
    out = hf_gemma_settings(cfg, where)
    if field(cfg, "use_bidirectional_attention", bool, False, where=where):
        raise CostModelError(
            f"{where}: use_bidirectional_attention = true is an encoder (EmbeddingGemma); "
            "expected a causal decoder (false or absent)"
        )
    every = field(cfg, "sliding_window_pattern", int, 6, where=where)
    kinds = layer_kinds(
        cfg, out["L"], ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(out["L"])], where
    )
    return {
        **out,
        **hf_pattern(cfg, kinds, where),
        "logit_softcap": _softcap(cfg, "final_logit_softcapping", False, where),
    }


# -- presets -----------------------------------------------------------------------------------------

_G1 = "Gemma Team 2024 (Gemma), Tables 1-2; google/gemma-{} config.json"
_G2 = "Gemma Team 2024 (Gemma 2), Table 1; google/gemma-2-{} config.json"
_G3 = "Gemma Team 2025 (Gemma 3 Technical Report), Table 1; google/gemma-3-{} config.json"
_V1 = {"V": 256000, "T": 8192}


def _preset(name: str, family: str, about: str, source: str, **config: object) -> Preset:
    return Preset(name, family, config, source, about)


PRESETS = (
    _preset(
        "gemma-2b",
        "gemma",
        "Gemma 2B (multi-query)",
        _G1.format("2b"),
        L=18,
        d=2048,
        h=8,
        n_kv=1,
        d_head=256,
        d_ff=16384,
        **_V1,
    ),
    _preset(
        "gemma-7b", "gemma", "Gemma 7B", _G1.format("7b"), L=28, d=3072, h=16, n_kv=16, d_head=256, d_ff=24576, **_V1
    ),
)
PRESETS2 = (
    _preset(
        "gemma2-2b",
        "gemma2",
        "Gemma 2 2B",
        _G2.format("2b"),
        L=26,
        d=2304,
        h=8,
        n_kv=4,
        d_head=256,
        d_ff=9216,
        W=4096,
        **_V1,
    ),
    _preset(
        "gemma2-9b",
        "gemma2",
        "Gemma 2 9B",
        _G2.format("9b"),
        L=42,
        d=3584,
        h=16,
        n_kv=8,
        d_head=256,
        d_ff=14336,
        W=4096,
        **_V1,
    ),
    _preset(
        "gemma2-27b",
        "gemma2",
        "Gemma 2 27B",
        _G2.format("27b"),
        L=46,
        d=4608,
        h=32,
        n_kv=16,
        d_head=128,
        d_ff=36864,
        W=4096,
        **_V1,
    ),
)
PRESETS3 = (
    _preset(
        "gemma3-1b",
        "gemma3",
        "Gemma 3 1B (26 layers: 4 × 5:1, then 2 local)",
        _G3.format("1b-pt"),
        L=26,
        d=1152,
        h=4,
        n_kv=1,
        d_head=256,
        d_ff=6912,
        W=512,
        V=262144,
        T=32768,
        tail="ss",
    ),
    _preset(
        "gemma3-4b",
        "gemma3",
        "Gemma 3 4B, text tower (34 layers: 5 × 5:1, then 4 local)",
        _G3.format("4b-pt") + " (text_config)",
        L=34,
        d=2560,
        h=8,
        n_kv=4,
        d_head=256,
        d_ff=10240,
        W=1024,
        V=262208,
        T=131072,
        tail="ssss",
    ),
    _preset(
        "gemma3-12b",
        "gemma3",
        "Gemma 3 12B, text tower (48 layers: 8 × 5:1)",
        _G3.format("12b-pt") + " (text_config)",
        L=48,
        d=3840,
        h=16,
        n_kv=8,
        d_head=256,
        d_ff=15360,
        W=1024,
        V=262208,
        T=131072,
    ),
    _preset(
        "gemma3-27b",
        "gemma3",
        "Gemma 3 27B, text tower (62 layers: 10 × 5:1, then 2 local)",
        _G3.format("27b-pt") + " (text_config)",
        L=62,
        d=5376,
        h=32,
        n_kv=16,
        d_head=128,
        d_ff=21504,
        W=1024,
        V=262208,
        T=131072,
        tail="ss",
    ),
)

FAMILY = Family(
    "gemma",
    gemma,
    "Gemma: GeGLU, √d-scaled embeddings, tied unembedding, head dim of its own",
    PRESETS,
    defaults={"T": 8192},
    hf_model_types=("gemma",),
    from_hf=from_hf,
)
FAMILY2 = Family(
    "gemma2",
    gemma2,
    "Gemma 2: Gemma with 4 norms per layer, soft-caps, local/global layers 1:1",
    PRESETS2,
    defaults={"T": 8192},
    hf_model_types=("gemma2",),
    from_hf=from_hf2,
)
FAMILY3 = Family(
    "gemma3",
    gemma3,
    "Gemma 3 (text): Gemma 2 without soft-caps, q/k norms, local/global 5:1",
    PRESETS3,
    defaults={"T": 131072},
    hf_model_types=("gemma3_text",),
    from_hf=from_hf3,
)
