"""Graph passes: functions that take an op graph and return a rewritten copy.

:func:`flash_attention` replaces each materialised attention chain

    scores = q·k  →  element-wise epilogue (scale, mask)  →  softmax
    →  (dropout)  →  context = probs·v

with one fused ``attention`` op, as FlashAttention computes it: the same FLOPs,
no T×T tensor read, written or saved.
"""

from __future__ import annotations

import networkx as nx

from .ops import Op
from .pattern import parse


def _single_consumer(G: nx.DiGraph, node: str) -> str | None:
    succ = list(G.successors(node))
    return succ[0] if len(succ) == 1 else None


def _attention_chains(G: nx.DiGraph):
    """Yield (scores node, [epilogue nodes], softmax node, [dropout nodes], context node)."""
    for name, data in G.nodes(data=True):
        op = data.get("op")
        if op is None or op.kind != "contraction":
            continue
        epilogue, dropouts, node = [], [], _single_consumer(G, name)
        while node and G.nodes[node]["op"].kind == "elementwise" and G.nodes[node]["op"].attr("fn") in ("scale", "mask"):
            epilogue.append(node)
            node = _single_consumer(G, node)
        if not node or G.nodes[node]["op"].kind != "softmax":
            continue
        softmax, node = node, _single_consumer(G, node)
        while node and G.nodes[node]["op"].kind == "elementwise" and G.nodes[node]["op"].attr("fn") == "dropout":
            dropouts.append(node)
            node = _single_consumer(G, node)
        if not node or G.nodes[node]["op"].kind != "contraction" or G.nodes[node]["inputs"][0] != (dropouts or [softmax])[-1]:
            continue
        yield name, epilogue, softmax, dropouts, node


def flash_attention(G: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``G`` with every materialised attention chain fused into one ``attention`` op.

    The fused node keeps the context node's name (so consumers need no rewiring)
    and its count; its inputs are q, k (of the scores) and v (of the context).
    """
    H = G.copy()
    H.graph = {**G.graph, "blocks": dict(G.graph.get("blocks", {})), "passes": (*G.graph.get("passes", ()), "flash_attention")}
    for scores, epilogue, softmax, dropouts, context in list(_attention_chains(G)):
        s_op, c_op = G.nodes[scores]["op"], G.nodes[context]["op"]
        q_axes, k_axes = s_op.parsed.inputs
        v_axes = c_op.parsed.inputs[1]
        pattern = ", ".join(" ".join(a) for a in (q_axes, k_axes, v_axes)) + " -> " + " ".join(c_op.parsed.output)
        sizes = {**s_op.size, **c_op.size}
        fns = tuple(G.nodes[n]["op"].attr("fn") for n in epilogue) + tuple("dropout" for _ in dropouts)
        attrs = {"scores": " ".join(s_op.parsed.output), "epilogue": fns, "causal": s_op.attr("causal")}
        op = Op("attention", pattern, tuple((a, sizes[a]) for a in parse(pattern).axes), c_op.dtype,
                tuple(sorted((k, v) for k, v in attrs.items() if v)))
        q_src, k_src = G.nodes[scores]["inputs"]
        v_src = G.nodes[context]["inputs"][1]
        H.remove_nodes_from([scores, *epilogue, softmax, *dropouts])
        H.remove_edges_from(list(H.in_edges(context)))
        H.nodes[context].update(op=op, inputs=(q_src, k_src, v_src))
        for src in (q_src, k_src, v_src):
            H.add_edge(src, context)
    return H
