"""What the LLaMA-style families share: the axis sizes of a decoder (:func:`sizes`: the names of :mod:`blocks`)
and the ``config.json`` fields every such config has (:func:`hf_settings`, :func:`hf_experts`).

Twelve families (Mistral, Mixtral, Qwen2/3, Gemma, OLMo 2, Phi-3, StarCoder2, Jamba, GPT-OSS, Llama 4,
DeepSeek-V3) build on it; it lives here rather than in :mod:`llama` so that a family depends on the vocabulary,
not on another family.
"""

from __future__ import annotations

from collections.abc import Mapping

from costmodel.kit import CostModelError, field
from costmodel.symbols import B, T, V, d, h, n_kv


def sizes(d_head: object, d_ff: object, **more: object) -> dict[str, object]:
    """The axis sizes of a LLaMA-style decoder (see :mod:`blocks` for the names)."""
    return dict(b=B, t=T, s=T, d=d, v=V, g=n_kv, m=h / n_kv, k=d_head, f=d_ff, **more)


def hf_settings(cfg: Mapping[str, object], where: str, *, mha_default: bool = False) -> dict[str, object]:
    """The fields every LLaMA-style ``config.json`` shares.

    ``num_key_value_heads`` is required unless ``mha_default`` (LLaMA: absent
    means multi-head; transformers' Mistral, Mixtral and Qwen2 classes default it
    to 8 or 32 instead, so we ask for it). ``head_dim`` absent means
    ``hidden_size / num_attention_heads``; ``T`` is set to
    ``max_position_embeddings`` (override it with ``--seq``).
    """
    out: dict[str, object] = {
        "L": field(cfg, "num_hidden_layers", where=where),
        "d": field(cfg, "hidden_size", where=where),
        "h": field(cfg, "num_attention_heads", where=where),
        "V": field(cfg, "vocab_size", where=where),
        "d_ff": field(cfg, "intermediate_size", where=where),
        "tied": field(cfg, "tie_word_embeddings", bool, False, where=where),
        "T": field(cfg, "max_position_embeddings", where=where),
    }
    out["n_kv"] = field(cfg, "num_key_value_heads", int, out["h"] if mha_default else ..., where=where)
    head_dim = field(cfg, "head_dim", int, None, where=where)
    if head_dim is not None and head_dim * out["h"] != out["d"]:
        out["d_head"] = head_dim
    return out


def hf_experts(cfg: Mapping[str, object], where: str, experts: str) -> dict[str, object]:
    """``n_experts`` (from the field named ``experts``) and ``top_k``, with ``top_k ≤ n_experts``."""
    out = {"n_experts": field(cfg, experts, where=where), "top_k": field(cfg, "num_experts_per_tok", where=where)}
    if out["top_k"] > out["n_experts"]:
        raise CostModelError(
            f"{where}: num_experts_per_tok = {out['top_k']} exceeds {experts} = "
            f"{out['n_experts']}; expected at most as many as there are experts"
        )
    return out


__all__ = ["hf_experts", "hf_settings", "sizes"]
