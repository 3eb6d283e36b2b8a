"""DeepSeek-V3: multi-head latent attention (MLA) and DeepSeek-MoE (shared + routed experts).

The first ``L_dense`` layers have a dense SwiGLU MLP of width ``d_ff``; the other
``L - L_dense`` route each token to ``top_k`` of ``n_experts`` experts of width
``d_expert`` and add ``n_shared`` always-active experts. Attention is MLA (see
:func:`blocks.latent_attention`): queries through a rank-``r_q`` latent, keys
and values through a rank-``r_kv`` latent, a decoupled ``d_rope``-wide RoPE part.

Source of the preset: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §4.2
(61 layers, width 7168, 128 heads, r_q 1536, r_kv 512, d_rope 64, d_nope 128,
1 shared + 256 routed experts of width 2048, top-8, first 3 layers dense with
width 18432) and ``deepseek-ai/DeepSeek-V3/config.json`` (vocab 129280). The
count is that of HF ``DeepseekV3ForCausalLM``: the 671B main model, without the
14B multi-token-prediction module (685B with it).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, field
from costmodel.symbols import (
    B,
    L,
    L_dense,
    T,
    V,
    d,
    d_expert,
    d_ff,
    d_nope,
    d_rope,
    d_v,
    h,
    n_experts,
    n_shared,
    r_kv,
    r_q,
    top_k,
)

from .blocks import decoder, gated_mlp, latent_attention, mixture_of_experts, pre_norm_layer
from .vocabulary import hf_experts


def deepseek_v3(
    *,
    q_latent: bool = True,
    dense_layers: bool = True,
    shared: bool = True,
    tied: bool = False,
    attention_bias: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The DeepSeek-V3 decoder as an op graph.

    ``q_latent``: queries through the rank-``r_q`` latent (False: a full
    projection, as DeepSeek-V2-Lite). ``dense_layers``: the first ``L_dense``
    layers are dense. ``shared``: ``n_shared`` shared experts. ``attention_bias``:
    biases on MLA's down projections and output (HF ``attention_bias``).
    """
    b = GraphBuilder(
        "deepseek_v3",
        dtype=dtype,
        b=B,
        t=T,
        s=T,
        d=d,
        v=V,
        h=h,
        k=d_nope,
        p=d_rope,
        o=d_v,
        l=r_q,
        c=r_kv,
        f=d_ff,
        e=n_experts,
        r=top_k,
        i=d_expert,
        n=n_shared,
    )

    def attention(b: GraphBuilder, x):
        return latent_attention(b, x, q_latent=q_latent, bias=attention_bias)

    def moe(b: GraphBuilder, x):
        return mixture_of_experts(b, x, shared=shared)

    def dense_layer(b: GraphBuilder, x):
        return pre_norm_layer(b, x, attention, gated_mlp)

    def moe_layer(b: GraphBuilder, x):
        return pre_norm_layer(b, x, attention, moe)

    stacks = [("dense_layers", L_dense, dense_layer), ("layers", L - L_dense, moe_layer)]
    return decoder(b, stacks if dense_layers else [("layers", L, moe_layer)], tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``deepseek_v3`` config.json.

    ``q_lora_rank`` null: full query projection; ``first_k_dense_replace`` 0: no
    dense layers; ``n_shared_experts`` 0 or null: no shared experts.
    """
    where = "config.json (deepseek_v3)"

    def get(name: str, default: object = ..., minimum: int = 1) -> object:
        return field(cfg, name, int, default, where=where, minimum=minimum)

    out: dict[str, object] = {
        "L": get("num_hidden_layers"),
        "d": get("hidden_size"),
        "h": get("num_attention_heads"),
        "V": get("vocab_size"),
        "T": get("max_position_embeddings"),
        "r_kv": get("kv_lora_rank"),
        "d_rope": get("qk_rope_head_dim"),
        "d_nope": get("qk_nope_head_dim"),
        "d_v": get("v_head_dim"),
        **hf_experts(cfg, where, "n_routed_experts"),
        "d_expert": get("moe_intermediate_size"),
        "tied": field(cfg, "tie_word_embeddings", bool, False, where=where),
        "attention_bias": field(cfg, "attention_bias", bool, False, where=where),
    }
    q_rank = get("q_lora_rank", None)
    out.update({"r_q": q_rank} if q_rank is not None else {"q_latent": False})
    dense = get("first_k_dense_replace", 0, minimum=0)
    if dense >= out["L"]:
        raise CostModelError(
            f"{where}: first_k_dense_replace = {dense} leaves no MoE layer of "
            f"num_hidden_layers = {out['L']}; expected fewer dense layers than layers"
        )
    out.update({"L_dense": dense, "d_ff": get("intermediate_size")} if dense else {"dense_layers": False})
    shared = get("n_shared_experts", 0, minimum=0)
    out.update({"n_shared": shared} if shared else {"shared": False})
    return out


PRESETS = (
    Preset(
        "deepseek-v3",
        "deepseek_v3",
        {
            "L": 61,
            "L_dense": 3,
            "d": 7168,
            "h": 128,
            "r_q": 1536,
            "r_kv": 512,
            "d_rope": 64,
            "d_nope": 128,
            "d_v": 128,
            "d_ff": 18432,
            "d_expert": 2048,
            "n_experts": 256,
            "top_k": 8,
            "n_shared": 1,
            "V": 129280,
            "T": 4096,
        },
        "DeepSeek-AI 2024 (DeepSeek-V3 Technical Report), section 4.2; deepseek-ai/DeepSeek-V3 config.json",
        "DeepSeek-V3 671B (37B active), without the MTP module",
        ("deepseek-ai/DeepSeek-V3",),
    ),
)

FAMILY = Family(
    "deepseek_v3",
    deepseek_v3,
    "DeepSeek-V3: MLA, shared + routed experts, leading dense layers",
    PRESETS,
    defaults={"T": 4096},
    hf_model_types=("deepseek_v3",),
    from_hf=from_hf,
)
