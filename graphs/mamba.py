"""Mamba (Mamba-1): a stack of selective state-space mixers, no attention and no MLP.

Each layer is ``x + mixer(RMSNorm(x))``. The mixer (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling
with Selective State Spaces", Figure 3 and Algorithm 2) widens ``d`` to ``d_inner`` twice (a branch and
its gate), runs a depthwise causal convolution of ``d_conv`` taps over the branch, projects it to the
token's step Δ (through a rank ``dt_rank`` bottleneck), B and C (``d_state`` each), runs the selective
scan and gates the result with ``silu`` of the gate before projecting back to ``d``. The inference cache
is the convolution's last inputs and the scan's state, whatever the context (``docs/architectures.md``).

Axes (besides ``b t d v`` of :mod:`blocks`): ``u`` the inner width ``d_inner``, ``n`` the state
``d_state``, ``w`` the convolution's taps ``d_conv``, ``j`` the step's rank ``dt_rank``.

Sources of the presets: Gu & Dao 2023, section 4.2 (the 130M ... 2.8B models, twice as many layers as a
Transformer of the same width) and the Hugging Face configs ``state-spaces/mamba-{130m,370m,790m,1.4b,2.8b}-hf``
(vocabulary 50280, ``state_size`` 16, ``expand`` 2, ``conv_kernel`` 4, ``time_step_rank`` ⌈d/16⌉, no
projection biases, a convolution bias, tied embeddings). ``tests/arch/test_hf_ssm.py`` rebuilds each with
transformers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, T, V, d, d_conv, d_inner, d_state, dt_rank

from .blocks import decoder, residual


def sizes(d_inner: object, dt_rank: object, **more: object) -> dict[str, object]:
    """The axis sizes of a Mamba mixer and the decoder around it."""
    return dict(b=B, t=T, d=d, v=V, u=d_inner, n=d_state, w=d_conv, j=dt_rank, **more)


def mamba_mixer(
    b: GraphBuilder, x: Tensor, *, proj_bias: bool = False, conv_bias: bool = True, norms: bool = False
) -> Tensor:
    """Mamba's mixer on ``x`` (``b t d``), as transformers' ``MambaMixer`` computes it.

    ``in_proj`` (``d → 2·d_inner``) is written as its two halves, the branch ``in_x`` and the gate ``in_z``;
    ``x_proj`` (``d_inner → dt_rank + 2·d_state``) as its three parts ``x_dt``, ``x_B``, ``x_C``: the same
    FLOPs and parameters. ``proj_bias``: biases on ``in_proj`` and ``out_proj`` (HF ``use_bias``);
    ``conv_bias``: on the convolution; ``norms``: RMSNorms on Δ's input, B and C (Jamba).
    """
    pb = "u" if proj_bias else None
    branch = b.matmul("in_x", x, "b t d, d u -> b t u", bias=pb)
    gate = b.matmul("in_z", x, "b t d, d u -> b t u", bias=pb)
    branch = b.op(
        "conv",
        "conv",
        [branch],
        "b t u, w u -> b t u",
        attrs={"window": "w", "along": "t", "bias": "u" if conv_bias else None},
    )
    branch = b.elementwise("conv_act", "silu", branch, "b t u")
    dt = b.matmul("x_dt", branch, "b t u, u j -> b t j")
    bm = b.matmul("x_B", branch, "b t u, u n -> b t n")
    cm = b.matmul("x_C", branch, "b t u, u n -> b t n")
    if norms:
        dt = b.norm("dt_norm", dt, "b t j", rms=True)
        bm = b.norm("B_norm", bm, "b t n", rms=True)
        cm = b.norm("C_norm", cm, "b t n", rms=True)
    dt = b.matmul("dt_proj", dt, "b t j, j u -> b t u", bias="u")  # the bias is Δ's, added before the softplus
    dt = b.elementwise("dt_softplus", "softplus", dt, "b t u")
    y = b.op(
        "scan",
        "scan",
        [branch, dt, bm, cm],
        "b t u, b t u, b t n, b t n, u n -> b t u",
        attrs={"state": "n", "along": "t", "skip": "u"},
    )
    gate = b.elementwise("gate_act", "silu", gate, "b t u")
    y = b.elementwise("gated", "mul", [y, gate], "b t u, b t u -> b t u")
    return b.matmul("out", y, "b t u, u d -> b t d", bias="d" if proj_bias else None)


def mamba(
    *,
    d_inner: sympy.Expr = d_inner,
    dt_rank: sympy.Expr = dt_rank,
    tied: bool = True,
    proj_bias: bool = False,
    conv_bias: bool = True,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """The Mamba language model as an op graph: embedding, ``L`` mixer layers, final RMSNorm, unembedding.

    ``tied``: the unembedding reuses the embedding (the default, as released); ``proj_bias``,
    ``conv_bias``: as in :func:`mamba_mixer`.
    """
    b = GraphBuilder("mamba", dtype=dtype, **sizes(d_inner, dt_rank))

    def layer(b: GraphBuilder, x: Tensor) -> Tensor:
        with b.scope("mixer"):
            y = mamba_mixer(b, b.norm("norm", x, "b t d", rms=True), proj_bias=proj_bias, conv_bias=conv_bias)
        return residual(b, "residual", x, y)

    return decoder(b, [("layers", L, layer)], tied=tied)


def dt_rank_of(cfg: Mapping[str, object], name: str, width: int, where: str) -> int:
    """A step rank field: a number, or ``"auto"`` (absent: auto) for ⌈d/16⌉, as transformers resolves it."""
    value = cfg.get(name, "auto")
    if value is None or value == "auto":
        return math.ceil(width / 16)
    return field(cfg, name, where=where)


def check_act(cfg: Mapping[str, object], where: str) -> None:
    """The mixer's activation must be SiLU (the only one Mamba and Jamba release, and the one counted)."""
    act = field(cfg, "hidden_act", str, "silu", where=where)
    if act not in ("silu", "swish"):
        raise CostModelError(f"{where}: field 'hidden_act' = {act!r} is not supported; expected 'silu'")


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``mamba`` config.json.

    A Mamba config has no context length (a state-space model has no limit): ``T`` is set to 2048, the
    context the released models were trained at (Gu & Dao 2023, section 4.2); override it with ``--seq``.
    """
    where = "config.json (mamba)"
    check_act(cfg, where)
    width = field(cfg, "hidden_size", where=where)
    return {
        "L": field(cfg, "num_hidden_layers", where=where),
        "d": width,
        "T": TRAINING_CONTEXT,
        "V": field(cfg, "vocab_size", where=where),
        "d_inner": field(cfg, "expand", int, 2, where=where) * width,
        "d_state": field(cfg, "state_size", int, 16, where=where),
        "d_conv": field(cfg, "conv_kernel", int, 4, where=where),
        "dt_rank": dt_rank_of(cfg, "time_step_rank", width, where),
        "tied": field(cfg, "tie_word_embeddings", bool, True, where=where),
        "proj_bias": field(cfg, "use_bias", bool, False, where=where),
        "conv_bias": field(cfg, "use_conv_bias", bool, True, where=where),
    }


TRAINING_CONTEXT = 2048  # Gu & Dao 2023, section 4.2: the language models are trained on sequences of 2048
_SOURCE = "Gu & Dao 2023 (Mamba), section 4.2; state-spaces/mamba-{}-hf config.json"


def _preset(name: str, about: str, *, d: int, L: int) -> Preset:
    return Preset(
        f"mamba-{name}",
        "mamba",
        {"L": L, "d": d, "d_inner": 2 * d, "dt_rank": math.ceil(d / 16), "V": 50280},
        _SOURCE.format(name),
        about,
    )


PRESETS = (
    _preset("130m", "Mamba 130M", d=768, L=24),
    _preset("370m", "Mamba 370M", d=1024, L=48),
    _preset("790m", "Mamba 790M", d=1536, L=48),
    _preset("1.4b", "Mamba 1.4B", d=2048, L=48),
    _preset("2.8b", "Mamba 2.8B", d=2560, L=64),
)

FAMILY = Family(
    "mamba",
    mamba,
    "Mamba-1: selective state-space mixers (causal conv + selective scan), no attention",
    PRESETS,
    defaults={"T": TRAINING_CONTEXT, "d_state": 16, "d_conv": 4},
    hf_model_types=("mamba",),
    from_hf=from_hf,
)
