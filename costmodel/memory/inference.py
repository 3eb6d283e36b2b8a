"""Inference memory: the KV cache, the recurrent state cache, weights in an inference format, the forward
working set."""

from __future__ import annotations

import networkx as nx
import sympy

from ..errors import CostModelError
from ..graph.analysis import op_nodes
from ..graph.cost import Zero, dtype_bytes
from ..graph.pattern import elements
from ..graph.registry import data_operands, state_bytes, weight_use
from ..options.policies import weight_format
from ..symbols import C, T
from .activations import is_view, storage, storage_bytes
from .states import stored_bytes, weights


def kv_cache(G: nx.DiGraph, context: sympy.Expr = C, dtype: str | None = None, share=None) -> sympy.Expr:
    """Bytes of the KV cache for ``context`` tokens: every tensor tagged ``"kv_cache"``.

    Each tagged tensor (k and v, or MLA's latent) is kept for every token: its
    elements with the sequence length T replaced by ``context``, × its count
    (L layers), in ``dtype`` (default: the op's). For MHA/GQA this is
    ``2 · L · B · C · n_kv · d_head · bytes``. A graph whose only cache is a recurrent state (Mamba) has
    none (0): see :func:`state_cache`. ``share(node)``: the fraction of a tagged node's cache one device holds
    (a pipeline stage's share of the layers); all of it by default.
    """
    total = Zero
    for name, data in op_nodes(G):
        if "kv_cache" in data.get("tags", ()):
            op = data["op"]
            kept = data.get("kv_positions", T).subs(T, context)  # a sliding window keeps only its last tokens
            n = elements(op.parsed.output, op.size).subs(T, kept)
            part = 1 if share is None else share(name)
            total += n * data["count"] * dtype_bytes(dtype or op.dtype) * part
    if total == 0 and state_cache(G) == 0:
        raise CostModelError(
            f"graph {G.graph.get('name')!r} has no KV cache (no tensor tagged 'kv_cache') and keeps "
            "no recurrent state: an encoder with bidirectional attention (BERT, ViT) reads its whole "
            "input at once and does not decode token by token, so an inference estimate (KV cache, "
            "decode) does not apply; a decoder tags its k and v projections (or a latent) with "
            "GraphBuilder.tag(t, 'kv_cache'), a state-space model's ops keep a state (conv, scan)"
        )
    return sympy.expand(total)


def state_cache(G: nx.DiGraph) -> sympy.Expr:
    """Bytes of the recurrent state an inference cache keeps for B sequences, whatever the context: each
    op's ``state_bytes`` (its kind's fact: a causal convolution's last inputs, a selective scan's state, in
    the dtypes the kernels keep them) × its count (L layers). 0 for a graph without such ops.
    """
    return sympy.expand(sympy.Add(*(state_bytes(data["op"]) * data["count"] for _, data in op_nodes(G))))


def inference_weights(G: nx.DiGraph, fmt: str = "bf16", share=None, checkpoint=None) -> dict[str, sympy.Expr]:
    """Weight bytes for inference: matmul weights in ``fmt``; tables, norms, biases in the graph dtype.

    ``share(w)``: the fraction of each weight one device holds (default: all of it), as
    :func:`costmodel.memory.parallel.weight_share` gives for a pipeline stage. ``checkpoint``: a
    :class:`~costmodel.options.policies.Checkpoint` (a config's ``quantization_config``) naming each matmul
    weight's format instead of ``fmt``; a weight it leaves out is in the graph's dtype.
    """
    default = weight_format(fmt)
    quantised = scales = other = Zero
    for w in weights(G):
        op = G.nodes[w.node]["op"]
        part = sympy.Integer(1) if share is None else share(w)
        f = default
        if checkpoint is not None and w.param.quantized:
            f = checkpoint.format_of(w.node, G.nodes[w.node].get("block", ""), weight_use(op) == "routed")
        if w.param.quantized and f is not None:  # a matmul's weight; a lookup table, norm gains and biases stay
            packed = w.elements * sympy.Rational(f.bits, 8) + (w.stack * w.cols * f.index_bytes if f.index_bytes else 0)
            quantised += packed * w.count * part
            scales += (stored_bytes(w, f) - packed) * w.count * part  # each matrix of a stack has its own scales
        else:
            other += w.elements * w.count * dtype_bytes(op.dtype) * part
    return {
        "matmul_weights": quantised,
        "scales": scales,
        "other": other,
        "total": sympy.expand(quantised + scales + other),
    }


def working_set(
    G: nx.DiGraph, share=None, where=None, elsewhere: frozenset[str] = frozenset()
) -> tuple[tuple[sympy.Expr, ...], tuple[str, ...]]:
    """Forward-only working set: each op's (inputs + output) bytes, and the op's name; the working set is
    their maximum. A view (a sliding window's unfold, a reshape) is its storage: an operand that is a view
    counts the tensor it views, once, and a view's own output nothing. ``share(axes)``: the fraction of a
    tensor with those axes one device holds (tensor parallelism); ``where(node)``: whether the op runs on
    this device (a pipeline stage's ops); ``elsewhere``: storage nodes counted in another line (a decode
    step's KV cache), held by no op's working set."""
    cands, labels = [], []
    for name, data in op_nodes(G):
        if where is not None and not where(name):
            continue
        op = data["op"]
        size = dtype_bytes(op.dtype)
        held: dict[str, sympy.Expr] = {}  # storage node → bytes
        for axes, src in zip(data_operands(op), data["inputs"]):
            base = storage(G, src) if "op" in G.nodes[src] else src
            if base in held or base in elsewhere:
                continue
            if base != src:  # a view: the storage it views, split as that storage's axes are
                held[base] = storage_bytes(G, src) * (1 if share is None else share(G.nodes[base]["op"].parsed.output))
            else:
                held[base] = elements(axes, op.size) * size * (1 if share is None else share(axes))
        out = (
            Zero
            if is_view(G, name) or name in elsewhere
            else elements(op.parsed.output, op.size) * size * (1 if share is None else share(op.parsed.output))
        )
        cands.append(sympy.expand(sympy.Add(*held.values()) + out))  # no weights
        labels.append(name)
    return tuple(cands), tuple(labels)
