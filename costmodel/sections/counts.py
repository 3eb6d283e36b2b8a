"""Training FLOPs of a graph under a named convention (:mod:`costmodel.conventions`), as an expression.

How each published rule counts, derived from the graph: ``method="ops"`` sums every op's FLOPs under the
convention's op-level choices (plus a recomputed forward, less a router); ``method="params"`` counts 6 per
parameter per token with N as the convention says (:func:`n_params`), plus the attention term and an
embedding row. Used by ``costmodel compare`` (:mod:`costmodel.verbs.compare`) and by an MFU on a named
basis (:mod:`costmodel.sections.quantities`).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from ..conventions import CONVENTIONS, Convention  # noqa: F401 (the doctest reads CONVENTIONS)
from ..graph.analysis import in_block, op_nodes, repeated_blocks, tokens_per_step, totals
from ..graph.cost import Zero
from ..graph.pattern import elements
from ..graph.registry import data_operands, is_activation_product, op_cost, weight_operand, weight_use
from ..memory.activations import block_inputs
from ..options import Counting
from ..symbols import B


def _repeated(data: Mapping) -> bool:
    count = data["count"]
    return not (getattr(count, "is_number", False) and count == 1)


def position_tables(G: nx.DiGraph) -> list[str]:
    """Lookup tables every sequence of a batch reads alike: a gather whose ids have no batch size B in them (a
    learned position table, ``t, p d -> t d``)."""
    out = []
    for name, data in op_nodes(G):
        op = data["op"]
        if weight_use(op) == "table" and not elements(data_operands(op)[0], op.size).has(B):
            out.append(name)
    return out


def routers(G: nx.DiGraph) -> list[str]:
    """A mixture of experts' routers: dense matmuls whose output has an axis sized as a routed matmul's
    experts axis (a score per expert), found by sizes, not names."""
    experts = {op.size[str(op.attr("experts"))] for _, d in op_nodes(G) if (op := d["op"]).attr("experts")}
    out = []
    for name, data in op_nodes(G):
        op = data["op"]
        if (
            weight_use(op) == "dense"
            and not op.attr("experts")
            and any(op.size[a] in experts for a in op.parsed.output if a not in data_operands(op)[0])
        ):
            out.append(name)
    return out


def n_params(G: nx.DiGraph, which: str = "non_embedding", counting: Counting = Counting()) -> sympy.Expr:
    """N of a ``method="params"`` convention (:class:`~costmodel.conventions.Convention`, ``params``): the
    parameters one token uses (a mixture of experts: the routed share), counted as ``which`` says."""
    t = totals(G, counting)
    if which == "non_embedding":
        return t.params_active_non_embedding
    if which == "total":
        return t.params if t.params_active is None else t.params_active
    if which == "nanogpt":
        table = sympy.Add(
            *(op_cost(G.nodes[n]["op"], counting).params * G.nodes[n]["count"] for n in position_tables(G))
        )
        return sympy.expand((t.params if t.params_active is None else t.params_active) - table)
    if which == "matmul":  # a tied unembedding reads the embedding's table: its matmul's weight is used too
        tied = sympy.Add(
            *(
                elements(op.parsed.inputs[weight_operand(op)], op.size) * d["count"]
                for _, d in op_nodes(G)
                if weight_use(op := d["op"]) == "dense" and op.attr("tied")
            )
        )
        return sympy.expand(t.params_active_non_embedding + tied)
    strict = []  # the weight matrices of the repeated layers (no biases, no gains), the active share of experts
    for name, data in op_nodes(G):
        if not any(in_block(name, b) for b in repeated_blocks(G)):
            continue
        c = op_cost(data["op"], counting)
        mats = sympy.Add(*(w.elements for w in c.weights if w.quantized))
        if c.active is not None and c.params != 0:
            mats = mats * c.active / c.params
        strict.append(mats * data["count"])
    return sympy.expand(sympy.Add(*strict))


def training_flops(G: nx.DiGraph, conv: Convention) -> sympy.Expr:
    """Training FLOPs of one step (B sequences of T tokens) of ``G`` under ``conv``, as an expression.

    >>> from costmodel.kit import GraphBuilder, symbols as s
    >>> b = GraphBuilder("mlp", b=s.B, t=s.T, d=s.d)
    >>> x = b.input("x", "b t d", dtype="bf16")
    >>> with b.repeat("layers", s.L):
    ...     x = b.matmul("w", x, "b t d, d e -> b t d", e=s.d)
    >>> training_flops(b.graph, CONVENTIONS["megatron"])  # 3 passes + the recomputed forward
    8*B*L*T*d**2
    """
    t = totals(G, conv.ops)
    if conv.method == "params":
        flops = 6 * n_params(G, conv.params, conv.ops) * tokens_per_step(G)  # N: what a token uses (MoE: top_k)
        if conv.attention:
            for _, data in op_nodes(G):
                if is_activation_product(data["op"], conv.ops):  # the T-dependent attention term
                    flops += 3 * op_cost(data["op"], conv.ops).forward.matmul_flops * data["count"]
        if conv.embed_flops:  # per element of what enters the first repeated block (B·T·d), × 3 for training
            first = next(iter(repeated_blocks(G)), None)
            entering = block_inputs(G, first).values() if first else ()
            flops += 3 * conv.embed_flops * sympy.Add(*(k.saved.elements for k in entering if k.saved.dtype != "int64"))
        return sympy.expand(flops)
    flops = t.training.flops
    if not conv.router:
        flops -= sympy.Add(
            *(op_cost(G.nodes[n]["op"], conv.ops).training.flops * G.nodes[n]["count"] for n in routers(G))
        )
    if conv.recompute:
        flops += sum(
            (op_cost(d["op"], conv.ops).forward.flops * d["count"] for _, d in op_nodes(G) if _repeated(d)), Zero
        )
    return sympy.expand(flops)


__all__ = ["n_params", "position_tables", "routers", "training_flops"]
