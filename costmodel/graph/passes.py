"""Graph passes: functions that take an op graph and return a rewritten copy.

:func:`flash_attention` replaces each materialised attention chain

    scores = q·k (or a sum of such, as MLA's q_nope·k_nope + q_rope·k_rope)
    →  element-wise epilogue (scale, mask)  →  softmax  →  (dropout)  →  context = probs·v

with one fused ``attention`` op, as FlashAttention computes it: the same FLOPs,
no T×T tensor read, written or saved.

:func:`eager_attention` runs each such chain's softmax in fp32 between two casts (transformers' eager
attention). :func:`fuse_elementwise` folds element-wise ops into the op that makes their
input (one kernel, no intermediate written and read back). Run it after
:func:`flash_attention`, which looks for the unfused score chain.
"""

from __future__ import annotations

import networkx as nx
import sympy

from ..errors import CostModelError
from ..options import FUSED_ATTENTION
from ..symbols import T
from .analysis import in_block, order, repeated_blocks
from .pattern import parse
from .registry import Op, is_activation_product, kind_of, weight_use


def copy_for(G: nx.DiGraph, name: str, rewritten: tuple[str, ...] = ()) -> nx.DiGraph:
    """A copy of ``G`` for pass ``name``: ``graph["passes"]`` lists the passes applied, in order, and
    ``graph["rewritten"][name]`` the nodes the pass rewrote (filled in by the pass)."""
    H = G.copy()
    H.graph = {
        **G.graph,
        "blocks": dict(G.graph.get("blocks", {})),
        "passes": (*G.graph.get("passes", ()), name),
        "rewritten": {**G.graph.get("rewritten", {}), name: rewritten},
    }
    return H


def _op(G: nx.DiGraph, node: str | None) -> Op | None:
    return G.nodes[node].get("op") if node is not None else None


def _single_consumer(G: nx.DiGraph, node: str) -> str | None:
    succ = list(G.successors(node))
    return succ[0] if len(succ) == 1 else None


def _pointwise(G: nx.DiGraph, node: str | None, unary: bool = False) -> bool:
    op = _op(G, node)
    return op is not None and kind_of(op).pointwise and (not unary or len(G.nodes[node]["inputs"]) == 1)


def _product(G: nx.DiGraph, node: str | None) -> bool:
    """An activation × activation contraction (scores, context): matmul FLOPs and no weight."""
    op = _op(G, node)
    return op is not None and is_activation_product(op)


def _score_parts(G: nx.DiGraph, node: str) -> tuple[list[str], list[str]] | None:
    """The contraction(s) whose (sum of) outputs are the scores made at ``node``, and the adds between.

    One activation product (``q·k``), or an element-wise op over several products each used only
    there (MLA: ``q_nope·k_nope + q_rope·k_rope``).
    """
    if _product(G, node):
        return [node], []
    if _pointwise(G, node):
        parts = list(G.nodes[node]["inputs"])
        if len(parts) > 1 and all(_product(G, p) and _single_consumer(G, p) == node for p in parts):
            return parts, [node]
    return None


def _score_bias(G: nx.DiGraph, node: str) -> bool:
    """An element-wise op whose first input continues the chain and whose other inputs come from outside it
    and are no activation products (an additive bias of the scores: T5's relative positions, ALiBi)."""
    if not _pointwise(G, node):
        return False
    first, *others = G.nodes[node]["inputs"]
    return bool(others) and all(src != first and not _product(G, src) for src in others)


def score_biases(G: nx.DiGraph, epilogue: list[str], scores: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The additive biases an attention chain's epilogue reads: producer → its axes, named as the ``scores``
    axes are (an epilogue op's first operand has the scores' shape: its axes map to them by position)."""
    out: dict[str, tuple[str, ...]] = {}
    for node in epilogue:
        if _score_bias(G, node):
            op = G.nodes[node]["op"]
            first, *others = op.parsed.inputs
            rename = dict(zip(first, scores))
            for src, axes in zip(G.nodes[node]["inputs"][1:], others):
                out.setdefault(src, tuple(rename[a] for a in axes))
    return out


def attention_chains(G: nx.DiGraph):
    """Yield (score contractions, [adds and epilogue nodes], normalizer, [nodes after it], context node).

    Found by data flow, not by names: from each normalizer (a softmax), back through single-consumer
    element-wise ops (scale, soft-cap, mask, the add of a bias...) to the activation products that make the
    scores, and forward through single-consumer element-wise ops (dropout) to the product that reads the
    probabilities first (the context). Authors: give the scores as an epilogue op's first input; an epilogue
    op's other inputs, if any, are additive biases made outside the chain (:func:`score_biases`).
    """
    for softmax in list(G.nodes):
        op = _op(G, softmax)
        if op is None or not kind_of(op).normalizer:
            continue
        epilogue, node = [], G.nodes[softmax]["inputs"][0]
        found = None
        while _single_consumer(G, node) is not None:
            found = _score_parts(G, node)
            if found is not None or not (_pointwise(G, node, unary=True) or _score_bias(G, node)):
                break
            epilogue.insert(0, node)
            node = G.nodes[node]["inputs"][0]
        if found is None:
            continue
        scores, adds = found
        after, node = [], _single_consumer(G, softmax)
        while _pointwise(G, node, unary=True):
            after.append(node)
            node = _single_consumer(G, node)
        if not _product(G, node) or G.nodes[node]["inputs"][0] != (after or [softmax])[-1]:
            continue
        yield scores, adds + epilogue, softmax, after, node


def unfused_attention(G: nx.DiGraph) -> list[tuple[str, str]]:
    """(normalizer, why) for each softmax that reads activation-product scores outside a fusable chain.

    After :func:`flash_attention`, any such softmax still materialises its T×T scores.
    """
    fused = {chain[2] for chain in attention_chains(G)}
    out = []
    for softmax in G.nodes:
        op = _op(G, softmax)
        if op is None or not kind_of(op).normalizer or softmax in fused:
            continue
        node = G.nodes[softmax]["inputs"][0]
        path = []
        late = None  # (node, index): an element-wise op that reads the scores as a later input
        while _op(G, node) is not None and not _product(G, node) and _pointwise(G, node):
            path.append(node)
            if _score_parts(G, node) is not None:
                break
            late = next(((node, i) for i, src in enumerate(G.nodes[node]["inputs"]) if i and _product(G, src)), None)
            if late:
                break
            node = G.nodes[node]["inputs"][0]
        if not (_product(G, node) or late or (path and _score_parts(G, path[-1]) is not None)):
            continue  # not attention (a router's softmax reads a weight matmul)
        blocker = next((n for n in [*path, node] if _single_consumer(G, n) is None), None)
        if blocker is not None:
            why = f"{blocker!r} has {G.out_degree(blocker)} consumers"
        elif late:
            why = f"{late[0]!r} reads the scores as its input {late[1]}, expected as its first"
        else:
            why = next(
                (
                    f"{n!r} has {len(G.nodes[n]['inputs'])} inputs"
                    for n in path
                    if len(G.nodes[n]["inputs"]) > 1 and _score_parts(G, n) is None and not _score_bias(G, n)
                ),
                "the probabilities do not reach a contraction through element-wise ops",
            )
        out.append((softmax, why))
    return out


def flash_attention(G: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``G`` with every materialised attention chain fused into one ``attention`` op.

    The fused node keeps the context node's name (so consumers need no rewiring)
    and its count; its inputs are q and k of each score contraction (two pairs
    for MLA's split scores), then v of the context. ``graph["rewritten"]["flash_attention"]`` lists the
    fused nodes. An additive bias of the scores (an epilogue op's second input made outside the chain) becomes
    an operand after v, read once (attribute ``biases``: how many). A softmax over activation-product scores
    that cannot be fused (a score tensor read twice, a step whose second input is itself a product) is an
    error: FlashAttention would not remove its T×T tensors.
    """
    chains = list(attention_chains(G))
    H = copy_for(G, "flash_attention", tuple(chain[-1] for chain in chains))
    for scores, epilogue, softmax, dropouts, context in chains:
        s_ops, c_op = [G.nodes[n]["op"] for n in scores], G.nodes[context]["op"]
        biases = score_biases(G, epilogue, s_ops[0].parsed.output)
        operands = [axes for s_op in s_ops for axes in s_op.parsed.inputs] + [c_op.parsed.inputs[1], *biases.values()]
        pattern = ", ".join(" ".join(a) for a in operands) + " -> " + " ".join(c_op.parsed.output)
        sizes = {k: v for s_op in s_ops for k, v in s_op.size.items()} | c_op.size
        steps = tuple(G.nodes[n]["op"] for n in [*epilogue, *dropouts])  # their FLOPs are their own rules'
        attrs = {
            "scores": " ".join(s_ops[0].parsed.output),
            "epilogue": steps,
            "causal": s_ops[0].attr("causal"),
            "biases": len(biases),
        }
        norm_op = G.nodes[softmax]["op"]  # what the normalizer's kind says the fused op keeps (a sink)
        attrs.update({a: norm_op.attr(a) for a in kind_of(norm_op).attention_attrs})
        op = Op(
            "attention",
            pattern,
            tuple((a, sizes[a]) for a in parse(pattern).axes),
            c_op.dtype,
            tuple(sorted((k, v) for k, v in attrs.items() if v)),
        )
        sources = (
            tuple(src for n in scores for src in G.nodes[n]["inputs"])
            + (G.nodes[context]["inputs"][1],)
            + tuple(biases)
        )
        H.remove_nodes_from([*scores, *epilogue, softmax, *dropouts])
        H.remove_edges_from(list(H.in_edges(context)))
        H.nodes[context].update(op=op, inputs=sources)
        for src in sources:
            H.add_edge(src, context)
    left = unfused_attention(H)
    if left:
        node, why = left[0]
        raise CostModelError(
            f"flash_attention: graph {G.graph.get('name')!r}: the attention at {node!r} cannot be "
            f"fused ({why}), so its T×T scores would stay; expected scores → element-wise ops "
            "(the scores their first input, any other an additive bias) → softmax → element-wise "
            "ops → context (see docs/tutorial.md)"
        )
    return H


def eager_attention(G: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``G`` whose attention softmaxes run in fp32, as transformers' ``eager`` attention runs them:
    ``softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)``.

    In each attention chain (:func:`attention_chains`) whose softmax is not fp32 already, a ``cast`` to fp32
    goes before the softmax (torch converts the scores first: ``_softmax`` keeps no input), the softmax runs
    and keeps its output in fp32, and a second ``cast`` hands the context the probabilities in the
    activations' dtype, which the context keeps for its backward: two T×T tensors kept (4 + 2 bytes an
    element in bf16) where the unfused chain keeps one (2). The casts are 0 FLOPs, so FLOPs do not change.
    ``graph["rewritten"]["eager_attention"]`` lists the softmaxes rewritten.
    """
    chains = [c for c in attention_chains(G) if G.nodes[c[2]]["op"].dtype != "fp32"]
    H = copy_for(G, "eager_attention", tuple(c[2] for c in chains))
    for _, _, softmax, _, _ in chains:
        data = H.nodes[softmax]
        op, source = data["op"], data["inputs"][0]
        consumer = next(iter(H.successors(softmax)))  # a chain's softmax has one consumer
        common = {k: data[k] for k in ("count", "block") if k in data}
        for name, axes, dtype, src, inputs in (
            (f"{softmax}_fp32", op.parsed.inputs[0], "fp32", op.dtype, (source,)),
            (f"{softmax}_cast", op.parsed.output, op.dtype, "fp32", (softmax,)),
        ):
            text = " ".join(axes)
            cast = Op("cast", f"{text} -> {text}", tuple((a, op.size[a]) for a in axes), dtype, (("source", src),))
            H.add_node(name, op=cast, inputs=inputs, **common)
        H.remove_edge(source, softmax)
        H.add_edge(source, f"{softmax}_fp32")
        H.add_edge(f"{softmax}_fp32", softmax)
        data.update(op=Op(op.kind, op.pattern, op.sizes, "fp32", op.attrs), inputs=(f"{softmax}_fp32",))
        H.remove_edge(softmax, consumer)
        H.add_edge(softmax, f"{softmax}_cast")
        H.add_edge(f"{softmax}_cast", consumer)
        ins = H.nodes[consumer]["inputs"]
        H.nodes[consumer]["inputs"] = tuple(f"{softmax}_cast" if i == softmax else i for i in ins)
    return H


def attention_pass(G: nx.DiGraph, implementation: str) -> nx.DiGraph:
    """The graph an attention implementation runs (see :data:`costmodel.options.policies.ATTENTION`):
    ``eager`` (:func:`eager_attention`), ``sdpa`` and ``flash`` (:func:`flash_attention`), ``unfused`` (``G``)."""
    if implementation == "eager":
        return eager_attention(G)
    return flash_attention(G) if implementation in FUSED_ATTENTION else G


# ---------------------------------------------------------------------------
# A generation's prefill: the last position's logits only


def head(G: nx.DiGraph) -> list[str]:
    """The unembedding and what reads it: the first dense weight matmul after the last repeated block and its
    descendants (none when the graph has no repeated block or no such matmul)."""
    blocks = repeated_blocks(G)
    ops = order(G)
    last = max((i for i, n in enumerate(ops) if any(in_block(n, b) for b in blocks)), default=None)
    if last is None:
        return []
    first = next((n for n in ops[last + 1 :] if weight_use(G.nodes[n]["op"]) == "dense"), None)
    if first is None:
        return []
    return [first, *(n for n in ops if n in nx.descendants(G, first))]


def last_logits(G: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``G`` whose unembedding (:func:`head`) and every op after it run on one position per sequence
    (the sequence length T → 1), as a generation's prefill does: transformers' ``generate`` asks for the last
    position's logits only (``logits_to_keep=1``), so the vocabulary-wide tensors are B × V, not B × T × V.
    ``graph["rewritten"]["last_logits"]`` lists the ops rewritten."""
    nodes = head(G)
    H = copy_for(G, "last_logits", tuple(nodes))
    for n in nodes:
        H.nodes[n]["op"] = H.nodes[n]["op"].subs({T: 1})
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
    if not kind_of(data["op"]).pointwise:
        return None
    for i, src in enumerate(data["inputs"]):
        sd = G.nodes[src]
        if "op" not in sd or kind_of(sd["op"]).fusion_barrier or list(G.successors(src)) != [node]:
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
    if op.attr("parts"):
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

    >>> from costmodel.kit import GraphBuilder, symbols as s, totals
    >>> b = GraphBuilder("mlp", b=s.B, d=s.d, f=s.d_ff)
    >>> u = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    >>> _ = b.elementwise("relu", "relu", u, "b f")
    >>> G = b.graph
    >>> H = fuse_elementwise(G, training=False)
    >>> totals(G).forward.bytes - totals(H).forward.bytes  # write b×f and read it back, 2 bytes each
    4*B*d_ff
    """
    H = copy_for(G, "fuse_elementwise")
    fused_into: list[str] = []
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
        fused_into.append(node)
    H.graph["rewritten"]["fuse_elementwise"] = tuple(fused_into)
    return H
