"""ViT: a pre-LayerNorm encoder over image patches (Dosovitskiy et al. 2021).

A square image of ``r_img`` pixels per side and ``c_in`` channels is cut into ``(r_img/r_patch)²``
patches of ``r_patch`` pixels per side; the patch embedding is one matmul whose pattern decomposes the
image axes, ``"b c (y p) (x q), c p q d -> b (y x) d"`` (the stride-``r_patch`` convolution of the
implementations, the same multiply-adds). A learned [CLS] token is prepended and learned positions are added:
``T = (r_img/r_patch)² + 1`` tokens per image (the graph's tokens per step are ``B·T``; there is no free
sequence length). ``r_patch`` must divide ``r_img``.

The pixels need no gradient, so backward has only the patch embedding's weight gradient (what autograd
computes: ``FlopCounterMode`` counts fwd + bwd = 3 × the rest + 2 × the patch embedding).

Heads (option ``head``): ``"classifier"`` (``ViTForImageClassification``: a ``d → n_labels`` linear on
the [CLS] token after the final LayerNorm, cross-entropy over the classes), ``"pooler"`` (``ViTModel``:
``tanh`` of a ``d → d_pool`` linear on [CLS]), ``"none"``.

Sources of the presets: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Table 1 (ViT-Base:
12 layers, width 768, MLP 3072, 12 heads, 86M; ViT-Large: 24, 1024, 4096, 16, 307M; ViT-Huge: 32, 1280,
5120, 16, 632M), and the Hugging Face ``google/vit-{base,large}-patch16-224/config.json`` (ImageNet-1k
classifier, 1000 labels) and ``google/vit-{base-patch16,large-patch16,huge-patch14}-224-in21k/config.json``
(``ViTModel`` with its pooler).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, c_in, d, d_ff, h, n_labels, r_img, r_patch

from .blocks import pre_norm_layer
from .encoders import activation, bidirectional_attention, first_token, pooler

HEADS = ("classifier", "pooler", "none")


def vit(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d / h,
    qkv_bias: bool = True,
    head: str = "classifier",
    d_pool: sympy.Expr | None = None,
    act: str = "gelu",
    dtype: str = "bf16",
) -> nx.DiGraph:
    """ViT as an op graph (see the module notes). ``d_head``: the head dim (``d/h`` unless a config gives
    ``head_dim``); ``qkv_bias``: biases on q, k, v; ``d_pool``: the pooler's width (None: d)."""
    if head not in HEADS:
        raise CostModelError(f"vit: head {head!r} is not one of {', '.join(HEADS)}")
    side = r_img / r_patch  # patches per side
    tokens = side**2 + 1
    b = GraphBuilder(
        "vit",
        dtype=dtype,
        b=B,
        c=c_in,
        y=side,
        x=side,
        p=r_patch,
        q=r_patch,
        n=side**2,
        t=tokens,
        s=tokens,
        d=d,
        h=h,
        k=d_head,
        f=d_ff,
        o=n_labels,
        e=d if d_pool is None else d_pool,
    )
    b.tokens(B * tokens)
    with b.scope("embeddings"):
        pixels = b.input("pixels", "b c (y p) (x q)", dtype=dtype)
        patches = b.matmul("patch", pixels, "b c (y p) (x q), c p q d -> b (y x) d", bias="d", input_grad=False)
        patches = b.reshape("patches", patches, "b y x d -> b n d")
        # the [CLS] token: one learned row (z = 1) read for every image, then put before the patches
        cls = b.gather("cls", b.input("cls_index", "b z", z=1), "b z, z d -> b z d", z=1)
        x = b.op("cat", "concat", [cls, patches], "b z d, b n d -> b t d", z=1)
        positions = b.gather("position", b.input("positions", "t"), "t, s d -> t d")
        x = b.elementwise("add_positions", "add", [x, positions], "b t d, t d -> b t d")

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        return bidirectional_attention(b, x, qkv_bias=qkv_bias)

    def mlp(b: GraphBuilder, x: Tensor) -> Tensor:
        u = b.elementwise("act", act, b.matmul("fc", x, "b t d, d f -> b t f", bias="f"), "b t f")
        return b.matmul("proj", u, "b t f, f d -> b t d", bias="d")

    with b.repeat("layers", L):
        x = pre_norm_layer(b, x, attention, mlp, rms=False)
    x = b.norm("norm", x, "b t d")
    if head == "classifier":
        logits = b.matmul("classifier", first_token(b, x), "b d, d o -> b o", bias="o")
        b.loss("loss", logits, "b o -> b")
    elif head == "pooler":
        pooler(b, x)
    return b.graph


#: transformers class → head
ARCHITECTURES = {"ViTForImageClassification": "classifier", "ViTModel": "pooler"}


def _square(cfg: Mapping[str, object], name: str, where: str) -> int:
    """An image or patch size: an int, or [height, width] when they are equal (square images only)."""
    value = cfg.get(name)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        return field({name: value[0]}, name, where=where)
    if isinstance(value, list):
        raise CostModelError(f"{where}: field {name!r} = {value} is not square; expected one size (square images)")
    return field(cfg, name, where=where)


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``vit`` config.json.

    The head follows ``architectures`` (absent: the classifier); the classes are ``num_labels``, else the
    entries of ``id2label``, else 2 (transformers' default).
    """
    where = "config.json (vit)"
    archs = field(cfg, "architectures", list, [], where=where)
    heads = {ARCHITECTURES.get(a) for a in archs}
    if None in heads or len(heads) > 1:
        raise CostModelError(
            f"{where}: architectures {archs} is not supported; expected one of "
            f"{', '.join(ARCHITECTURES)} (absent: the classifier)"
        )
    out: dict[str, object] = {
        "L": field(cfg, "num_hidden_layers", where=where),
        "d": field(cfg, "hidden_size", where=where),
        "h": field(cfg, "num_attention_heads", where=where),
        "d_ff": field(cfg, "intermediate_size", where=where),
        "r_img": _square(cfg, "image_size", where),
        "r_patch": _square(cfg, "patch_size", where),
        "c_in": field(cfg, "num_channels", int, 3, where=where),
        "qkv_bias": field(cfg, "qkv_bias", bool, True, where=where),
        "act": activation(cfg, where),
        "head": heads.pop() if heads else "classifier",
    }
    head_dim = field(cfg, "head_dim", int, None, where=where)
    if head_dim is not None and head_dim * out["h"] != out["d"]:
        out["d_head"] = head_dim
    if out["head"] == "classifier":
        labels = field(cfg, "id2label", dict, {}, where=where)
        out["n_labels"] = field(cfg, "num_labels", int, len(labels) or 2, where=where)
    elif out["head"] == "pooler":
        pool = field(cfg, "pooler_output_size", int, None, where=where)
        if pool is not None and pool != out["d"]:
            out["d_pool"] = pool
    return out


_PAPER = "Dosovitskiy et al. 2021 (ViT), Table 1; google/{} config.json"
_BASE = {"L": 12, "d": 768, "h": 12, "d_ff": 3072}
_LARGE = {"L": 24, "d": 1024, "h": 16, "d_ff": 4096}
_HUGE = {"L": 32, "d": 1280, "h": 16, "d_ff": 5120}


def _preset(name: str, size: dict, patch: int, about: str, **more: object) -> Preset:
    return Preset(name, "vit", {**size, "r_img": 224, "r_patch": patch, "c_in": 3, **more}, _PAPER.format(name), about)


PRESETS = (
    _preset("vit-base-patch16-224", _BASE, 16, "ViT-B/16, ImageNet-1k classifier (86M)", n_labels=1000),
    _preset("vit-large-patch16-224", _LARGE, 16, "ViT-L/16, ImageNet-1k classifier (307M)", n_labels=1000),
    _preset("vit-base-patch16-224-in21k", _BASE, 16, "ViT-B/16 backbone with pooler (ImageNet-21k)", head="pooler"),
    _preset("vit-large-patch16-224-in21k", _LARGE, 16, "ViT-L/16 backbone with pooler (ImageNet-21k)", head="pooler"),
    _preset(
        "vit-huge-patch14-224-in21k", _HUGE, 14, "ViT-H/14 backbone with pooler (ImageNet-21k, 632M)", head="pooler"
    ),
)

FAMILY = Family(
    "vit",
    vit,
    "ViT: patch embedding over image axes, [CLS] token, pre-LN bidirectional encoder",
    PRESETS,
    defaults={"r_img": 224, "r_patch": 16, "c_in": 3},
    hf_model_types=("vit",),
    from_hf=from_hf,
)
