"""Fine-tuning passes: freeze weights, add LoRA adapters, store the frozen base in a 4-bit format (QLoRA).

Both return rewritten copies of a graph (like :mod:`costmodel.graph.passes`). A frozen
weight (``trainable=False``: a matmul's, a routed expert matmul's) computes no weight gradient and, in
:func:`costmodel.memory.states.model_state`, holds no gradient, master copy or
optimizer state. :func:`lora` freezes each chosen matmul and adds the adapter
``y = W x + B (A x)`` of rank ``r`` as two more matmuls and an add, so its
FLOPs, parameters and saved activations are derived like any other op's.
The LoRA scale ``alpha / r`` and adapter dropout are not modelled.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable

import networkx as nx

from ..errors import CostModelError
from .passes import copy_for
from .pattern import check_size, parse
from .registry import Op, has_weight, op_cost, weight_use


def _holds_weights(op: Op) -> bool:
    """A weight operand (matmul, routed matmul, table; tied ones too: no weight gradient) or parameters (norms)."""
    return has_weight(op) or op_cost(op).params != 0


def _matching(G: nx.DiGraph, patterns: Iterable[str], what: str, keep: Callable[[Op], bool]) -> list[str]:
    patterns = list(patterns)
    found = [
        n
        for n, d in G.nodes(data=True)
        if "op" in d
        and keep(d["op"])
        and any(fnmatch.fnmatchcase(n, p) or fnmatch.fnmatchcase(n, "*." + p) for p in patterns)
    ]
    if not found:
        raise CostModelError(
            f"no {what} op matches {patterns} in graph {G.graph.get('name')!r}; "
            f"expected node names such as 'layers.attn.q' or patterns such as '*.q'"
        )
    return found


def freeze(G: nx.DiGraph, patterns: Iterable[str] = ("*",)) -> nx.DiGraph:
    """A copy of ``G`` whose ops matching ``patterns`` (fnmatch on node names) hold frozen weights."""
    found = _matching(G, patterns, "weighted", _holds_weights)
    H = copy_for(G, "freeze", tuple(found))
    for name in found:
        H.nodes[name]["op"] = G.nodes[name]["op"].with_attrs(trainable=False)
    return H


def lora(G: nx.DiGraph, targets: Iterable[str], rank: object, *, freeze_rest: bool = True) -> nx.DiGraph:
    """A copy of ``G`` with LoRA adapters of rank ``rank`` on the matmuls named by ``targets``.

    For a target ``X, W -> Y`` (``W`` = input-side axes ``I`` and output-side
    axes ``O``) it adds ``NAME.lora_a`` (``X, I r -> X∖I r``), ``NAME.lora_b``
    (``X∖I r, r O -> Y``) and ``NAME.lora_add``; consumers of ``NAME`` read the
    sum. ``freeze_rest``: every other weight of the graph is frozen too (the
    usual LoRA fine-tune); otherwise only the targets are.

    >>> from costmodel.kit import GraphBuilder, symbols as s
    >>> b = GraphBuilder("fc", b=s.B, d=s.d, f=s.d_ff)
    >>> _ = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    >>> from costmodel.memory.states import model_state
    >>> model_state(lora(b.graph, ["fc"], 8), "fp32", "sgd")["trainable"]  # A: 8d, B: 8 d_ff
    8*d + 8*d_ff
    """
    r = check_size(rank, "lora: rank")
    found = _matching(G, targets, "dense matmul", lambda op: weight_use(op) == "dense" and op.attr("parts") is None)
    H = copy_for(freeze(G) if freeze_rest else G, "lora", tuple(found))
    for name in found:  # adapters for dense weights
        data = H.nodes[name]
        op = data["op"]
        x, w = op.parsed.inputs
        y = op.parsed.output
        if "r" in op.parsed.axes:
            raise CostModelError(f"lora: op {name!r} already has an axis named 'r' (pattern {op.pattern!r})")
        out_axes = [a for a in w if a in y]
        in_axes = [a for a in w if a not in out_axes]
        mid = [a for a in x if a not in in_axes] + ["r"]
        sizes = {**op.size, "r": r}
        common = {"count": data["count"], "block": data["block"], "embedding": False}
        H.nodes[name]["op"] = op.with_attrs(trainable=False)
        specs = [
            ("lora_a", "matmul", f"{' '.join(x)}, {' '.join(in_axes)} r -> {' '.join(mid)}", (name + "@in",), ()),
            ("lora_b", "matmul", f"{' '.join(mid)}, r {' '.join(out_axes)} -> {' '.join(y)}", (name + ".lora_a",), ()),
            (
                "lora_add",
                "elementwise",
                f"{' '.join(y)}, {' '.join(y)} -> {' '.join(y)}",
                (name, name + ".lora_b"),
                (("fn", "add"),),
            ),
        ]
        consumers = list(H.successors(name))
        for suffix, kind, pattern, inputs, attrs in specs:
            node = f"{name}.{suffix}"
            inputs = tuple(data["inputs"][0] if i == name + "@in" else i for i in inputs)
            new = Op(kind, pattern, tuple((a, sizes[a]) for a in parse(pattern).axes), op.dtype, attrs)
            op_cost(new)  # a bad adapter fails here, where it is made
            H.add_node(node, op=new, inputs=inputs, **common)
            for src in inputs:
                H.add_edge(src, node)
        out = f"{name}.lora_add"
        for c in consumers:
            H.remove_edge(name, c)
            H.add_edge(out, c)
            H.nodes[c]["inputs"] = tuple(out if i == name else i for i in H.nodes[c]["inputs"])
        if "tags" in data:
            H.nodes[out]["tags"] = set(data.pop("tags"))
    return H


def store_frozen(G: nx.DiGraph, fmt: str) -> nx.DiGraph:
    """A copy of ``G`` whose frozen matmul weights inside the repeated blocks are stored in weight format ``fmt``
    (:data:`~costmodel.options.policies.WEIGHT_FORMATS`; QLoRA's base: ``"nf4"``), the op's ``stored`` attribute.

    As bitsandbytes' ``replace_with_bnb_linear`` converts the linear layers of the blocks and leaves the head
    (``lm_head``), the embeddings and the norms in the compute dtype; the adapters train in the compute dtype.
    A weight is dequantised for each matmul that reads it: that bf16 copy lives only while the op runs and is
    not counted.
    """
    found = [
        n
        for n, d in G.nodes(data=True)
        if "op" in d
        and d.get("block")
        and d["op"].attr("trainable") is False
        and weight_use(d["op"]) in ("dense", "routed")
        and not d["op"].attr("tied")
    ]
    if not found:
        raise CostModelError(
            f"base_dtype {fmt!r}: graph {G.graph.get('name')!r} has no frozen matmul weight in its layers to store; "
            "freeze some (lora, freeze)"
        )
    H = copy_for(G, "store_frozen", (fmt, *found))
    for name in found:
        H.nodes[name]["op"] = G.nodes[name]["op"].with_attrs(stored=fmt)
    return H


__all__ = ["freeze", "lora", "store_frozen"]
