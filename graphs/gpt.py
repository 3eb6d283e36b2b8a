"""GPT-2 / GPT-3: learned positions, pre-LayerNorm, multi-head attention, GELU MLP.

Sources of the presets:
  * GPT-2: Radford et al. 2019, "Language Models are Unsupervised Multitask
    Learners", Table 2, and the released configs (vocab 50257, context 1024).
  * GPT-3: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
    (vocab 50257, context 2048). Two known typos in that table are corrected here:
    GPT-3 XL lists 24 heads of 128 (= 3072 ≠ d_model 2048): we use 16 heads of
    128; GPT-3 13B lists d_model 5140 (≠ 40 × 128): we use 5120.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import Family, GraphBuilder, Preset, field
from costmodel.symbols import B, L, T, T_max, V, d, h

from .blocks import causal_self_attention, dropout, gelu_mlp, residual


def gpt(
    *, d_ff: sympy.Expr = 4 * d, tied: bool = True, bias: bool = True, dropout_p: bool = False, dtype: str = "bf16"
) -> nx.DiGraph:
    """The GPT-2/3 decoder as an op graph (head dim d/h; MLP width ``d_ff``, 4d by default).

    ``tied``: the unembedding reuses the token embedding. ``dropout_p``: dropout
    layers present (they save 1-byte masks for backward).
    """
    b = GraphBuilder("gpt", dtype=dtype, b=B, t=T, s=T, d=d, v=V, p=T_max, h=h, k=d / h, f=d_ff)
    ids = b.input("ids", "b t")
    pos = b.input("positions", "t")
    b.require(T <= T_max, "learned positions: the sequence length T cannot exceed the position table T_max")
    tok = b.gather("wte", ids, "b t, v d -> b t d")
    pe = b.gather("wpe", pos, "t, p d -> t d")
    x = b.elementwise("embed", "add", [tok, pe], "b t d, t d -> b t d")
    x = dropout(b, "embed_dropout", x, "b t d", dropout_p)
    with b.repeat("layers", L):
        with b.scope("attn"):
            y = causal_self_attention(b, b.norm("ln", x, "b t d", bias=bias), bias=bias, dropout_p=dropout_p)
        x = residual(b, "attn_residual", x, y)
        with b.scope("mlp"):
            y = gelu_mlp(b, b.norm("ln", x, "b t d", bias=bias), bias=bias, dropout_p=dropout_p)
        x = residual(b, "mlp_residual", x, y)
    x = b.norm("ln_f", x, "b t d", bias=bias)
    logits = b.matmul("lm_head", x, "b t d, v d -> b t v", tied="wte" if tied else None)
    b.loss("loss", logits, "b t v -> b t")
    # what transformers' GPT2 modules do differently from these ops (costmodel.memory.implementation): q, k and v
    # are one Conv1D (c_attn) whose output the key is a view of; gelu_new is Python ops keeping 3 more tensors
    b.graph.graph["transformers"] = {"fused_qkv": True, "gelu_saves": 3}
    return b.graph


_GPT2 = "Radford et al. 2019, Table 2; HF gpt2 configs (n_vocab 50257, n_ctx 1024)"
_GPT3 = "Brown et al. 2020, Table 2.1 (n_vocab 50257, n_ctx 2048)"


def _preset(
    name: str,
    layers: int,
    width: int,
    heads: int,
    vocab: int,
    context: int,
    source: str,
    about: str = "",
    aliases: tuple[str, ...] = (),
) -> Preset:
    return Preset(
        name,
        "gpt",
        {"L": layers, "d": width, "h": heads, "V": vocab, "T_max": context, "T": context},
        source,
        about,
        aliases,
    )


PRESETS = (
    _preset("gpt2-small", 12, 768, 12, 50257, 1024, _GPT2, "GPT-2 124M", ("gpt2", "openai-community/gpt2")),
    _preset("gpt2-medium", 24, 1024, 16, 50257, 1024, _GPT2, "GPT-2 355M", ("openai-community/gpt2-medium",)),
    _preset("gpt2-large", 36, 1280, 20, 50257, 1024, _GPT2, "GPT-2 774M", ("openai-community/gpt2-large",)),
    _preset("gpt2-xl", 48, 1600, 25, 50257, 1024, _GPT2, "GPT-2 1.5B", ("openai-community/gpt2-xl",)),
    _preset("gpt3-small", 12, 768, 12, 50257, 2048, _GPT3, "GPT-3 Small 125M"),
    _preset("gpt3-medium", 24, 1024, 16, 50257, 2048, _GPT3, "GPT-3 Medium 350M"),
    _preset("gpt3-large", 24, 1536, 16, 50257, 2048, _GPT3, "GPT-3 Large 760M"),
    _preset("gpt3-xl", 24, 2048, 16, 50257, 2048, _GPT3 + "; heads 24 -> 16 (table typo)", "GPT-3 XL 1.3B"),
    _preset("gpt3-2.7b", 32, 2560, 32, 50257, 2048, _GPT3, "GPT-3 2.7B"),
    _preset("gpt3-6.7b", 32, 4096, 32, 50257, 2048, _GPT3, "GPT-3 6.7B"),
    _preset("gpt3-13b", 40, 5120, 40, 50257, 2048, _GPT3 + "; d_model 5140 -> 5120 (table typo)", "GPT-3 13B"),
    _preset("gpt3-175b", 96, 12288, 96, 50257, 2048, _GPT3, "GPT-3 175B"),
)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face GPT-2 ``config.json`` (``n_inner`` null means 4d)."""
    where = "config.json (gpt2)"
    out: dict[str, object] = {
        "L": field(cfg, "n_layer", where=where),
        "d": field(cfg, "n_embd", where=where),
        "h": field(cfg, "n_head", where=where),
        "V": field(cfg, "vocab_size", where=where),
        "T_max": field(cfg, "n_positions", where=where),
        "tied": field(cfg, "tie_word_embeddings", bool, True, where=where),
    }
    out["T"] = out["T_max"]
    n_inner = field(cfg, "n_inner", int, None, where=where)
    if n_inner is not None:
        out["d_ff"] = n_inner
    return out


FAMILY = Family(
    "gpt",
    gpt,
    "GPT-2/GPT-3 decoder: learned positions, pre-LN, MHA, GELU MLP",
    PRESETS,
    defaults={"V": 50257, "T_max": 1024, "T": 1024},
    hf_model_types=("gpt2",),
    from_hf=from_hf,
)
