"""Blocks of encoders (BERT, RoBERTa, ViT): bidirectional self-attention, post-norm layers, heads on tokens.

Axis names as in :mod:`blocks` (``b t d``, heads ``h``, head dim ``k``, keys ``s``); an encoder's keys
``s`` are its own positions (``s = T``). No mask and no ``causal``: every position attends to every
other, so the scores are the full T×T square, as BERT's and ViT's eager attention computes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from costmodel.kit import CostModelError, GraphBuilder, Tensor, field

from .blocks import Block, dropout, residual

#: Hugging Face ``hidden_act`` values → the element-wise function counted (``gelu_new`` and ``gelu_pytorch_tanh``
#: are the tanh approximation, ``gelu`` the erf form: one FLOP convention, see docs/conventions.md).
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_python": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def activation(cfg: Mapping[str, object], where: str, name: str = "hidden_act", default: str = "gelu") -> str:
    """The element-wise function of a config's activation field, or an error naming the supported ones."""
    act = field(cfg, name, str, default, where=where)
    if act not in ACTIVATIONS:
        raise CostModelError(f"{where}: {name} {act!r} is not supported; expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[act]


def bidirectional_attention(
    b: GraphBuilder, x: Tensor, *, qkv_bias: bool = True, out_bias: bool = True, dropout_p: bool = False
) -> Tensor:
    """Multi-head self-attention over every position (no mask): BERT's and ViT's.

    q, k, v: ``b t d -> b h t k``; scores ``b h t k, b h s k -> b h t s`` scaled by 1/√k; the softmax
    over ``s``; context ``b h t s, b h s k -> b h t k``; output ``h k -> d``.
    """
    q = b.matmul("q", x, "b t d, d h k -> b h t k", bias="h k" if qkv_bias else None)
    k = b.matmul("k", x, "b t d, d h k -> b h t k", bias="h k" if qkv_bias else None)
    v = b.matmul("v", x, "b t d, d h k -> b h t k", bias="h k" if qkv_bias else None)
    scores = b.contract("scores", q, k, "b h t k, b h s k -> b h t s")
    scores = b.elementwise("scale", "scale", scores, "b h t s")
    probs = b.softmax("softmax", scores, "b h t s", axis="s")
    probs = dropout(b, "dropout", probs, "b h t s", dropout_p)
    context = b.contract("context", probs, v, "b h t s, b h s k -> b h t k")
    out = b.matmul("o", context, "b h t k, h k d -> b t d", bias="d" if out_bias else None)
    return dropout(b, "resid_dropout", out, "b t d", dropout_p)


def post_norm_layer(b: GraphBuilder, x: Tensor, attention: Block, mlp: Block) -> Tensor:
    """``norm(x + attn(x))``, then ``norm(x + mlp(x))``: the original Transformer's and BERT's layer (LayerNorm)."""
    with b.scope("attn"):
        x = b.norm("norm", residual(b, "residual", x, attention(b, x)), "b t d")
    with b.scope("mlp"):
        return b.norm("norm", residual(b, "residual", x, mlp(b, x)), "b t d")


def first_token(b: GraphBuilder, x: Tensor) -> Tensor:
    """``x[:, 0]``, the first ([CLS]) token of each sequence: a view, no copy."""
    return b.reshape("first_token", x, "b t d -> b d")


def pooler(b: GraphBuilder, x: Tensor) -> Tensor:
    """BERT's and ViT's pooler: ``tanh(dense(x[:, 0]))``, ``d -> e`` (the family sizes ``e``: d, or ViT's
    ``pooler_output_size``)."""
    with b.scope("pooler"):
        y = b.matmul("dense", first_token(b, x), "b d, d e -> b e", bias="e")
        return b.elementwise("tanh", "tanh", y, "b e")
