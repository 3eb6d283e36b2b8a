"""LLaMA 1/2/3: RMSNorm pre-norm, grouped-query attention with RoPE, SwiGLU MLP, untied unembedding.

Sources of the presets (the Hugging Face ``config.json`` of each released model;
parameter counts are those of ``LlamaForCausalLM`` built from that config, which
``tests/test_arch_presets.py`` rebuilds with transformers):

* LLaMA (1) 7B/65B: Touvron et al. 2023, "LLaMA", Table 2 (MLP width 2/3·4d rounded up to a
  multiple of 256), and ``huggyllama/llama-{7b,65b}/config.json`` (vocab 32000, context 2048).
* LLaMA-2 7B/13B/70B: Touvron et al. 2023, "Llama 2", Table 1 (GQA for 70B), and
  ``meta-llama/Llama-2-{7b,13b,70b}-hf/config.json`` (vocab 32000, context 4096).
* Llama 3 8B/70B: Meta, "The Llama 3 Herd of Models" (2024), Table 3, and
  ``meta-llama/Meta-Llama-3-{8B,70B}/config.json`` (vocab 128256, 8 KV heads;
  pretraining context 8192).
* Llama 3.1 405B: the same paper, Table 3, and ``meta-llama/Llama-3.1-405B/config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, field
from costmodel.symbols import L, d, d_ff, h

from .blocks import decoder, gated_mlp, grouped_query_attention, pre_norm_layer
from .vocabulary import hf_settings, sizes


def llama(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    tied: bool = False,
    attention_bias: bool = False,
    mlp_bias: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The LLaMA decoder as an op graph.

    ``d_head``: the head dim, ``d/h`` unless a config gives ``head_dim``.
    ``attention_bias``: biases on q, k, v and o (HF ``attention_bias``);
    ``mlp_bias``: on the three MLP matrices. ``tied``: the unembedding reuses
    the token embedding (Llama 3.2 1B/3B).
    """
    b = GraphBuilder("llama", dtype=dtype, **sizes(d_head, d_ff))

    def layer(b: GraphBuilder, x):
        return pre_norm_layer(
            b,
            x,
            lambda b, x: grouped_query_attention(b, x, qkv_bias=attention_bias, out_bias=attention_bias),
            lambda b, x: gated_mlp(b, x, bias=mlp_bias),
        )

    return decoder(b, [("layers", L, layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``llama`` config.json."""
    where = "config.json (llama)"
    return {
        **hf_settings(cfg, where, mha_default=True),
        "attention_bias": field(cfg, "attention_bias", bool, False, where=where),
        "mlp_bias": field(cfg, "mlp_bias", bool, False, where=where),
    }


_L1 = "Touvron et al. 2023 (LLaMA), Table 2; huggyllama/llama-{} config.json"
_L2 = "Touvron et al. 2023 (Llama 2), Table 1; meta-llama/Llama-2-{}-hf config.json"
_L3 = "Llama Team 2024 (The Llama 3 Herd of Models), Table 3; meta-llama/{} config.json"


def _preset(name: str, about: str, source: str, hf_id: str, **config: object) -> Preset:
    return Preset(name, "llama", config, source, about, (hf_id,))


PRESETS = (
    _preset(
        "llama1-7b",
        "LLaMA 7B",
        _L1.format("7b"),
        "huggyllama/llama-7b",
        L=32,
        d=4096,
        h=32,
        n_kv=32,
        d_ff=11008,
        V=32000,
        T=2048,
    ),
    _preset(
        "llama1-65b",
        "LLaMA 65B",
        _L1.format("65b"),
        "huggyllama/llama-65b",
        L=80,
        d=8192,
        h=64,
        n_kv=64,
        d_ff=22016,
        V=32000,
        T=2048,
    ),
    _preset(
        "llama2-7b",
        "LLaMA-2 7B",
        _L2.format("7b"),
        "meta-llama/Llama-2-7b-hf",
        L=32,
        d=4096,
        h=32,
        n_kv=32,
        d_ff=11008,
        V=32000,
        T=4096,
    ),
    _preset(
        "llama2-13b",
        "LLaMA-2 13B",
        _L2.format("13b"),
        "meta-llama/Llama-2-13b-hf",
        L=40,
        d=5120,
        h=40,
        n_kv=40,
        d_ff=13824,
        V=32000,
        T=4096,
    ),
    _preset(
        "llama2-70b",
        "LLaMA-2 70B (GQA, 8 KV heads)",
        _L2.format("70b"),
        "meta-llama/Llama-2-70b-hf",
        L=80,
        d=8192,
        h=64,
        n_kv=8,
        d_ff=28672,
        V=32000,
        T=4096,
    ),
    _preset(
        "llama3-8b",
        "Llama 3 8B",
        _L3.format("Meta-Llama-3-8B"),
        "meta-llama/Meta-Llama-3-8B",
        L=32,
        d=4096,
        h=32,
        n_kv=8,
        d_ff=14336,
        V=128256,
        T=8192,
    ),
    _preset(
        "llama3-70b",
        "Llama 3 70B",
        _L3.format("Meta-Llama-3-70B"),
        "meta-llama/Meta-Llama-3-70B",
        L=80,
        d=8192,
        h=64,
        n_kv=8,
        d_ff=28672,
        V=128256,
        T=8192,
    ),
    _preset(
        "llama3-405b",
        "Llama 3.1 405B",
        _L3.format("Llama-3.1-405B"),
        "meta-llama/Llama-3.1-405B",
        L=126,
        d=16384,
        h=128,
        n_kv=8,
        d_ff=53248,
        V=128256,
        T=8192,
    ),
)

FAMILY = Family(
    "llama",
    llama,
    "LLaMA 1/2/3: RMSNorm, GQA + RoPE, SwiGLU, untied unembedding",
    PRESETS,
    defaults={"T": 4096},
    hf_model_types=("llama",),
    from_hf=from_hf,
)
