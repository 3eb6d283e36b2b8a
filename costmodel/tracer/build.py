"""Write a traced graph with :class:`~costmodel.graph.builder.GraphBuilder`: the same node attributes as any
family's graph, so every analysis reads it.

Besides the ops, three things are written here: folded layers as ``repeat`` blocks (their nodes carry the
count), the ``shared`` mark on tensors every repetition of a block reads the same (see :mod:`.fold`), and
the ``kv_cache`` tag on the tensors an inference cache would keep: each attention's keys and values,
followed back from the attention through views, layout copies and head repetition (``repeat_kv``) to the
op that computes them (after RoPE, as transformers caches them), or to the slice of a fused q/k/v
projection that holds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import networkx as nx
import sympy

from ..graph.builder import GraphBuilder, Tensor
from ..graph.passes import attention_chains
from ..graph.registry import kind_of
from .fold import Plan, Run
from .ir import AXIS_ATTRS, UNIT, Namer, TInput, TOp, named_freely, order_of, pattern_of


class Writer:
    """Emits a :class:`~.fold.Plan` of traced items into one GraphBuilder."""

    def __init__(
        self, name: str, dtype: str, alias: Mapping[str, str], plan: Plan, frozen: Callable[[str], bool]
    ) -> None:
        self.b = GraphBuilder(name, dtype=dtype)
        self.namer = Namer()
        self.alias, self.plan, self.frozen = alias, plan, frozen
        self.tensors: dict[str, Tensor] = {}
        self.node_of: dict[str, str] = {}  # fx node → graph node
        self.item_of: dict[str, object] = {}  # graph node → traced item
        self.owner: dict[str, str] = {}  # parameter → the graph node that counts it
        self.names: set[str] = set()
        self.path: list[str] = []

    def resolve(self, fx: str) -> str:
        while fx in self.alias or fx in self.plan.rep_of:
            fx = self.alias.get(fx) or self.plan.rep_of[fx]
        return fx

    def _local(self, item, prefix: str) -> str:
        module = item.module[len(prefix) :] if prefix and item.module.startswith(prefix) else item.module
        if prefix and item.module == prefix.rstrip("."):
            module = ""
        base = ".".join(p for p in (module, item.hint or "op") if p)
        name, k = base, 2
        while ".".join([*self.path, name]) in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(".".join([*self.path, name]))
        return name

    def emit(self, item, prefix: str = "") -> None:
        local = self._local(item, prefix)
        if isinstance(item, TInput):
            names = self.namer.rename(list(item.dims), item.sizes)
            pattern = " ".join(names[d] for d in item.dims) or UNIT
            t = self.b.input(
                local,
                pattern,
                dtype=item.dtype,
                **{names[d]: item.sizes[d] for d in item.dims},
                **({} if item.dims else {UNIT: 1}),
            )
        else:
            t = self._op(item, local)
        self.tensors[item.node] = t
        self.node_of[item.node] = t.node
        self.item_of[t.node] = item

    def _op(self, op: TOp, local: str) -> Tensor:
        names = self.namer.rename_free(op) if named_freely(op.kind) else self.namer.rename(order_of(op), op.sizes)
        pattern = pattern_of(op, names)
        used = {d for o in op.operands for d in o.dims} | set(op.output)
        sizes = {names[d]: op.sizes[d] for d in used}
        if any(not o.dims for o in op.operands):
            sizes[UNIT] = 1
        attrs = dict(op.attrs)
        for key in AXIS_ATTRS:
            if isinstance(attrs.get(key), tuple):  # axis ids (a norm's bias is a flag)
                attrs[key] = " ".join(names[d] for d in attrs[key])
        w = op.weight
        if w is not None:
            if w.source in self.owner:
                attrs["tied"] = self.owner[w.source]
            if self.frozen(w.source):
                attrs["trainable"] = False
        if op.extra_params and all(p in self.owner for p in op.extra_params):
            attrs["extra_tied"] = self.owner[op.extra_params[0]]  # a bias or gain a first use counted already
        inputs = [self.tensors[self.resolve(src)] for src in op.inputs]
        t = self.b.op(local, op.kind, inputs, pattern, dtype=op.dtype, attrs=attrs, **sizes)
        for p in op.owned:
            self.owner.setdefault(p, t.node)
        return t

    def run(self, run: Run) -> None:
        with self.b.repeat(run.block, run.reps):
            self.path.append(run.block)
            for j, (layer, prefix) in enumerate(zip(run.layers, run.prefixes)):
                scope = self.b.scope(f"l{j}") if run.period > 1 else contextlib.nullcontext()
                with scope:
                    if run.period > 1:
                        self.path.append(f"l{j}")
                    for item in layer:
                        self.emit(item, prefix)
                    if run.period > 1:
                        self.path.pop()
            self.path.pop()

    def write(self) -> nx.DiGraph:
        for seg in self.plan.segments:
            if isinstance(seg, Run):
                self.run(seg)
            else:
                self.emit(seg)
        G = self.b.graph
        for fx in self.plan.shared:
            self._mark_shared(G, self.resolve(fx))
        self._tag_kv(G)
        return G

    # -- marks --------------------------------------------------------------------------------------

    def _item(self, fx: str):
        node = self.node_of.get(self.resolve(fx))
        return node, self.item_of.get(node)

    def _mark_shared(self, G: nx.DiGraph, fx: str) -> None:
        """Mark a tensor every repetition reads the same, and the node holding its storage (through views)."""
        node, item = self._item(fx)
        while node is not None and G.nodes[node]["count"] == 1:
            G.nodes[node]["shared"] = True
            op = G.nodes[node].get("op")
            if op is None or not kind_of(op).view(op):
                return
            node, item = self._item(item.inputs[0])

    def _kv_source(self, G: nx.DiGraph, node: str) -> str | None:
        """Back from an attention operand through data movement to the op that computes the tensor."""
        item = self.item_of.get(node)
        while isinstance(item, TOp) and item.passthrough:
            src_node, src = self._item(item.inputs[0])
            if src is None:
                return None
            n_out = sympy.Mul(*(item.sizes[d] for d in item.output))
            dims = src.output if isinstance(src, TOp) else src.dims
            n_src = sympy.Mul(*(src.sizes[d] for d in dims))
            ratio = sympy.simplify(n_out / n_src)
            if ratio.is_number and ratio < 1:
                return node  # a slice of a bigger tensor (a fused q/k/v projection): the slice is the cache
            node, item = src_node, src
        return node if isinstance(item, TOp) else None

    def _tag_kv(self, G: nx.DiGraph) -> None:
        sources: list[str] = []
        for chain in attention_chains(G):
            scores, context = chain[0], chain[-1]
            if len(scores) == 1:
                sources += [G.nodes[scores[0]]["inputs"][1], G.nodes[context]["inputs"][1]]
        for _, data in G.nodes(data=True):
            op = data.get("op")
            if op is not None and kind_of(op).dedupes_inputs and kind_of(op).cache_operands is not None:
                sources += [data["inputs"][j] for j in kind_of(op).cache_operands(op) if j > 0]
        for src in sources:
            found = self._kv_source(G, src)
            if found is not None:
                G.nodes[found].setdefault("tags", set()).add("kv_cache")
