"""Inference graphs: the prefill and the per-token decode, rewritten from a model's graph.

*Prefill* runs the forward pass over a prompt of T tokens for B sequences (no
loss). *Decode* produces one token per sequence: every op runs on the one new
position (T → 1) except those that read the KV cache of C tokens (T → C). Which
ops those are is found by data flow from the tensors tagged ``"kv_cache"``, not
by axis names (:func:`decode_graph`): attention's keys, a sliding window of
``min(C, W)`` keys, MLA's per-head expansion of its cached latent.

The step's costs on a device are :mod:`costmodel.sections.decode`.
"""

from __future__ import annotations

import networkx as nx

from ..errors import CostModelError
from ..symbols import C, T
from .analysis import op_nodes
from .pattern import parse
from .registry import Op, data_operands, kind_of, state_bytes, weight_use


def _without_training_ops(G: nx.DiGraph) -> nx.DiGraph:
    H = G.copy()
    H.graph = {**G.graph, "blocks": dict(G.graph.get("blocks", {}))}
    H.remove_nodes_from([n for n, d in op_nodes(G) if kind_of(d["op"]).training_only])
    return H


def prefill_graph(G: nx.DiGraph) -> nx.DiGraph:
    """The forward pass over the prompt (sequence length T), without what only training runs (the loss)."""
    return _without_training_ops(G)


def _key_axes(G: nx.DiGraph) -> dict[str, set[str]]:
    """For each op node, the axis names that index KV-cache positions in one decode step.

    Found by data flow from the ``"kv_cache"``-tagged tensors, not by axis name: a
    tagged tensor, as its consumers read it, is the cache, so its T-sized axes are
    key positions. An operand axis inherits the mark of the producer's output axis
    in the same place (by position; by name where the shapes differ). In an op, an
    axis is a key position if some operand marks it and no operand has it as a
    T-sized unmarked (query) axis; a new T-sized output axis of an op that reads key
    positions is one too (a window unfold ``s -> t w``: the query wins at the
    scores, where ``t`` meets the query; the unfold, a view that moves no bytes,
    keeps ``t`` sized C). Once a contraction sums the key axes away
    (the context), what follows runs on the new token only.
    """
    marks: dict[str, set[str]] = {}  # node → its key axes
    # node → the mark of each output position, for consumers: 0 none, 1 made from key positions (a window's
    # unfold), 2 the cache's own positions
    out_marks: dict[str, tuple[int, ...]] = {}
    for name in nx.topological_sort(G):
        data = G.nodes[name]
        op = data.get("op")
        if op is None:
            continue
        p = op.parsed
        cached: set[str] = set()
        made: set[str] = set()
        query: set[str] = set()
        for axes, src in zip(p.inputs, data["inputs"]):
            flags = out_marks.get(src)
            src_op = G.nodes[src].get("op")
            if flags is None or src_op is None:
                flags = (0,) * len(axes)
            elif len(flags) != len(axes):  # a different shape: match axis names
                by_name = dict(zip(src_op.parsed.output, flags))
                flags = tuple(by_name.get(a, 0) for a in axes)
            for a, mark in zip(axes, flags):
                (cached if mark == 2 else made if mark == 1 else query).add(a)
        # the cache's positions stay key positions wherever they meet (a bias over query × key positions,
        # T5's, has them unmarked); an axis made from them yields to a query axis of the same name
        keys = cached | {a for a in made if a not in query or not op.size[a].has(T)}
        if keys:
            inputs = set().union(*p.inputs)
            keys |= {a for a in p.output if a not in inputs and op.size[a].has(T)}
        marks[name] = keys
        if "kv_cache" in data.get("tags", ()):
            out_marks[name] = tuple(2 * bool(op.size[a].has(T)) for a in p.output)
        else:
            out_marks[name] = tuple(2 if a in cached else int(a in keys) for a in p.output)
    return marks


def _precomputed(G: nx.DiGraph) -> list[str]:
    """Op nodes that depend on no graph input sized by T: run once per sequence before decoding (an encoder,
    and the cross-attention keys and values made from its output), then read from memory by each step."""
    fresh: set[str] = set()
    for name in nx.topological_sort(G):
        data = G.nodes[name]
        op = data.get("op")
        if op is None:
            continue
        for axes, src in zip(data_operands(op), data["inputs"]):
            if src in fresh or ("op" not in G.nodes[src] and any(op.size[a].has(T) for a in axes)):
                fresh.add(name)
                break
    return [n for n, _ in op_nodes(G) if n not in fresh]


def _fresh(name: str, taken: set[str]) -> str:
    n, i = name, 2
    while n in taken:
        n, i = f"{name}{i}", i + 1
    return n


def _rewire(H: nx.DiGraph, node: str) -> None:
    """Make ``node``'s in-edges those of its ``inputs``."""
    H.remove_edges_from(list(H.in_edges(node)))
    H.add_edges_from((src, node) for src in H.nodes[node]["inputs"])


def _absorb(H: nx.DiGraph, marks: dict[str, set[str]]) -> None:
    """Fold each per-head expansion of a cached latent into the other side of attention (in place).

    A weight matmul ``M: X, W -> Y`` that runs over the cached positions (MLA's
    ``kv_b_k``, ``kv_b_v``) and whose only consumer is an attention contraction
    ``S`` is moved off the cache: where ``S`` contracts an axis ``W`` made
    (``q·(c W_k)ᵀ = (q W_kᵀ)·cᵀ``), ``M`` becomes a matmul of the query before
    ``S``; where ``S`` keeps it (``p·(c W_v) = (p·c) W_v``), a matmul of the
    output after ``S``. Either way ``M`` runs on the new token and ``S`` reads the
    latent ``X`` itself. ``M`` keeps its name, weight and parameters.
    """
    for m in [n for n, d in H.nodes(data=True) if "op" in d]:
        d = H.nodes[m]
        M = d["op"]
        consumers = list(H.successors(m))
        if (
            weight_use(M) != "dense"
            or M.attr("parts")
            or not marks[m]
            or M.attr("tied")
            or M.attr("bias")
            or len(consumers) != 1
        ):
            continue
        s = consumers[0]
        S = H.nodes[s]["op"]
        ins = list(H.nodes[s]["inputs"])
        reads_cache = kind_of(S).cache_operands
        if reads_cache is None or ins.count(m) != 1:
            continue
        j = ins.index(m)
        (X, W), Y = M.parsed.inputs, M.parsed.output
        M_input = d["inputs"][0]
        operands, Z = list(S.parsed.inputs), S.parsed.output
        cache_operands = reads_cache(S)
        if len(operands[j]) != len(Y) or j not in cache_operands:
            continue  # not read as a key or value operand
        to_s = dict(zip(Y, operands[j]))
        taken = set(S.parsed.axes)
        for a in (*X, *W):
            if a not in to_s:
                to_s[a] = _fresh(a, taken)
                taken.add(to_s[a])
        x, w = [to_s[a] for a in X], [to_s[a] for a in W]
        made = [to_s[a] for a in W if a in Y and a not in X]  # the axes the weight expands to (h k)
        partner = cache_operands[j]  # the query operand contracted with it (None: a value)
        latent = [to_s[a] for a in W if a in X and a not in Y]
        pre = [a for a in made if a not in Z]
        post = [a for a in made if a in Z and not any(a in o for i, o in enumerate(operands) if i != j)]
        sizes = {**S.size, **{to_s[a]: v for a, v in M.size.items()}}
        if pre and not post and partner is not None and all(a in operands[partner] for a in pre):
            q = operands[partner]
            q_new = [a for a in q if a not in pre[1:]]
            q_new = [latent[0] if a == pre[0] else a for a in q_new] + latent[1:]
            new_m = f"{' '.join(q)}, {' '.join(w)} -> {' '.join(q_new)}"
            operands[partner], operands[j] = q_new, x
            new_s = f"{', '.join(' '.join(o) for o in operands)} -> {' '.join(Z)}"
            d["inputs"] = (ins[partner],)
            ins[partner], ins[j] = m, M_input
        elif post and not pre:
            z_new = [a for a in Z if a not in post[1:]]
            z_new = [latent[0] if a == post[0] else a for a in z_new] + latent[1:]
            new_m = f"{' '.join(z_new)}, {' '.join(w)} -> {' '.join(Z)}"
            operands[j] = x
            new_s = f"{', '.join(' '.join(o) for o in operands)} -> {' '.join(z_new)}"
            ins[j] = M_input
            for n in list(H.successors(s)):
                H.nodes[n]["inputs"] = tuple(m if i == s else i for i in H.nodes[n]["inputs"])
                _rewire(H, n)
            d["inputs"] = (s,)
        else:
            continue
        H.nodes[s]["inputs"] = tuple(ins)
        _rewire(H, s)
        _rewire(H, m)
        d["op"] = Op("matmul", new_m, tuple((a, sizes[a]) for a in parse(new_m).axes), M.dtype, M.attrs)
        attrs = dict(S.attrs)
        if kind_of(S).dedupes_inputs:  # a fused kernel reads a tensor it is given twice (k and v) once
            attrs["repeats"] = tuple(i for i, src in enumerate(ins) if src in ins[:i])
        H.nodes[s]["op"] = Op(
            S.kind,
            new_s,
            tuple((a, sizes[a]) for a in parse(new_s).axes),
            S.dtype,
            tuple(sorted((k, v) for k, v in attrs.items() if v)),
        )
        marks[m] = set()  # S keeps its key axes: the latent's positions are the expansion's


def _ops(value: object) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(p, Op) for p in value)


def decode_graph(G: nx.DiGraph, *, expected_experts: bool = False) -> nx.DiGraph:
    """One decode step: each sequence computes one new token and reads C cached positions.

    Which sizes are "the new token" (T → 1) and which are "the cached positions"
    (T → C) is decided per op by data flow from the ``"kv_cache"``-tagged tensors
    (see :func:`_key_axes`), not by axis names: an op downstream of a cached
    tensor, before the contraction that sums the positions away, runs over C
    positions; every other op over the one new token. Ops that depend on no input sized by T (an
    encoder over its T_src source tokens, the cross-attention keys and values made from its output) ran
    once before decoding: a step does not run them, it reads their outputs. A sliding window's key axis
    ``w = min(T, W)`` becomes ``min(C, W)``. Causal masking no longer applies (the
    one query sees every cached key).

    Convention for a cache that is expanded before attention (MLA keeps a latent
    and expands it per head with ``kv_b_k``/``kv_b_v``): the expansion is
    *absorbed* (:func:`_absorb`), as DeepSeek's inference does, so attention reads
    the cached latent itself and the up-projections run on the one new token
    (scores 2·B·h·C·(r_kv + d_rope), context 2·B·h·C·r_kv FLOPs per layer). Under
    FlashAttention (:func:`costmodel.graph.passes.flash_attention`) the bytes of a step
    that grow with B·C are then exactly :func:`kv_cache_bytes`. A weight matmul
    over cached positions that cannot be absorbed (a bias, several consumers) is
    counted as the graph says, over all C positions each step.

    An op whose kind keeps a recurrent state (``state_bytes``: a state-space model's causal convolution
    and selective scan) runs on the new token and reads and writes its state (attribute ``decode=True``):
    its bytes do not grow with C.

    ``expected_experts``: each routed expert matmul reads the weights of the experts the step's B tokens are
    expected to touch, E·(1 − (1 − k/E)^B) of them (:func:`~costmodel.graph.composite.experts_touched`), not all
    E: a step of one sequence reads k. The bytes are then not affine in B. Without it (the default) every
    expert's weights are read, the large-batch limit; the serving step (:mod:`costmodel.serving.step`) carries
    the touched experts as a symbol of its own instead.
    """
    H = _without_training_ops(G)
    for name in _precomputed(H):  # no longer an op of the step: a tensor it reads, like a graph input
        del H.nodes[name]["op"]
    marks = _key_axes(H)
    _absorb(H, marks)

    def decoded(op: Op, keys: set[str]) -> Op:
        sizes = tuple((axis, size.subs(T, C if axis in keys else 1)) for axis, size in op.sizes)
        attrs = tuple(
            (k, tuple(decoded(p, keys) for p in v) if _ops(v) else v)  # fused parts, epilogue steps
            for k, v in op.attrs
            if k != "causal"
        )
        step = Op(op.kind, op.pattern, sizes, op.dtype, attrs)
        if expected_experts and weight_use(op) == "routed":
            step = step.with_attrs(expected_experts=True)  # the experts B tokens touch, not all of them
        return step.with_attrs(decode=True) if state_bytes(op) != 0 else step  # it reads and writes its state

    for name, data in op_nodes(H):
        data["op"] = decoded(data["op"], marks[name])
    if not any(marks.values()) and not any(state_bytes(data["op"]) != 0 for _, data in op_nodes(H)):
        raise CostModelError(
            f"decode: graph {G.graph.get('name')!r} has no op reading the KV cache and keeps no "
            "recurrent state (an encoder with bidirectional attention, BERT's or ViT's, has none: it "
            "does not decode token by token); expected tensors tagged 'kv_cache' "
            "(GraphBuilder.tag(k, 'kv_cache')) that attention reads over a position axis sized by T "
            "(e.g. keys 'b h s k'), or ops that keep a recurrent state (conv, scan)"
        )
    H.graph["passes"] = (*G.graph.get("passes", ()), "decode")
    return H
