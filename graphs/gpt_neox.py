"""GPT-NeoX and Pythia: parallel attention and MLP, partial rotary embeddings, LayerNorms with biases.

Each layer is ``x + attn(ln₁(x)) + mlp(ln₂(x))`` (``use_parallel_residual``; otherwise the usual
sequential pre-norm layer), multi-head attention from a fused q/k/v matrix with biases
(``attention_bias``), RoPE on the first ``d_rot`` of each head's ``d/h`` dims (``rotary_pct``: a
quarter in every released model), a GELU MLP with biases, a final LayerNorm and an untied
unembedding (``embed_out``).

Sources of the presets:

* Pythia 70M–12B: Biderman et al. 2023, "Pythia: A Suite for Analyzing Large Language Models Across
  Training and Scaling", Table 1 (layers, width, heads; non-embedding parameters), and
  ``EleutherAI/pythia-{70m,...,12b}/config.json`` (vocab 50304, 50432 for 6.9B, 50688 for 12B;
  context 2048; rotary_pct 0.25; untied ``embed_out``).
* GPT-NeoX-20B: Black et al. 2022, "GPT-NeoX-20B: An Open-Source Autoregressive Language Model"
  (44 layers, width 6144, 64 heads), and ``EleutherAI/gpt-neox-20b/config.json`` (vocab
  50432, context 2048, rotary_pct 0.25).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, T, V, d, h

from . import attention_parts as parts
from .blocks import decoder, gelu_mlp, parallel_layer, pre_norm_layer


def gpt_neox(
    *,
    d_ff: sympy.Expr = 4 * d,
    d_rot: sympy.Expr = d / (4 * h),
    rope: str = "partial",
    parallel: bool = True,
    attention_bias: bool = True,
    tied: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The GPT-NeoX decoder as an op graph.

    ``rope``: ``"partial"`` (RoPE on the first ``d_rot`` dims of each head: ``int(d_head ·
    rotary_pct)``, by default ``d/(4h)``, a quarter of the head as in every Pythia model), ``"full"``
    (the whole head, ``rotary_pct`` 1) or ``"none"`` (``rotary_pct`` 0). ``parallel``: attention
    and MLP read the same input (``use_parallel_residual``). ``attention_bias``: biases on q, k, v and
    the output (the MLP always has them). ``tied``: the unembedding reuses the token table.
    """
    if rope not in ("partial", "full", "none"):
        raise CostModelError(f"gpt_neox: option rope must be 'partial', 'full' or 'none', received {rope!r}")
    d_head = d / h
    partial = rope == "partial"
    sizes = dict(b=B, t=T, s=T, d=d, v=V, g=h, m=1, k=d_head, f=d_ff)
    if partial:
        sizes.update(p=d_rot, n=d_head - d_rot)
    b = GraphBuilder("gpt_neox", dtype=dtype, **sizes)

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        q, k, v = parts.projections(b, x, bias=attention_bias)
        if rope != "none":
            q = parts.rope(b, "q_rope", q, parts.Q, partial=partial)
            k = parts.rope(b, "k_rope", k, parts.KV, partial=partial)
        parts.cached(b, k), parts.cached(b, v)  # keys after RoPE
        return parts.output(b, parts.attend(b, q, k, v), bias=attention_bias)

    def mlp(b: GraphBuilder, x: Tensor) -> Tensor:
        return gelu_mlp(b, x, bias=True, dropout_p=False)

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        if parallel:
            return parallel_layer(b, x, attention, mlp, rms=False, shared_norm=False)
        return pre_norm_layer(b, x, attention, mlp, rms=False)

    return decoder(b, [("layers", L, layer)], tied=tied, rms=False)


def number(cfg: Mapping[str, object], name: str, default: object, where: str) -> object:
    """A real number field (an int or a float, not a bool); ``default`` when absent or null."""
    value = cfg.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CostModelError(f"{where}: field {name!r} must be a number, received {value!r}")
    return value


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``gpt_neox`` config.json.

    The rotary share is ``rope_parameters.partial_rotary_factor`` (transformers 5 files), else
    ``rotary_pct`` (released files), else 0.25, as transformers reads them; the rotary dims are
    ``int(d_head · share)``, transformers' own rounding.
    """
    where = "config.json (gpt_neox)"
    out: dict[str, object] = {
        "L": field(cfg, "num_hidden_layers", where=where),
        "d": field(cfg, "hidden_size", where=where),
        "h": field(cfg, "num_attention_heads", where=where),
        "V": field(cfg, "vocab_size", where=where),
        "d_ff": field(cfg, "intermediate_size", where=where),
        "T": field(cfg, "max_position_embeddings", where=where),
        "tied": field(cfg, "tie_word_embeddings", bool, False, where=where),
        "parallel": field(cfg, "use_parallel_residual", bool, True, where=where),
        "attention_bias": field(cfg, "attention_bias", bool, True, where=where),
    }
    if out["d"] % out["h"]:
        raise CostModelError(
            f"{where}: hidden_size = {out['d']} is not a multiple of num_attention_heads = "
            f"{out['h']}; expected whole heads (GPT-NeoX's head dim is hidden_size / heads)"
        )
    rope_parameters = field(cfg, "rope_parameters", dict, {}, where=where)
    share = number(rope_parameters, "partial_rotary_factor", None, f"{where} rope_parameters")
    share = number(cfg, "rotary_pct", 0.25, where) if share is None else share
    if not 0 <= share <= 1:
        raise CostModelError(f"{where}: the rotary share {share!r} is outside [0, 1]; expected a fraction of a head")
    d_head = out["d"] // out["h"]
    rotary = int(d_head * share)  # as transformers rounds it
    if rotary == 0:
        out["rope"] = "none"
    elif rotary == d_head:
        out["rope"] = "full"
    elif rotary % 2:
        raise CostModelError(
            f"{where}: {rotary} rotary dims (head dim {d_head} × {share}) is odd; "
            "expected an even number (RoPE rotates pairs of dims)"
        )
    else:
        out["d_rot"] = rotary
    return out


_PYTHIA = "Biderman et al. 2023 (Pythia), Table 1; EleutherAI/pythia-{} config.json"


def _pythia(size: str, layers: int, width: int, heads: int, vocab: int = 50304) -> Preset:
    return Preset(
        f"pythia-{size}",
        "gpt_neox",
        {"L": layers, "d": width, "h": heads, "V": vocab, "T": 2048},
        _PYTHIA.format(size),
        f"Pythia {size.upper()}",
    )


PRESETS = (
    _pythia("70m", 6, 512, 8),
    _pythia("160m", 12, 768, 12),
    _pythia("410m", 24, 1024, 16),
    _pythia("1b", 16, 2048, 8),
    _pythia("1.4b", 24, 2048, 16),
    _pythia("2.8b", 32, 2560, 32),
    _pythia("6.9b", 32, 4096, 32, 50432),
    _pythia("12b", 36, 5120, 40, 50688),
    Preset(
        "gpt-neox-20b",
        "gpt_neox",
        {"L": 44, "d": 6144, "h": 64, "V": 50432, "T": 2048},
        "Black et al. 2022 (GPT-NeoX-20B); EleutherAI/gpt-neox-20b config.json",
        "GPT-NeoX-20B",
    ),
)

FAMILY = Family(
    "gpt_neox",
    gpt_neox,
    "GPT-NeoX/Pythia: parallel attention + MLP, partial RoPE, LayerNorm biases",
    PRESETS,
    defaults={"T": 2048},
    hf_model_types=("gpt_neox",),
    from_hf=from_hf,
)
