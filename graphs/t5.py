"""T5: an encoder–decoder with relative position biases, RMSNorm pre-norm layers and no biases.

A training step runs the encoder over ``T_src`` source tokens and the decoder over ``T`` target tokens
(teacher forcing) for each of ``B`` sequence pairs; the loss is over the ``T`` targets. Axis names:
``s`` source positions (``T_src``) and ``u`` the encoder's key positions (``T_src`` again); ``t`` target
positions (``T``) and ``r`` the decoder's self-attention key positions (``T``); heads ``h`` of width
``k = d_head`` (T5's ``d_kv``, not ``d/h``: t5-3b has 32 heads of 128 at d = 1024).

* **Relative position bias**: each stack looks up one ``n_buckets × h`` table (in its first layer, as
  transformers does) for every (query, key) pair: ``"s u, n h -> h s u"``, once per step, and every layer
  adds it to its scores. The bucket ids are an input (their log-bucketing costs no FLOPs). Cross-attention
  has no bias. There is no 1/√d_head scale.
* **Cross-attention**: queries from the decoder (``t``), keys and values projected from the encoder's output
  over ``s``: scores ``b h t s``. An inference KV cache keeps the decoder's self-attention k, v (C positions)
  and the cross-attention k, v (``T_src`` positions), per decoder layer.
* **FFN**: ``relu(x W_i) W_o`` (T5), or gated ``(act(x W_i0) · x W_i1) W_o`` (T5 v1.1's gated-GELU).
* **Embeddings**: one table shared by both stacks; the LM head is tied to it (and the decoder's output
  scaled by d^-½ first) or, with ``tied=False`` (the released v1.1 checkpoints), its own ``V × d`` matrix.

Sources of the presets: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", §3.7 (Small 60M, Base 220M, Large 770M, 3B, 11B) and the Hugging Face
``google-t5/t5-{small,base,large,3b,11b}/config.json``; T5 v1.1 (gated-GELU, untied head, no dropout in
pre-training): ``google-research/text-to-text-transfer-transformer`` released_checkpoints.md and
``google/t5-v1_1-{small,base,large,xl,xxl}/config.json``. Step shape: 512 input tokens (§3.1.2) and 114
targets, what T5's ``random_spans_helper`` gives for 512 inputs under the span-corruption objective of §3.1.4
(15% noise, mean span 3).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from costmodel.kit import CostModelError, Family, GraphBuilder, Preset, Tensor, field
from costmodel.symbols import B, L, L_dec, T, T_src, V, d, d_ff, d_head, h, n_buckets

from .blocks import dropout


def attention(
    b: GraphBuilder,
    x: Tensor,
    memory: Tensor,
    pos: str,
    src: str,
    key: str,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
    cache: bool = False,
    dropout_p: bool = False,
) -> Tensor:
    """T5 attention: queries from ``x`` over ``pos``, keys and values from ``memory`` over ``src`` (named
    ``key`` in the scores); ``bias`` (``h pos key``) is added to the scores; no scale. ``cache``: k and v
    are what an inference KV cache keeps."""
    q = b.matmul("q", x, f"b {pos} d, d h k -> b h {pos} k")
    k = b.matmul("k", memory, f"b {src} d, d h k -> b h {src} k")
    v = b.matmul("v", memory, f"b {src} d, d h k -> b h {src} k")
    if cache:
        b.tag(k, "kv_cache"), b.tag(v, "kv_cache")
    axes = f"b h {pos} {key}"
    scores = b.contract("scores", q, k, f"b h {pos} k, b h {key} k -> {axes}", causal=causal)
    if bias is not None:
        scores = b.elementwise("position_bias", "add", [scores, bias], f"{axes}, h {pos} {key} -> {axes}")
    if causal:
        scores = b.elementwise("mask", "mask", scores, axes)
    probs = dropout(b, "dropout", b.softmax("softmax", scores, axes, axis=key), axes, dropout_p)
    context = b.contract("context", probs, v, f"{axes}, b h {key} k -> b h {pos} k", causal=causal)
    return b.matmul("o", context, f"b h {pos} k, h k d -> b {pos} d")


def feed_forward(b: GraphBuilder, x: Tensor, pos: str, *, act: str, gated: bool, dropout_p: bool) -> Tensor:
    """``act(x W_i) W_o``, or gated: ``(act(x W_i0) · x W_i1) W_o``."""
    axes = f"b {pos} f"
    if gated:
        gate = b.elementwise("act", act, b.matmul("wi_0", x, f"b {pos} d, d f -> {axes}"), axes)
        u = b.elementwise(
            "gated", "mul", [gate, b.matmul("wi_1", x, f"b {pos} d, d f -> {axes}")], f"{axes}, {axes} -> {axes}"
        )
    else:
        u = b.elementwise("act", act, b.matmul("wi", x, f"b {pos} d, d f -> {axes}"), axes)
    return b.matmul("wo", dropout(b, "dropout", u, axes, dropout_p), f"{axes}, f d -> b {pos} d")


def sublayer(b: GraphBuilder, name: str, x: Tensor, pos: str, body, dropout_p: bool) -> Tensor:
    """``x + dropout(body(rms(x)))`` in scope ``name``."""
    with b.scope(name):
        y = dropout(b, "dropout", body(b.norm("norm", x, f"b {pos} d", rms=True)), f"b {pos} d", dropout_p)
        return b.elementwise("residual", "add", [x, y], f"b {pos} d, b {pos} d -> b {pos} d")


def t5(
    *,
    d_ff: sympy.Expr = d_ff,
    d_head: sympy.Expr = d_head,
    gated: bool = False,
    act: str = "relu",
    tied: bool = True,
    dropout_p: bool = False,
    dtype: str = "bf16",
) -> nx.DiGraph:
    """T5 as an op graph (see the module notes). ``gated``: T5 v1.1's gated FFN (three matrices);
    ``act``: its activation (``relu``; v1.1: ``gelu``); ``tied``: the LM head is the shared table;
    ``dropout_p``: dropout layers present."""
    b = GraphBuilder("t5", dtype=dtype, b=B, s=T_src, u=T_src, t=T, r=T, d=d, v=V, h=h, k=d_head, f=d_ff, n=n_buckets)
    b.tokens(B * (T_src + T))  # the encoder's source tokens and the decoder's targets

    def ffn(b: GraphBuilder, x: Tensor, pos: str) -> Tensor:
        return feed_forward(b, x, pos, act=act, gated=gated, dropout_p=dropout_p)

    with b.scope("encoder"):
        x = b.gather("embed", b.input("source_ids", "b s"), "b s, v d -> b s d")
        x = dropout(b, "dropout", x, "b s d", dropout_p)
        bias = b.gather("relative_bias", b.input("buckets", "s u"), "s u, n h -> h s u")
        with b.repeat("layers", L):
            x = sublayer(
                b,
                "attn",
                x,
                "s",
                lambda y: attention(b, y, y, "s", "s", "u", bias=bias, dropout_p=dropout_p),
                dropout_p,
            )
            x = sublayer(b, "ffn", x, "s", lambda y: ffn(b, y, "s"), dropout_p)
        memory = dropout(b, "out_dropout", b.norm("norm", x, "b s d", rms=True), "b s d", dropout_p)
    with b.scope("decoder"):
        y = b.gather("embed", b.input("target_ids", "b t"), "b t, v d -> b t d", tied="encoder.embed")
        y = dropout(b, "dropout", y, "b t d", dropout_p)
        bias = b.gather("relative_bias", b.input("buckets", "t r"), "t r, n h -> h t r")
        with b.repeat("layers", L_dec):
            y = sublayer(
                b,
                "self_attn",
                y,
                "t",
                lambda z: attention(b, z, z, "t", "t", "r", bias=bias, causal=True, cache=True, dropout_p=dropout_p),
                dropout_p,
            )
            y = sublayer(
                b,
                "cross_attn",
                y,
                "t",
                lambda z: attention(b, z, memory, "t", "s", "s", cache=True, dropout_p=dropout_p),
                dropout_p,
            )
            y = sublayer(b, "ffn", y, "t", lambda z: ffn(b, z, "t"), dropout_p)
        y = dropout(b, "out_dropout", b.norm("norm", y, "b t d", rms=True), "b t d", dropout_p)
    if tied:  # transformers scales the decoder's output by d^-1/2 before a tied head
        y = b.elementwise("scale", "scale", y, "b t d")
    logits = b.matmul("lm_head", y, "b t d, v d -> b t v", tied="encoder.embed" if tied else None)
    b.loss("loss", logits, "b t v -> b t")
    return b.graph


def from_hf(cfg: Mapping[str, object]) -> dict[str, object]:
    """Settings from a Hugging Face ``t5`` config.json.

    ``feed_forward_proj``: ``relu``, ``gelu``, ``silu`` or ``gated-`` one of them (v1.1: ``gated-gelu``).
    ``tie_word_embeddings`` false (the v1.1 configs) gives the released checkpoints' own LM head; note that
    transformers 5.24 ties it anyway when it builds T5 from a config (not when it loads a checkpoint).
    ``T_src`` and ``T`` are set to ``n_positions`` (512 when absent): override with ``--set T_src=...`` and
    ``--seq``.
    """
    where = "config.json (t5)"
    proj = field(cfg, "feed_forward_proj", str, "relu", where=where)
    gated, _, act = proj.rpartition("-")
    if gated not in ("", "gated") or act not in ("relu", "gelu", "silu"):
        raise CostModelError(
            f"{where}: feed_forward_proj {proj!r} is not supported; expected relu, gelu, silu "
            "or gated-relu, gated-gelu, gated-silu"
        )
    layers = field(cfg, "num_layers", where=where)
    positions = field(cfg, "n_positions", int, 512, where=where)
    return {
        "L": layers,
        "L_dec": field(cfg, "num_decoder_layers", int, layers, where=where),
        "d": field(cfg, "d_model", where=where),
        "d_head": field(cfg, "d_kv", where=where),
        "d_ff": field(cfg, "d_ff", where=where),
        "h": field(cfg, "num_heads", where=where),
        "V": field(cfg, "vocab_size", where=where),
        "n_buckets": field(cfg, "relative_attention_num_buckets", int, 32, where=where),
        "gated": gated == "gated",
        "act": act,
        "tied": field(cfg, "tie_word_embeddings", bool, True, where=where),
        "T_src": positions,
        "T": positions,
    }


_T5 = "Raffel et al. 2020 (T5), section 3.7; google-t5/{} config.json"
_V11 = (
    "T5 v1.1: google-research/text-to-text-transfer-transformer released_checkpoints.md; google/{} config.json "
    "(gated-gelu, untied head)"
)
_STEP = {"V": 32128, "n_buckets": 32, "T_src": 512, "T": 114}


def _t5(name: str, d_model: int, d_kv: int, ff: int, layers: int, heads: int, about: str) -> Preset:
    return Preset(
        name,
        "t5",
        {**_STEP, "d": d_model, "d_head": d_kv, "d_ff": ff, "L": layers, "L_dec": layers, "h": heads},
        _T5.format(name),
        about,
    )


def _v11(name: str, d_model: int, ff: int, layers: int, heads: int, about: str) -> Preset:
    return Preset(
        name,
        "t5",
        {
            **_STEP,
            "d": d_model,
            "d_head": 64,
            "d_ff": ff,
            "L": layers,
            "L_dec": layers,
            "h": heads,
            "gated": True,
            "act": "gelu",
            "tied": False,
        },
        _V11.format(name.replace("t5-v1.1", "t5-v1_1")),
        about,
    )


PRESETS = (
    _t5("t5-small", 512, 64, 2048, 6, 8, "T5 Small (60M)"),
    _t5("t5-base", 768, 64, 3072, 12, 12, "T5 Base (220M)"),
    _t5("t5-large", 1024, 64, 4096, 24, 16, "T5 Large (770M)"),
    _t5("t5-3b", 1024, 128, 16384, 24, 32, "T5 3B"),
    _t5("t5-11b", 1024, 128, 65536, 24, 128, "T5 11B"),
    _v11("t5-v1.1-small", 512, 1024, 8, 6, "T5 v1.1 Small (77M as released, head untied)"),
    _v11("t5-v1.1-base", 768, 2048, 12, 12, "T5 v1.1 Base (248M as released)"),
    _v11("t5-v1.1-large", 1024, 2816, 24, 16, "T5 v1.1 Large (783M as released)"),
    _v11("t5-v1.1-xl", 2048, 5120, 24, 32, "T5 v1.1 XL (2.85B as released)"),
    _v11("t5-v1.1-xxl", 4096, 10240, 24, 64, "T5 v1.1 XXL (11.1B as released)"),
)

FAMILY = Family(
    "t5",
    t5,
    "T5 encoder-decoder: relative position bias, cross-attention, RMSNorm, (gated) FFN",
    PRESETS,
    defaults={"T_src": 512, "T": 114, "n_buckets": 32},
    hf_model_types=("t5",),
    from_hf=from_hf,
)
