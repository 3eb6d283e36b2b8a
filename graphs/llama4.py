"""Llama 4 (text): interleaved MoE and dense layers, a shared expert, NoPE layers, chunked attention.

Pre-norm layers (RMSNorm) with grouped-query attention (``d_head`` per head). Layer ``j`` (from 0):

* is a **mixture-of-experts** layer when ``(j + 1)`` is a multiple of ``moe_step``
  (``interleave_moe_layer_step``): a router picks ``top_k`` of ``n_experts`` SwiGLU experts of
  width ``d_expert`` and a **shared** SwiGLU expert of the same width is always added; the other
  layers have a dense SwiGLU MLP of width ``d_ff`` (``intermediate_size_mlp``);
* is a **NoPE** layer when ``(j + 1)`` is a multiple of ``nope_interval`` (``no_rope_layer_interval``):
  no RoPE, full causal attention, and (``temperature``) q scaled by a function of the position;
  the other layers apply RoPE, then (``qk_norm``) an L2 norm without parameters to q and k, and
  attend within chunks of ``attention_chunk_size`` tokens (``chunked``).

So with ``s = moe_step``, ``i = nope_interval`` and ``c = lcm(s, i)`` there are ``⌊L/c⌋`` NoPE MoE
layers, ``⌊L/s⌋ − ⌊L/c⌋`` RoPE MoE layers, ``⌊L/i⌋ − ⌊L/c⌋`` NoPE dense layers and the rest RoPE
dense layers; each kind is one repeated block.

Counting conventions. *Experts*: the model routes each token to ``top_k`` experts, and that is what
is counted (FLOPs over ``top_k`` experts, ``params.active`` with ``top_k`` of them). transformers'
``Llama4TextMoe`` instead multiplies **every** token by **every** expert (the ones not picked get a
router score of 0), so ``FlopCounterMode`` on it counts ``n_experts`` experts: per MoE layer, forward,
``(n_experts − top_k) · 6·B·T·d·d_expert`` more than here (3× that for forward + backward). The
router's sigmoid of the ``top_k`` picked logits is counted with the softmax rule over them, and the
weighting on the experts' hidden units (transformers scales their input): element-wise work that no
matmul count sees. *Chunks*: as sliding windows in :mod:`mistral`, the FLOPs are the full causal T×T
square (transformers masks the chunks; ``FlopCounterMode`` counts the square), while the KV cache of
a chunked layer keeps the last ``chunk − 1`` tokens, as transformers' cache for those layers does.

Sources of the presets: Meta 2025, "Llama 4" model card (Scout: 17B active, 109B total with the
vision encoder, 16 experts; Maverick: 17B active, 400B total, 128 experts), and the ``text_config``
of ``meta-llama/Llama-4-{Scout-17B-16E,Maverick-17B-128E}/config.json`` (48 layers, width 5120, 40
heads of 128, 8 KV heads, expert width 8192, dense width 16384, top-1, vocab 202048, chunk 8192;
Scout: every layer MoE, qk norm; Maverick: every second layer MoE, no qk norm).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, T, V, d, d_expert, d_ff, h, n_experts, n_kv, top_k

from . import attention_parts as parts
from .blocks import decoder, gated_mlp, pre_norm_layer, residual
from .vocabulary import hf_experts


def layer_counts(moe_step: int, nope_interval: int) -> dict[tuple[bool, bool], sympy.Expr]:
    """(moe, nope) → how many of the ``L`` layers are of that kind (0 for a step or interval: none)."""
    moe = sympy.floor(L / moe_step) if moe_step else sympy.Integer(0)
    nope = sympy.floor(L / nope_interval) if nope_interval else sympy.Integer(0)
    both = sympy.floor(L / math.lcm(moe_step, nope_interval)) if moe_step and nope_interval else sympy.Integer(0)
    return {
        (True, True): both,
        (True, False): moe - both,
        (False, True): nope - both,
        (False, False): L - moe - nope + both,
    }


def moe(b: GraphBuilder, x: Tensor) -> Tensor:
    """Router, ``top_k`` routed SwiGLU experts and one shared SwiGLU expert of width ``d_expert``."""
    logits = b.matmul("router", x, "b t d, d e -> b t e")
    picked = b.reshape("top_k", logits, "b t e -> b t r")  # the r largest logits: a selection
    scores = b.softmax("router_scores", picked, "b t r", axis="r")  # stands for their sigmoid (module docstring)
    route = {"experts": "e", "route": "r"}
    gate = b.op("gate", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs=route)
    up = b.op("up", "routed_matmul", [x], "b t d, e d i -> b t r i", attrs=route)
    gate = b.elementwise("act", "silu", gate, "b t r i")
    u = b.elementwise("gated", "mul", [gate, up], "b t r i, b t r i -> b t r i")
    u = b.elementwise("weighted", "mul", [u, scores], "b t r i, b t r -> b t r i")
    y = b.op("down", "routed_matmul", [u], "b t r i, e i d -> b t d", attrs=route)
    with b.scope("shared"):
        return residual(b, "add", y, gated_mlp(b, x, hidden="i"))


def llama4(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    moe_step: int = 1,
    nope_interval: int = 4,
    chunked: bool = True,
    chunk: object = None,
    qk_norm: bool = True,
    temperature: bool = True,
    attention_bias: bool = False,
    tied: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Llama 4 text decoder as an op graph (see the module docstring for the layer kinds).

    ``moe_step``/``nope_interval``: every such layer is MoE / NoPE (0: none). ``chunked``: the RoPE
    layers attend within chunks; ``chunk``: the chunk size, which keeps their KV cache at ``chunk − 1``
    tokens (FLOPs stay dense). ``qk_norm``: L2 norm of q and k in the RoPE layers. ``temperature``:
    the NoPE layers scale q by position. ``attention_bias``: biases on q, k, v and o.
    """
    for name, value in (("moe_step", moe_step), ("nope_interval", nope_interval)):
        if isinstance(value, bool) or not getattr(sympy.sympify(value), "is_Integer", False) or value < 0:
            raise CostModelError(
                f"llama4: option {name} must be a whole number ≥ 0 (0: no such layer), received {value!r}"
            )
    moe_step, nope_interval = int(moe_step), int(nope_interval)
    b = GraphBuilder(
        "llama4",
        dtype=dtype,
        b=B,
        t=T,
        s=T,
        d=d,
        v=V,
        g=n_kv,
        m=h / n_kv,
        k=d_head,
        f=d_ff,
        e=n_experts,
        r=top_k,
        i=d_expert,
    )

    def attention(nope: bool):
        def attend(b: GraphBuilder, x: Tensor) -> Tensor:
            q, k, v = parts.projections(b, x, bias=attention_bias)
            if not nope:
                q, k = parts.rope(b, "q_rope", q, parts.Q), parts.rope(b, "k_rope", k, parts.KV)
                if qk_norm:  # Llama4TextL2Norm: x / rms(x), no gain
                    q = b.op("q_norm", "norm", [q], parts.Q, attrs={"axis": "k", "rms": True, "affine": False})
                    k = b.op("k_norm", "norm", [k], parts.KV, attrs={"axis": "k", "rms": True, "affine": False})
            elif temperature:  # q · (1 + attn_scale · log(1 + ⌊(position + 1) / floor_scale⌋))
                q = b.elementwise("q_temperature", "scale", q, parts.Q)
            kept = chunk if chunked and not nope else None
            parts.cached(b, k, kept), parts.cached(b, v, kept)
            return parts.output(b, parts.attend(b, q, k, v), bias=attention_bias)

        return attend

    def layer(is_moe: bool, nope: bool):
        return lambda b, x: pre_norm_layer(b, x, attention(nope), moe if is_moe else gated_mlp)

    stacks = [
        (f"{'nope' if nope else 'rope'}_{'moe' if is_moe else 'dense'}_layers", count, layer(is_moe, nope))
        for (is_moe, nope), count in layer_counts(moe_step, nope_interval).items()
        if count != 0
    ]
    return decoder(b, stacks, tied=tied)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``llama4_text`` config.json (the ``text_config`` of a Llama 4 model).

    ``moe_layers``, ``no_rope_layers`` and ``layer_types``, when the file lists them, must be what
    ``interleave_moe_layer_step``, ``no_rope_layer_interval`` and ``attention_chunk_size`` make (as
    transformers writes them); ``head_dim`` is required (transformers' default, 128, is not
    ``hidden_size / heads``).
    """
    where = "config.json (llama4_text)"
    get = lambda name, kind=int, default=...: field(cfg, name, kind, default, where=where)  # noqa: E731
    out: dict[str, object] = {
        "L": get("num_hidden_layers"),
        "d": get("hidden_size"),
        "h": get("num_attention_heads"),
        "n_kv": get("num_key_value_heads"),
        "V": get("vocab_size"),
        "d_expert": get("intermediate_size"),
        "T": get("max_position_embeddings"),
        "tied": get("tie_word_embeddings", bool, False),
        "attention_bias": get("attention_bias", bool, False),
        "qk_norm": get("use_qk_norm", bool, True),
        "temperature": get("attn_temperature_tuning", bool, True),
        **hf_experts(cfg, where, "num_local_experts"),
    }
    n = out["L"]
    if out["h"] % out["n_kv"]:
        raise CostModelError(
            f"{where}: num_attention_heads = {out['h']} is not a multiple of num_key_value_heads = "
            f"{out['n_kv']}; expected whole groups"
        )
    head_dim = get("head_dim")
    if head_dim * out["h"] != out["d"]:
        out["d_head"] = head_dim
    step, interval = get("interleave_moe_layer_step", int, 1), get("no_rope_layer_interval", int, 4)
    moe_layers = list(range(step - 1, n, step))
    if get("moe_layers", list, moe_layers) != moe_layers:
        raise CostModelError(
            f"{where}: moe_layers {cfg['moe_layers']!r} are not every {step}th layer "
            f"(interleave_moe_layer_step); expected {moe_layers}"
        )
    rope_layers = [int((j + 1) % interval != 0) for j in range(n)]
    if (get("no_rope_layers", list, []) or rope_layers) != rope_layers:  # empty: transformers' default
        raise CostModelError(
            f"{where}: no_rope_layers {cfg['no_rope_layers']!r} do not follow "
            f"no_rope_layer_interval = {interval}; expected {rope_layers}"
        )
    # absent: transformers' default chunk, 8192; null: no chunks (every layer attends to everything)
    chunk = (
        None
        if "attention_chunk_size" in cfg and cfg["attention_chunk_size"] is None
        else get("attention_chunk_size", int, 8192)
    )
    types = ["chunked_attention" if rope and chunk is not None else "full_attention" for rope in rope_layers]
    if get("layer_types", list, types) != types:
        raise CostModelError(
            f"{where}: layer_types {cfg['layer_types']!r} are not the chunked RoPE layers and "
            f"full NoPE layers transformers makes; expected {types}"
        )
    out.update(moe_step=step if moe_layers else 0, nope_interval=interval if 0 in rope_layers else 0)
    if len(moe_layers) < n:  # the dense layers' width is read only when there are some
        out["d_ff"] = get("intermediate_size_mlp")
    out.update({"chunk": chunk} if chunk is not None else {"chunked": False})
    for (is_moe, nope), count in layer_counts(out["moe_step"], out["nope_interval"]).items():
        if count != 0 and count.subs(L, n) == 0:  # the engine wants every repeated block to run at least once
            raise CostModelError(
                f"{where}: with interleave_moe_layer_step = {step} and no_rope_layer_interval = "
                f"{interval}, none of the {n} layers is a {'NoPE' if nope else 'RoPE'} "
                f"{'MoE' if is_moe else 'dense'} layer, which this model lays out for any L; "
                f"expected at least {math.lcm(step, interval)} layers"
            )
    return out


_SOURCE = 'Meta 2025, "Llama 4" model card; meta-llama/Llama-4-{} config.json (text_config)'
_COMMON = {
    "L": 48,
    "d": 5120,
    "h": 40,
    "n_kv": 8,
    "d_expert": 8192,
    "d_ff": 16384,
    "top_k": 1,
    "V": 202048,
    "chunk": 8192,
    "T": 8192,
}  # T: one chunk (the released contexts are 10M and 1M)

PRESETS = (
    Preset(
        "llama4-scout",
        "llama4",
        {**_COMMON, "n_experts": 16},
        _SOURCE.format("Scout-17B-16E"),
        "Llama 4 Scout 17B-16E, text model (every layer MoE, top-1 of 16 + shared expert)",
    ),
    Preset(
        "llama4-maverick",
        "llama4",
        {**_COMMON, "n_experts": 128, "moe_step": 2, "qk_norm": False},
        _SOURCE.format("Maverick-17B-128E"),
        "Llama 4 Maverick 17B-128E, text model (every second layer MoE, top-1 of 128 + shared expert)",
    ),
)

FAMILY = Family(
    "llama4",
    llama4,
    "Llama 4 (text): interleaved MoE/dense layers, shared expert, NoPE and chunked layers",
    PRESETS,
    defaults={"T": 8192},
    hf_model_types=("llama4_text",),
    from_hf=from_hf,
)
