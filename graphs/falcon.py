"""Falcon: parallel attention and MLP, multi-query or grouped-query attention, tied embeddings.

Three layouts, as transformers' ``FalconForCausalLM`` builds them:

* **Falcon-7B** (``multi_query``): one key/value head; attention and MLP read one shared LayerNorm
  in parallel (``parallel_attn``).
* **Falcon-40B/180B** (``new_decoder_architecture``): ``n_kv`` key/value groups; each group's key
  and value are *copied* to its ``h/n_kv`` query heads before RoPE, so the KV cache holds ``h``
  heads, not ``n_kv`` (transformers caches the copies); two LayerNorms (``num_ln_in_parallel_attn``
  2, the default) or one.
* **Falcon-RW** (``alibi``): multi-head attention with an ALiBi bias instead of RoPE (one add per
  score, counted), biases (``bias``), sequential layers (``parallel_attn`` false).

The unembedding is tied to the token table unless ``tie_word_embeddings`` is false (transformers'
default for falcon is true). The MLP is ``d → d_ff → d`` with GELU (``ffn_hidden_size``, 4d).

Sources of the presets (the ``tiiuae/*`` config.json files; the model cards give the shapes):

* Falcon-7B: ``tiiuae/falcon-7b`` model card ("7B parameters", 32 layers, width 4544, head dim 64,
  vocab 65024) and config.json (71 heads, multi_query, parallel_attn, no bias).
* Falcon-40B: ``tiiuae/falcon-40b`` model card ("40B parameters", 60 layers, width 8192) and
  config.json (128 heads, 8 KV heads, new_decoder_architecture).
* Falcon-180B: Almazrouei et al. 2023, "The Falcon Series of Open Language Models" (80 layers,
  width 14848, 232 heads, 8 KV heads), and ``tiiuae/falcon-180B`` config.json.
* Falcon-RW-1B: Penedo et al. 2023, "The RefinedWeb Dataset for Falcon LLM", and the
  ``tiiuae/falcon-rw-1b`` model card ("1B parameters", ALiBi) and config.json (24 layers, width
  2048, 32 heads, vocab 50304, biases, sequential layers).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, T, V, d, h, n_kv

from . import attention_parts as parts
from .blocks import decoder, gelu_mlp, parallel_layer, pre_norm_layer


def falcon(
    *,
    d_ff: sympy.Expr = 4 * d,
    kv_copies: bool = False,
    parallel: bool = True,
    shared_norm: bool = True,
    alibi: bool = False,
    bias: bool = False,
    tied: bool = True,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Falcon decoder as an op graph (head dim ``d/h``; ``n_kv`` key/value heads: 1 for MQA, ``h`` for MHA).

    ``kv_copies``: keys and values are copied to every query head before RoPE and the cache
    (``new_decoder_architecture``). ``parallel``: attention and MLP read the same input;
    ``shared_norm``: through one LayerNorm (else one each). ``alibi``: an ALiBi bias on the scores, no
    RoPE. ``bias``: biases on every matrix of a layer. ``tied``: the unembedding reuses the token table.
    """
    b = GraphBuilder("falcon", dtype=dtype, b=B, t=T, s=T, d=d, v=V, g=n_kv, m=h / n_kv, k=d / h, f=d_ff)

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        q, k, v = parts.projections(b, x, bias=bias)
        if kv_copies:
            k, v = parts.to_query_heads(b, "k_heads", k), parts.to_query_heads(b, "v_heads", v)
        kv_axes = parts.Q if kv_copies else parts.KV
        if not alibi:
            q, k = parts.rope(b, "q_rope", q, parts.Q), parts.rope(b, "k_rope", k, kv_axes)
        parts.cached(b, k), parts.cached(b, v)
        context = parts.attend(b, q, k, v, kv="g m" if kv_copies else "g", alibi=alibi)
        return parts.output(b, context, bias=bias)

    def mlp(b: GraphBuilder, x: Tensor) -> Tensor:
        return gelu_mlp(b, x, bias=bias, dropout_p=False)

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        if parallel:
            return parallel_layer(b, x, attention, mlp, rms=False, shared_norm=shared_norm)
        return pre_norm_layer(b, x, attention, mlp, rms=False)

    return decoder(b, [("layers", L, layer)], tied=tied, rms=False)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``falcon`` config.json (transformers' canonical field names).

    The legacy names ``n_head``, ``n_layer`` and ``n_head_kv`` are ignored by transformers 5 (its
    defaults apply), so a file with only those is refused here rather than read two ways.
    """
    where = "config.json (falcon)"
    for old, new in (
        ("n_head", "num_attention_heads"),
        ("n_layer", "num_hidden_layers"),
        ("n_head_kv", "num_kv_heads"),
    ):
        if old in cfg and new not in cfg:
            raise CostModelError(
                f"{where}: legacy field {old!r} without {new!r}; transformers ignores {old!r}, so rename it to {new!r}"
            )
    get = lambda name, kind=int, default=...: field(cfg, name, kind, default, where=where)  # noqa: E731
    out: dict[str, object] = {
        "L": get("num_hidden_layers"),
        "d": get("hidden_size"),
        "h": get("num_attention_heads"),
        "V": get("vocab_size"),
        "T": get("max_position_embeddings", int, 2048),
        "tied": get("tie_word_embeddings", bool, True),
        "bias": get("bias", bool, False),
        "alibi": get("alibi", bool, False),
    }
    if out["d"] % out["h"]:
        raise CostModelError(
            f"{where}: hidden_size = {out['d']} is not a multiple of num_attention_heads = "
            f"{out['h']}; expected whole heads (Falcon's head dim is hidden_size / heads)"
        )
    new_arch, parallel = get("new_decoder_architecture", bool, False), get("parallel_attn", bool, True)
    kv_heads = get("num_kv_heads", int, out["h"])
    norms = get("num_ln_in_parallel_attn", int, 2 if new_arch else 1)
    if new_arch:
        if not parallel:
            raise CostModelError(
                f"{where}: new_decoder_architecture with parallel_attn false has no working layer "
                "in transformers; expected parallel_attn true"
            )
        if out["h"] % kv_heads:
            raise CostModelError(
                f"{where}: num_attention_heads = {out['h']} is not a multiple of num_kv_heads = "
                f"{kv_heads}; expected whole groups"
            )
        out.update(n_kv=kv_heads, kv_copies=True)
    elif get("multi_query", bool, True):
        out["n_kv"] = 1
    elif kv_heads != out["h"]:
        raise CostModelError(
            f"{where}: num_kv_heads = {kv_heads} with multi-head attention (multi_query false, "
            f"no new_decoder_architecture); expected it absent or equal to num_attention_heads"
        )
    else:
        out["n_kv"] = out["h"]
    if parallel and norms not in (1, 2) or parallel and norms == 2 and not new_arch:
        raise CostModelError(
            f"{where}: num_ln_in_parallel_attn = {norms} with new_decoder_architecture "
            f"{str(new_arch).lower()}; transformers runs 1 (or 2 with the new architecture)"
        )
    out.update(parallel=parallel, shared_norm=not (parallel and norms == 2))
    out["d_ff"] = get("ffn_hidden_size", int, 4 * out["d"])
    return out


_7B = "tiiuae/falcon-7b model card and config.json"
_40B = "tiiuae/falcon-40b model card and config.json"
_180B = "Almazrouei et al. 2023 (The Falcon Series of Open Language Models); tiiuae/falcon-180B config.json"
_RW = "Penedo et al. 2023 (The RefinedWeb Dataset for Falcon LLM); tiiuae/falcon-rw-1b model card and config.json"

PRESETS = (
    Preset(
        "falcon-7b",
        "falcon",
        {"L": 32, "d": 4544, "h": 71, "n_kv": 1, "V": 65024, "T": 2048},
        _7B,
        "Falcon-7B (multi-query, one LayerNorm per layer)",
    ),
    Preset(
        "falcon-40b",
        "falcon",
        {"L": 60, "d": 8192, "h": 128, "n_kv": 8, "V": 65024, "T": 2048, "kv_copies": True, "shared_norm": False},
        _40B,
        "Falcon-40B (8 KV groups copied to 128 heads, two LayerNorms)",
    ),
    Preset(
        "falcon-180b",
        "falcon",
        {"L": 80, "d": 14848, "h": 232, "n_kv": 8, "V": 65024, "T": 2048, "kv_copies": True, "shared_norm": False},
        _180B,
        "Falcon-180B (8 KV groups copied to 232 heads, two LayerNorms)",
    ),
    Preset(
        "falcon-rw-1b",
        "falcon",
        {
            "L": 24,
            "d": 2048,
            "h": 32,
            "n_kv": 32,
            "V": 50304,
            "T": 2048,
            "alibi": True,
            "bias": True,
            "parallel": False,
        },
        _RW,
        "Falcon-RW-1B (ALiBi, biases, sequential layers)",
    ),
)

FAMILY = Family(
    "falcon",
    falcon,
    "Falcon: parallel attention + MLP, MQA or copied GQA heads, ALiBi (RW), tied",
    PRESETS,
    defaults={"T": 2048},
    hf_model_types=("falcon",),
    from_hf=from_hf,
)
