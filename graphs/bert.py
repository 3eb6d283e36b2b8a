"""BERT and RoBERTa: encoder-only, bidirectional attention, post-LayerNorm layers, a masked-LM head.

The embeddings are three lookups summed (tokens ``V``, token types ``n_types``, learned positions
``T_max``), then LayerNorm. Each of the ``L`` layers is ``norm(x + attn(x))``, ``norm(x + mlp(x))``
with biases everywhere and a GELU MLP of width ``d_ff``. Heads (option ``head``):

* ``"mlm"`` (``BertForMaskedLM``, the default: a training step needs a loss): dense ``d → d``, the
  activation, LayerNorm, then the unembedding tied to the token table plus a bias over ``V``; the loss
  over every position (PyTorch computes the logits of all ``B·T`` positions, masked or not).
* ``"pooler"`` (``BertModel``): ``tanh(dense(x[:, 0]))``; ``"none"``: ``BertModel(add_pooling_layer=False)``.

RoBERTa (Liu et al. 2019) is the same network; its position ids start after the padding id, so a sequence
uses positions ``pad + 1 .. pad + T`` of the ``T_max`` table: ``T ≤ T_max − pad − 1`` (512 of 514).

Sources of the presets (the Hugging Face ``config.json`` of each released model; counts of
``BertForMaskedLM``/``RobertaForMaskedLM`` built from it, which ``tests/arch/test_hf_encoders.py`` rebuilds):

* BERT base/large, uncased (V 30522) and cased (V 28996): Devlin et al. 2019, "BERT", §3 (L=12, H=768,
  A=12, 110M; L=24, H=1024, A=16, 340M), ``google-bert/bert-{base,large}-{uncased,cased}/config.json``
  (512 positions, 2 token types).
* RoBERTa base/large: Liu et al. 2019, "RoBERTa", and ``FacebookAI/roberta-{base,large}/config.json``
  (V 50265, 514 positions, 1 token type, padding id 1); fairseq's README gives 125M and 355M.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, T, T_max, V, d, d_ff, h, n_types

from .blocks import dropout
from .encoders import activation, bidirectional_attention, pooler, post_norm_layer

HEADS = ("mlm", "pooler", "none")


def encoder(
    name: str,
    *,
    d_ff: sympy.Expr,
    act: str,
    head_act: str,
    head: str,
    position_offset: int,
    dropout_p: bool,
    dtype: str,
) -> nx.DiGraph:
    """The BERT-style encoder behind :func:`bert` and :func:`roberta`."""
    if head not in HEADS:
        raise CostModelError(f"{name}: head {head!r} is not one of {', '.join(HEADS)}")
    b = GraphBuilder(name, dtype=dtype, b=B, t=T, s=T, d=d, e=d, v=V, y=n_types, p=T_max, h=h, k=d / h, f=d_ff)
    b.require(
        T + position_offset <= T_max,
        f"learned positions from {position_offset}: T + {position_offset} cannot exceed the table T_max",
    )
    with b.scope("embeddings"):
        words = b.gather("word", b.input("ids", "b t"), "b t, v d -> b t d")
        types = b.gather("token_type", b.input("token_types", "b t"), "b t, y d -> b t d")
        positions = b.gather("position", b.input("positions", "t"), "t, p d -> t d")
        x = b.elementwise("add_types", "add", [words, types], "b t d, b t d -> b t d")
        x = b.elementwise("add_positions", "add", [x, positions], "b t d, t d -> b t d")
        x = dropout(b, "dropout", b.norm("norm", x, "b t d"), "b t d", dropout_p)

    def attention(b: GraphBuilder, x: Tensor) -> Tensor:
        return bidirectional_attention(b, x, dropout_p=dropout_p)

    def mlp(b: GraphBuilder, x: Tensor) -> Tensor:
        u = b.elementwise("act", act, b.matmul("fc", x, "b t d, d f -> b t f", bias="f"), "b t f")
        return dropout(b, "dropout", b.matmul("proj", u, "b t f, f d -> b t d", bias="d"), "b t d", dropout_p)

    with b.repeat("layers", L):
        x = post_norm_layer(b, x, attention, mlp)
    if head == "mlm":
        with b.scope("mlm"):
            y = b.matmul("dense", x, "b t d, d e -> b t e", bias="e")
            y = b.norm("norm", b.elementwise("act", head_act, y, "b t e"), "b t e")
            logits = b.matmul("decoder", y, "b t e, v e -> b t v", tied="embeddings.word", bias="v")
            b.loss("loss", logits, "b t v -> b t")
    elif head == "pooler":
        pooler(b, x)
    return b.graph


def bert(
    *, d_ff: sympy.Expr = d_ff, head: str = "mlm", act: str = "gelu", dropout_p: bool = False, dtype: str = "bf16"
) -> nx.DiGraph:
    """BERT as an op graph. ``head``: ``"mlm"``, ``"pooler"`` or ``"none"`` (see the module notes);
    ``act``: the MLP's and the MLM transform's activation; ``dropout_p``: dropout layers present."""
    return encoder(
        "bert", d_ff=d_ff, act=act, head_act=act, head=head, position_offset=0, dropout_p=dropout_p, dtype=dtype
    )


def roberta(
    *,
    d_ff: sympy.Expr = d_ff,
    head: str = "mlm",
    act: str = "gelu",
    pad: sympy.Expr = 1,
    dropout_p: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """RoBERTa: BERT's network with positions after the padding id ``pad`` (``T ≤ T_max − pad − 1``); its MLM
    transform is always GELU."""
    return encoder(
        "roberta",
        d_ff=d_ff,
        act=act,
        head_act="gelu",
        head=head,
        position_offset=pad + 1,
        dropout_p=dropout_p,
        dtype=dtype,
    )


#: transformers class → head
ARCHITECTURES = {"BertForMaskedLM": "mlm", "RobertaForMaskedLM": "mlm", "BertModel": "pooler", "RobertaModel": "pooler"}


def _head(cfg: Mapping[str, object], where: str) -> str:
    archs = field(cfg, "architectures", list, [], where=where)
    heads = {ARCHITECTURES.get(a) for a in archs}
    if None in heads or len(heads) > 1:
        raise CostModelError(
            f"{where}: architectures {archs} is not supported; expected one of "
            f"{', '.join(ARCHITECTURES)} (absent: the masked-LM model)"
        )
    return heads.pop() if heads else "mlm"


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``bert`` or ``roberta`` config.json (``T`` = the positions it can use)."""
    model_type = cfg.get("model_type")
    where = f"config.json ({model_type})"
    if field(cfg, "tie_word_embeddings", bool, True, where=where) is not True:
        raise CostModelError(
            f"{where}: tie_word_embeddings false is not supported (transformers then keeps an "
            "unused bias beside the untied decoder); expected true or absent"
        )
    out: dict[str, object] = {
        "L": field(cfg, "num_hidden_layers", where=where),
        "d": field(cfg, "hidden_size", where=where),
        "h": field(cfg, "num_attention_heads", where=where),
        "V": field(cfg, "vocab_size", where=where),
        "d_ff": field(cfg, "intermediate_size", where=where),
        "T_max": field(cfg, "max_position_embeddings", where=where),
        "n_types": field(cfg, "type_vocab_size", where=where),
        "act": activation(cfg, where),
        "head": _head(cfg, where),
    }
    if model_type == "roberta":
        out["pad"] = field(cfg, "pad_token_id", int, 1, where=where, minimum=0)
        out["T"] = out["T_max"] - out["pad"] - 1
        if out["T"] < 1:
            raise CostModelError(
                f"{where}: max_position_embeddings = {out['T_max']} leaves no position after "
                f"pad_token_id = {out['pad']}; expected more positions"
            )
    else:
        out["T"] = out["T_max"]
    return out


_BERT = "Devlin et al. 2019 (BERT), section 3; google-bert/{} config.json"
_ROBERTA = "Liu et al. 2019 (RoBERTa); FacebookAI/{} config.json; fairseq RoBERTa README ({} params)"
_BASE = {"L": 12, "d": 768, "h": 12, "d_ff": 3072}
_LARGE = {"L": 24, "d": 1024, "h": 16, "d_ff": 4096}


def _bert(name: str, size: dict, vocab: int, about: str) -> Preset:
    return Preset(name, "bert", {**size, "V": vocab, "T_max": 512, "n_types": 2, "T": 512}, _BERT.format(name), about)


def _roberta(name: str, size: dict, published: str, about: str) -> Preset:
    return Preset(
        name,
        "roberta",
        {**size, "V": 50265, "T_max": 514, "n_types": 1, "T": 512},
        _ROBERTA.format(name, published),
        about,
    )


BERT_PRESETS = (
    _bert("bert-base-uncased", _BASE, 30522, "BERT base, uncased (110M), masked-LM head"),
    _bert("bert-large-uncased", _LARGE, 30522, "BERT large, uncased (340M), masked-LM head"),
    _bert("bert-base-cased", _BASE, 28996, "BERT base, cased (110M), masked-LM head"),
    _bert("bert-large-cased", _LARGE, 28996, "BERT large, cased (340M), masked-LM head"),
)
ROBERTA_PRESETS = (
    _roberta("roberta-base", _BASE, "125M", "RoBERTa base (125M), masked-LM head"),
    _roberta("roberta-large", _LARGE, "355M", "RoBERTa large (355M), masked-LM head"),
)

FAMILY = Family(
    "bert",
    bert,
    "BERT: encoder-only, bidirectional attention, post-LN, masked-LM head",
    BERT_PRESETS,
    defaults={"T_max": 512, "n_types": 2, "T": 512},
    hf_model_types=("bert",),
    from_hf=from_hf,
)
ROBERTA = Family(
    "roberta",
    roberta,
    "RoBERTa: BERT's encoder, positions after the padding id",
    ROBERTA_PRESETS,
    defaults={"T_max": 514, "n_types": 1, "T": 512},
    hf_model_types=("roberta",),
    from_hf=from_hf,
)
