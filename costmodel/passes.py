"""Graph passes: functions that take an op graph and return a rewritten copy.

:func:`flash_attention` replaces each materialised attention chain

    scores = q·k (or a sum of such, as MLA's q_nope·k_nope + q_rope·k_rope)
    →  element-wise epilogue (scale, mask)  →  softmax  →  (dropout)  →  context = probs·v

with one fused ``attention`` op, as FlashAttention computes it: the same FLOPs,
no T×T tensor read, written or saved.

:func:`fuse_elementwise` folds element-wise ops into the op that makes their
input (one kernel, no intermediate written and read back). Run it after
:func:`flash_attention`, which looks for the unfused score chain.
"""

from __future__ import annotations

import networkx as nx
import sympy

from .cost import Cost, OpCost, Saved, Zero, dtype_bytes
from .ops import Conventions, Op, data_operands, op_cost, rule, weight_operand
from .pattern import elements, parse


def _single_consumer(G: nx.DiGraph, node: str) -> str | None:
    succ = list(G.successors(node))
    return succ[0] if len(succ) == 1 else None


def _is(G: nx.DiGraph, node: str | None, kind: str, fns: tuple[str, ...] = ()) -> bool:
    op = G.nodes[node].get("op") if node is not None else None
    return op is not None and op.kind == kind and (not fns or op.attr("fn") in fns)


def _score_parts(G: nx.DiGraph, node: str) -> tuple[list[str], list[str]] | None:
    """The contraction(s) whose (sum of) outputs are the scores made at ``node``, and the adds between.

    One contraction (``q·k``), or an ``add`` of contractions each used only there
    (MLA: ``q_nope·k_nope + q_rope·k_rope``).
    """
    if _is(G, node, "contraction"):
        return [node], []
    if _is(G, node, "elementwise", ("add",)):
        parts = list(G.nodes[node]["inputs"])
        if parts and all(_is(G, p, "contraction") and _single_consumer(G, p) == node for p in parts):
            return parts, [node]
    return None


def attention_chains(G: nx.DiGraph):
    """Yield (score contractions, [adds and epilogue nodes], softmax node, [dropout nodes], context node).

    Walks back from each softmax through a single-consumer epilogue (scale, mask) to
    the scores, and forward through dropout to the context contraction.
    """
    for softmax, data in G.nodes(data=True):
        if not _is(G, softmax, "softmax"):
            continue
        epilogue, node = [], data["inputs"][0]
        while _is(G, node, "elementwise", ("scale", "mask")) and _single_consumer(G, node) is not None:
            epilogue.insert(0, node)
            node = G.nodes[node]["inputs"][0]
        found = _score_parts(G, node) if _single_consumer(G, node) is not None else None
        if found is None:
            continue
        scores, adds = found
        dropouts, node = [], _single_consumer(G, softmax)
        while _is(G, node, "elementwise", ("dropout",)):
            dropouts.append(node)
            node = _single_consumer(G, node)
        if not _is(G, node, "contraction") or G.nodes[node]["inputs"][0] != (dropouts or [softmax])[-1]:
            continue
        yield scores, adds + epilogue, softmax, dropouts, node


def flash_attention(G: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``G`` with every materialised attention chain fused into one ``attention`` op.

    The fused node keeps the context node's name (so consumers need no rewiring)
    and its count; its inputs are q and k of each score contraction (two pairs
    for MLA's split scores), then v of the context.
    """
    H = G.copy()
    H.graph = {**G.graph, "blocks": dict(G.graph.get("blocks", {})), "passes": (*G.graph.get("passes", ()), "flash_attention")}
    for scores, epilogue, softmax, dropouts, context in list(attention_chains(G)):
        s_ops, c_op = [G.nodes[n]["op"] for n in scores], G.nodes[context]["op"]
        operands = [axes for s_op in s_ops for axes in s_op.parsed.inputs] + [c_op.parsed.inputs[1]]
        pattern = ", ".join(" ".join(a) for a in operands) + " -> " + " ".join(c_op.parsed.output)
        sizes = {k: v for s_op in s_ops for k, v in s_op.size.items()} | c_op.size
        fns = tuple(G.nodes[n]["op"].attr("fn") for n in epilogue) + tuple("dropout" for _ in dropouts)
        attrs = {"scores": " ".join(s_ops[0].parsed.output), "epilogue": fns, "causal": s_ops[0].attr("causal")}
        op = Op("attention", pattern, tuple((a, sizes[a]) for a in parse(pattern).axes), c_op.dtype,
                tuple(sorted((k, v) for k, v in attrs.items() if v)))
        sources = tuple(src for n in scores for src in G.nodes[n]["inputs"]) + (G.nodes[context]["inputs"][1],)
        H.remove_nodes_from([*scores, *epilogue, softmax, *dropouts])
        H.remove_edges_from(list(H.in_edges(context)))
        H.nodes[context].update(op=op, inputs=sources)
        for src in sources:
            H.add_edge(src, context)
    return H


# ---------------------------------------------------------------------------
# Element-wise fusion


def _fuse_target(G: nx.DiGraph, node: str) -> tuple[int, str] | None:
    """(chain operand index, producer) if element-wise ``node`` can fold into its producer.

    The producer must carry an op (not a graph input or a loss), run as often as
    ``node``, size shared axis names alike, and have ``node`` as its only consumer
    (otherwise its output must be written anyway).
    """
    data = G.nodes[node]
    if data["op"].kind != "elementwise":
        return None
    for i, src in enumerate(data["inputs"]):
        sd = G.nodes[src]
        if "op" not in sd or sd["op"].kind == "loss" or list(G.successors(src)) != [node]:
            continue
        if sympy.expand(sd["count"] - data["count"]) != 0:
            continue
        mine, theirs = data["op"].size, sd["op"].size
        if any(sympy.expand(mine[a] - theirs[a]) != 0 for a in mine.keys() & theirs.keys()):
            continue
        return i, src
    return None


def _parts(G: nx.DiGraph, node: str) -> tuple[tuple, tuple, tuple]:
    """The (ops, chain indices, names) a node stands for (one, unless already fused)."""
    op = G.nodes[node]["op"]
    if op.kind == "fused":
        return op.attr("parts"), op.attr("chain"), op.attr("names")
    return (op,), (-1,), (node,)


def fuse_elementwise(G: nx.DiGraph, *, training: bool = True) -> nx.DiGraph:
    """A copy of ``G`` with each element-wise op folded into the op that makes its input.

    ``fc → gelu`` becomes one ``fused`` op that reads what ``fc`` reads and writes
    only ``gelu``'s output: the intermediate tensor's write and read-back are the
    bytes saved. Chains fold in turn (``scores → scale → mask``). The fused node
    keeps the last op's name, so consumers need no rewiring; its attribute
    ``names`` lists what it fused. Backward is left unfused (the parts' backward
    costs add up). ``training=True``: an intermediate that a part saves for
    backward is still written by the fused kernel (its bytes stay);
    ``training=False`` (inference) writes only the final output.

    >>> from costmodel import GraphBuilder, symbols as s
    >>> from costmodel.analysis import totals
    >>> b = GraphBuilder("mlp", b=s.B, d=s.d, f=s.d_ff)
    >>> u = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    >>> _ = b.elementwise("relu", "relu", u, "b f")
    >>> G = b.graph
    >>> H = fuse_elementwise(G, training=False)
    >>> totals(G).forward.bytes - totals(H).forward.bytes  # write b×f and read it back, 2 bytes each
    4*B*d_ff
    """
    H = G.copy()
    H.graph = {**G.graph, "blocks": dict(G.graph.get("blocks", {})),
               "passes": (*G.graph.get("passes", ()), "fuse_elementwise")}
    for node in list(nx.topological_sort(G)):
        if "op" not in H.nodes[node]:
            continue
        found = _fuse_target(H, node)
        if found is None:
            continue
        chain, src = found
        ops, chains, names = _parts(H, src)
        me = H.nodes[node]
        extra = tuple(s for i, s in enumerate(me["inputs"]) if i != chain)
        inputs = (*H.nodes[src]["inputs"], *extra)
        last = me["op"]
        ops, chains, names = (*ops, last), (*chains, chain), (*names, node)
        sizes: dict[str, sympy.Expr] = {}
        for part in ops:
            sizes.update(part.size)
        in_axes = [*H.nodes[src]["op"].parsed.inputs, *(ax for i, ax in enumerate(last.parsed.inputs) if i != chain)]
        pattern = ", ".join(" ".join(a) for a in in_axes) + " -> " + " ".join(last.parsed.output)
        attrs = (("chain", chains), ("keep_saved", training), ("names", names), ("parts", ops))
        fused = Op("fused", pattern, tuple((a, sizes[a]) for a in parse(pattern).axes), last.dtype, attrs)
        embedding = H.nodes[src].get("embedding", False)
        tags = set(H.nodes[src].get("tags", set())) | set(me.get("tags", set()))
        H.remove_node(src)
        H.remove_edges_from(list(H.in_edges(node)))
        me.update(op=fused, inputs=inputs, embedding=embedding)
        if tags:
            me["tags"] = tags
        for s in inputs:
            H.add_edge(s, node)
    return H


def _fused_weight(op: Op) -> int | None:
    """A fused op's operands start with its first part's (weight included): that part's weight operand."""
    parts = op.attr("parts")
    return weight_operand(parts[0]) if parts else None


@rule("fused", weight_operand=_fused_weight)
def _fused(op: Op, conventions: Conventions) -> OpCost:
    """An op and the element-wise ops folded into it (see :func:`fuse_elementwise`).

    Forward: the parts' FLOPs; reads = the first part's reads plus each later
    part's other operands; writes = the last part's output (plus, when
    ``keep_saved``, intermediates a part saves for backward). Backward: the
    parts' backward costs, unfused.
    """
    parts, chains, names = op.attr("parts"), op.attr("chain"), op.attr("names")
    costs = [op_cost(p, conventions) for p in parts]
    n_first = len(data_operands(parts[0]))  # later parts' other operands follow the first part's graph tensors
    fwd = Cost(flops=sum((c.forward.flops for c in costs), Zero),
               matmul_flops=sum((c.forward.matmul_flops for c in costs), Zero),
               bytes_read=costs[0].forward.bytes_read, bytes_written=costs[-1].forward.bytes_written,
               recompute_flops=sum((c.forward.recompute_flops for c in costs), Zero))
    saved: dict[str, Saved] = {}
    extra_index = n_first
    for j, (part, cost) in enumerate(zip(parts, costs)):
        remap: dict[str, str] = {}
        if j > 0:
            chain = chains[j]
            chain_bytes = elements(part.parsed.inputs[chain], part.size) * dtype_bytes(part.dtype)
            fwd += Cost(bytes_read=cost.forward.bytes_read - chain_bytes)
            remap[f"input{chain}"] = f"{names[j - 1]}.out"
            for i in range(len(part.parsed.inputs)):
                if i != chain:
                    remap[f"input{i}"] = f"input{extra_index}"
                    extra_index += 1
        if j < len(parts) - 1:
            remap["output"] = f"{names[j]}.out"
        for s in cost.saved:
            source = remap.get(s.source, s.source)
            if source.endswith(".out"):  # an intermediate the fused op makes and keeps
                s = Saved(source, "own", s.elements, s.dtype, s.role)
            elif s.source == "own":
                s = Saved(f"{names[j]}.{s.name}", "own", s.elements, s.dtype, s.role)
            else:
                s = Saved(s.name, source, s.elements, s.dtype, s.role)
            saved.setdefault(s.name if s.source == "own" else f"{names[j]}.{s.name}", s)
    if op.attr("keep_saved"):
        fwd += Cost(bytes_written=sum((s.bytes for s in saved.values() if s.name.endswith(".out")), Zero))
    bwd = sum((c.backward for c in costs), Cost())
    params = sum((c.params for c in costs), Zero)
    active = None if all(c.active is None for c in costs) else sum((c.active_params for c in costs), Zero)
    return OpCost(fwd, bwd, params, tuple(saved.values()), active)
