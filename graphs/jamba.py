"""Jamba: a hybrid of Mamba mixers and attention, with a mixture of experts every few layers.

Layer ``i`` (from 0) is ``x + mixer(RMSNorm(x))`` then ``x + ffn(RMSNorm(x))``. Its mixer is attention when
``i % attn_period == attn_offset``, otherwise a Mamba mixer (:func:`mamba.mamba_mixer`, with RMSNorms on Δ's
input, B and C); its feed-forward is a routed mixture of ``n_experts`` SwiGLU experts of width ``d_ff``
(``top_k`` per token; the router's softmax runs over all experts) when ``i % expert_period ==
expert_offset``, otherwise a dense SwiGLU of width ``d_ff``. Attention is grouped-query attention with
no positional encoding (the Mamba layers carry the order). Its inference cache is the attention layers'
KV cache (growing with the context) plus the Mamba layers' recurrent state (not growing).

The layers are never unrolled: in one period of ``P`` layers (default ``lcm(attn_period,
expert_period)``) a kind of layer (mixer × feed-forward) that occurs ``c`` times is one stack repeated
``c·L/P`` times. ``L`` must be a multiple of ``P``; a config whose layer count is not one sets
``period = L`` (one period: every layer's kind is read off directly).

Sources of the presets: Lieber et al. 2024, "Jamba: A Hybrid Transformer-Mamba Language Model", section 3
(an attention layer in every 8, MoE every other layer, 16 experts top-2: 52B total, 12B active) and
``ai21labs/Jamba-v0.1/config.json`` (Jamba-1.5-Mini has the same shape); AI21 Labs 2024, "Jamba-1.5:
Hybrid Transformer-Mamba Models at Scale" (398B total, 94B active) and
``ai21labs/AI21-Jamba-1.5-Large/config.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import L, d, d_conv, d_ff, d_inner, d_state, dt_rank, h, n_experts, top_k

from .blocks import decoder, gated_mlp, grouped_query_attention, mixture_of_experts, residual
from .mamba import check_act, dt_rank_of, mamba_mixer
from .vocabulary import sizes as attention_sizes


def layer_kinds(
    period: int, attn_period: int, attn_offset: int, expert_period: int, expert_offset: int, moe: bool = True
) -> dict[tuple[str, str], int]:
    """How many of the layers ``0 … period − 1`` are of each kind ``(mixer, ffn)``, in order of first
    appearance: ``mixer`` is ``"attn"`` or ``"mamba"``, ``ffn`` ``"moe"`` or ``"mlp"``.

    >>> layer_kinds(8, 8, 4, 2, 1)  # Jamba: attention at 4, experts at the odd layers
    {('mamba', 'mlp'): 3, ('mamba', 'moe'): 4, ('attn', 'mlp'): 1}
    """
    kinds: dict[tuple[str, str], int] = {}
    for i in range(period):
        kind = (
            "attn" if i % attn_period == attn_offset else "mamba",
            "moe" if moe and i % expert_period == expert_offset else "mlp",
        )
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def jamba(
    *,
    attn_period: int = 8,
    attn_offset: int = 4,
    expert_period: int = 2,
    expert_offset: int = 1,
    moe: bool = True,
    period: int | None = None,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    d_inner: sympy.Expr = d_inner,
    dt_rank: sympy.Expr = dt_rank,
    tied: bool = False,
    proj_bias: bool = False,
    conv_bias: bool = True,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Jamba decoder as an op graph (see the module docstring for the layer pattern).

    ``moe=False``: every feed-forward is dense (a config with one expert). ``period``: the layers whose
    kinds repeat (default ``lcm(attn_period, expert_period)``). ``proj_bias``, ``conv_bias``: the Mamba
    mixer's biases (HF ``mamba_proj_bias``, ``mamba_conv_bias``); ``tied``: the unembedding reuses the
    embedding.
    """
    for name, p, o in (("attn", attn_period, attn_offset), ("expert", expert_period, expert_offset)):
        if not (isinstance(p, int) and isinstance(o, int) and 0 <= o < p):
            raise CostModelError(
                f"jamba: {name}_offset must be a whole number in [0, {name}_period), received "
                f"{name}_period = {p!r}, {name}_offset = {o!r}"
            )
    lcm = math.lcm(attn_period, expert_period)
    period = lcm if period is None else period
    if not isinstance(period, int) or period < 1:
        raise CostModelError(f"jamba: period must be a positive whole number of layers, received {period!r}")
    b = GraphBuilder(
        "jamba",
        dtype=dtype,
        **attention_sizes(d_head, d_ff, e=n_experts, r=top_k, i=d_ff, u=d_inner, n=d_state, w=d_conv, j=dt_rank),
    )
    b.require(
        sympy.Eq(sympy.Mod(L, period), 0),
        f"jamba: the layer count L must be a multiple of the period of {period} layers whose kinds repeat",
    )
    if period % lcm:
        b.require(
            sympy.Eq(L, period),
            f"jamba: a period of {period} layers that is not a multiple of "
            f"lcm(attn_period, expert_period) = {lcm} must be all L layers",
        )
    kinds = layer_kinds(period, attn_period, attn_offset, expert_period, expert_offset, moe)
    if any(ffn == "moe" for _, ffn in kinds):  # transformers' JambaMLP where a layer has one expert
        b.require(n_experts >= 2, "jamba: a mixture of experts has two experts or more (one expert: moe=False)")
    mixers = {
        "attn": lambda b, x: grouped_query_attention(b, x, rope=False),
        "mamba": lambda b, x: mamba_mixer(b, x, proj_bias=proj_bias, conv_bias=conv_bias, norms=True),
    }
    ffns = {"moe": mixture_of_experts, "mlp": gated_mlp}

    def layer_of(mixer: str, ffn: str):
        def layer(b: GraphBuilder, x: Tensor) -> Tensor:
            with b.scope(mixer):
                y = mixers[mixer](b, b.norm("norm", x, "b t d", rms=True))
            x = residual(b, f"{mixer}_residual", x, y)
            with b.scope(ffn):
                y = ffns[ffn](b, b.norm("norm", x, "b t d", rms=True))
            return residual(b, f"{ffn}_residual", x, y)

        return layer

    stacks = [
        (f"{mixer}_{ffn}_layers", count * L / period, layer_of(mixer, ffn)) for (mixer, ffn), count in kinds.items()
    ]
    return decoder(b, stacks, tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``jamba`` config.json.

    Only the symbols of the layer kinds the config has are set (a config without attention layers sets no
    heads); ``period`` is ``L`` when ``L`` is not a multiple of ``lcm(attn_layer_period, expert_layer_period)``.
    """
    where = "config.json (jamba)"
    check_act(cfg, where)
    n_layers, width = field(cfg, "num_hidden_layers", where=where), field(cfg, "hidden_size", where=where)
    heads = field(cfg, "num_attention_heads", where=where)
    shape = {
        name: field(cfg, key, int, default, where=where, minimum=minimum)
        for name, key, default, minimum in (
            ("attn_period", "attn_layer_period", 8, 1),
            ("attn_offset", "attn_layer_offset", 4, 0),
            ("expert_period", "expert_layer_period", 2, 1),
            ("expert_offset", "expert_layer_offset", 1, 0),
        )
    }
    for name in ("attn", "expert"):
        if shape[f"{name}_offset"] >= shape[f"{name}_period"]:
            raise CostModelError(
                f"{where}: {name}_layer_offset = {shape[f'{name}_offset']} must be smaller than "
                f"{name}_layer_period = {shape[f'{name}_period']}"
            )
    experts = field(cfg, "num_experts", int, None, where=where)
    experts = field(cfg, "num_local_experts", int, 16, where=where) if experts is None else experts
    lcm = math.lcm(shape["attn_period"], shape["expert_period"])
    period = lcm if n_layers % lcm == 0 else n_layers
    kinds = layer_kinds(period, **shape, moe=experts > 1)
    out: dict[str, object] = {
        "L": n_layers,
        "d": width,
        "V": field(cfg, "vocab_size", where=where),
        "d_ff": field(cfg, "intermediate_size", where=where),
        "T": field(cfg, "max_position_embeddings", where=where),
        "tied": field(cfg, "tie_word_embeddings", bool, False, where=where),
        "moe": experts > 1,
        **shape,
        **({"period": period} if period != lcm else {}),
    }
    if any(mixer == "attn" for mixer, _ in kinds):
        kv = cfg.get("num_key_value_heads", ...)  # null: as many as the heads (transformers' rule)
        out.update(h=heads, n_kv=heads if kv is None else field(cfg, "num_key_value_heads", where=where))
        head_dim = field(cfg, "head_dim", int, None, where=where)
        if head_dim is None and width % heads:
            head_dim = width // heads  # transformers: hidden_size // num_attention_heads
        if head_dim is not None and head_dim * heads != width:
            out["d_head"] = head_dim
    if any(mixer == "mamba" for mixer, _ in kinds):
        out.update(
            d_inner=field(cfg, "mamba_expand", int, 2, where=where) * width,
            d_state=field(cfg, "mamba_d_state", int, 16, where=where),
            d_conv=field(cfg, "mamba_d_conv", int, 4, where=where),
            dt_rank=dt_rank_of(cfg, "mamba_dt_rank", width, where),
            proj_bias=field(cfg, "mamba_proj_bias", bool, False, where=where),
            conv_bias=field(cfg, "mamba_conv_bias", bool, True, where=where),
        )
    if any(ffn == "moe" for _, ffn in kinds):
        out.update(n_experts=experts, top_k=field(cfg, "num_experts_per_tok", int, 2, where=where))
        if out["top_k"] > experts:
            raise CostModelError(
                f"{where}: num_experts_per_tok = {out['top_k']} exceeds num_experts = {experts}; "
                "expected at most as many as there are experts"
            )
    return out


_V01 = (
    "Lieber et al. 2024 (Jamba: A Hybrid Transformer-Mamba Language Model), section 3: 52B total, 12B active; "
    "ai21labs/Jamba-v0.1 config.json"
)
_L15 = (
    "AI21 Labs 2024 (Jamba-1.5: Hybrid Transformer-Mamba Models at Scale): 398B total, 94B active; "
    "ai21labs/AI21-Jamba-1.5-Large config.json"
)
_COMMON = {"n_kv": 8, "n_experts": 16, "top_k": 2, "V": 65536, "T": 262144, "d_state": 16, "d_conv": 4}

PRESETS = (
    Preset(
        "jamba-v0.1",
        "jamba",
        {**_COMMON, "L": 32, "d": 4096, "d_ff": 14336, "h": 32, "d_inner": 8192, "dt_rank": 256},
        _V01,
        "Jamba v0.1 (and 1.5 Mini): 1 attention layer in 8, MoE 16×top-2",
    ),
    Preset(
        "jamba-1.5-large",
        "jamba",
        {**_COMMON, "L": 72, "d": 8192, "d_ff": 24576, "h": 64, "d_inner": 16384, "dt_rank": 512},
        _L15,
        "Jamba 1.5 Large: 1 attention layer in 8, MoE 16×top-2",
    ),
)

FAMILY = Family(
    "jamba",
    jamba,
    "Jamba: Mamba mixers with attention every few layers (no RoPE), MoE every other",
    PRESETS,
    defaults={"T": 262144},
    hf_model_types=("jamba",),
    from_hf=from_hf,
)
