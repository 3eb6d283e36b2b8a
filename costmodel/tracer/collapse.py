"""When the traces at several fixed T differ in structure: ops summed by kind and shape, and fitted in T.

A module that loops over positions in Python (an SSM's or a recurrent model's per-token scan, a chunked scan
over T/chunk chunks) exports at a fixed T into a graph whose op count grows with T, so no one symbolic graph
op by op describes every T (:func:`~.across.structure_difference`). Its costs are still exact sums, and the
loop repeats the same ops: :func:`collapse` merges the ops of one written trace that are one op (same kind,
pattern up to axis names, sizes, dtype and attributes) into one node whose ``count`` is how many there were
(a ``cat``'s or ``stack``'s operands that are one tensor shape are read as one operand with an axis of their
number). The collapsed traces at several T then have one structure, entry by entry, and :func:`fit_collapsed`
fits every entry's sizes and count exactly in T (:func:`~.across.fit_values`) and checks them at the T the
fit did not see: the graph's totals (FLOPs of each kind, bytes, parameters, bytes kept for backward) are then
exact polynomials in T at every fitted and checked T.

What it gives up: the graph keeps one node per distinct op with the first of them's inputs, so data flow
between the loop's iterations is not kept (a peak-memory walk over it is an estimate); the totals are not.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import networkx as nx
import sympy

from ..errors import CostModelError
from ..graph.builder import Tensor
from ..graph.pattern import parse
from ..graph.registry import Op, kind_of
from .across import fit_values
from .ir import AXIS_ATTRS


class Entry:
    """One collapsed node: the ops of one written trace that are one op, and how many (their counts summed)."""

    def __init__(self, node: str, data: dict, op: Op | None, axes: tuple[str, ...], sizes: dict) -> None:
        self.node, self.data, self.op, self.axes, self.sizes = node, data, op, axes, sizes
        self.count = sympy.Integer(0)


def _stacked(op: Op) -> Op:
    """``b n8, b n8, b n8 -> b n3 n8`` (a ``cat`` of a loop's outputs) as ``b k n8 -> b n3 n8`` with k = 3: the
    same bytes read, written and FLOPs (a traced ``torch.cat`` reads each operand once and writes its output
    once, :mod:`.kinds`), and an arity that does not grow with the loop."""
    if op.attr("fn") != "torch.cat" or op.attr("saves"):
        return op
    p = parse(op.pattern)
    if len(p.inputs) < 2 or len(set(p.inputs)) != 1:
        return op
    k = f"k{len(p.inputs)}"
    while k in op.size:
        k += "_"
    first = " ".join(p.inputs[0])
    pattern = f"{k} {first} -> {' '.join(p.output)}"
    return Op(op.kind, pattern, (*op.sizes, (k, sympy.Integer(len(p.inputs)))), op.dtype, op.attrs)


def _canonical(op: Op) -> tuple[tuple, tuple[str, ...]]:
    """The op's structure up to axis names (kind, pattern with axes numbered by first use, dtype, attributes
    without sizes) and its axes in that order."""
    p = parse(op.pattern)
    order: list[str] = []
    for axes in (*p.inputs, p.output):
        order += [a for a in axes if a not in order]
    order += [a for a, _ in op.sizes if a not in order]
    name = {a: f"a{i}" for i, a in enumerate(order)}
    pattern = (
        ", ".join(" ".join(name[a] for a in axes) for axes in p.inputs) + " -> " + " ".join(name[a] for a in p.output)
    )
    attrs = []
    for k, v in op.attrs:
        if k in AXIS_ATTRS and isinstance(v, str):
            v = " ".join(name.get(a, a) for a in v.split())
        elif k == "saves":
            v = tuple(s[:3] for s in v)
        elif k in ("tied", "extra_tied"):  # the node that counts the parameter: named differently at another T
            v = True
        attrs.append((k, v))
    return (op.kind, pattern, op.dtype, tuple(attrs)), tuple(order)


def collapse(G: nx.DiGraph) -> tuple[list[tuple[tuple, Entry]], dict[str, str]]:
    """The op and input nodes of a written trace merged where they are one op, in order of first appearance:
    (structure key, :class:`Entry`), an entry's ``sizes`` holding its axes' sizes and its kept tensors' sizes;
    and each node → the node of its entry."""
    entries: dict[tuple, Entry] = {}
    out: list[tuple[tuple, Entry]] = []
    member: dict[str, str] = {}
    for node, data in G.nodes(data=True):
        op = data.get("op")
        if op is None:  # a graph input: its shape is on the edges it feeds
            tensor = next((d["tensor"] for _, _, d in G.out_edges(node, data=True)), None)
            if tensor is None:
                continue
            axes = tuple(a for a, _ in tensor.sizes)
            key = ("input", len(axes), tensor.dtype, data.get("block", ""))
            sizes = {f"axis {i}": s for i, (_, s) in enumerate(tensor.sizes)}
        else:
            op = _stacked(op)
            key, axes = _canonical(op)
            key = (*key, bool(data.get("embedding")), data.get("block", ""))
            sizes = {f"axis {i}": op.size[a] for i, a in enumerate(axes)}
            for i, s in enumerate(op.attr("saves") or ()):
                if s[1] == "own":
                    sizes[f"kept {i}"] = s[3]
        full = (key, tuple(sizes.values()))
        if full not in entries:
            entries[full] = Entry(node, data, op, axes, sizes)
            out.append((key, entries[full]))
        entries[full].count += sympy.sympify(data.get("count", 1))
        member[node] = entries[full].node
    return out, member


def fit_collapsed(graphs: Sequence[nx.DiGraph], lengths: Sequence[int], samples: int, what: str) -> nx.DiGraph:
    """One graph whose every collapsed entry's sizes and count are fitted exactly in T across ``graphs`` (written
    traces at ``lengths``): the first ``samples`` fit, the rest check. An entry no trace has at another T, or a
    size no polynomial in T reproduces, is an error naming it."""
    collapsed = [collapse(G)[0] for G in graphs]
    keys = [[k for k, _ in c] for c in collapsed]
    for t, other in zip(lengths[1:], keys[1:]):
        if other != keys[0]:
            i = next((i for i, (a, b) in enumerate(zip(keys[0], other)) if a != b), min(len(keys[0]), len(other)))
            first = keys[0][i][0] if i < len(keys[0]) else "none"
            raise CostModelError(
                f"{what}: the ops summed by kind and shape differ between T = {lengths[0]} and T = {t} "
                f"({len(keys[0])} against {len(other)} distinct ops, first at {i}: {first}), so their counts "
                "cannot be fitted in T"
            )
    points = [{"T": t} for t in lengths]
    fitted: list[tuple[Entry, dict, sympy.Expr]] = []
    missing: list[str] = []
    for j, (_, entry) in enumerate(collapsed[0]):
        members = [c[j][1] for c in collapsed]
        sizes = {}
        for label in entry.sizes:
            sizes[label] = fit_values(["T"], points, samples, [m.sizes[label] for m in members])
            if sizes[label] is None:
                missing.append(f"{entry.node} {label}: " + ", ".join(str(m.sizes[label]) for m in members))
        count = fit_values(["T"], points, samples, [m.count for m in members])
        if count is None:
            missing.append(f"{entry.node} count: " + ", ".join(str(m.count) for m in members))
        fitted.append((entry, sizes, count))
    if missing:
        raise CostModelError(
            f"{what}: {len(missing)} size(s) or count(s) of the ops summed by kind and shape are no polynomial in "
            f"T of degree at most 2 at T = {', '.join(map(str, lengths))}: " + "; ".join(missing[:3])
        )
    return _written(graphs[0], collapse(graphs[0])[1], fitted)


def _written(
    first: nx.DiGraph, entry_of: Mapping[str, str], fitted: Sequence[tuple[Entry, Mapping, sympy.Expr]]
) -> nx.DiGraph:
    """The collapsed graph: each entry a node named as its first op, with its fitted op and count, reading what
    its first op read (each producer's entry appears before it: entries are ordered by first appearance)."""
    G = nx.DiGraph()
    G.graph.update(copy.deepcopy(first.graph))
    output: dict[str, Tensor] = {}
    for entry, sizes, count in fitted:
        data = dict(entry.data)
        data["count"] = count
        if entry.op is None:
            shape = tuple((a, sizes[f"axis {i}"]) for i, a in enumerate(entry.axes))
            tensor = next(d["tensor"] for _, _, d in first.out_edges(entry.node, data=True))
            output[entry.node] = Tensor(entry.node, tuple(a for a, _ in shape), shape, tensor.dtype)
            data["inputs"] = ()
            G.add_node(entry.node, **data)
            continue
        op = entry.op
        new_sizes = tuple((a, sizes[f"axis {entry.axes.index(a)}"]) for a, _ in op.sizes)
        attrs = []
        kept = iter(sizes[k] for k in sizes if k.startswith("kept"))
        for k, v in op.attrs:
            if k == "saves":
                v = tuple((*s[:3], next(kept)) if s[1] == "own" else s for s in v)
            elif k in ("tied", "extra_tied"):
                v = entry_of.get(v, v)
            attrs.append((k, v))
        op = Op(op.kind, op.pattern, new_sizes, op.dtype, tuple(attrs))
        inputs = tuple(entry_of.get(src, src) for src in entry.data.get("inputs", ()))
        if op.pattern != entry.data["op"].pattern:  # a stack read as one operand: its first tensor's entry
            inputs = inputs[:1]
        data["op"], data["inputs"] = op, inputs
        G.add_node(entry.node, **data)
        size = op.size
        out_axes = parse(op.pattern).output
        output[entry.node] = Tensor(
            entry.node, out_axes, tuple((a, size[a]) for a in out_axes), kind_of(op).output_dtype(op)
        )
        for src in inputs:
            if src in output:
                G.add_edge(src, entry.node, tensor=output[src])
    return G
