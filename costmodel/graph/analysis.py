"""Analyses: free functions of an op graph.

They read the node attributes the builder writes (``op``, ``count``, ``block``,
``inputs``, ``embedding``) and return sympy expressions, exact until a number is
substituted with :func:`evaluate`.
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import sympy

from ..errors import CostModelError
from ..formulas.compiled import Text, verbatim
from ..options import Counting
from ..symbols import B, T, symbol
from .cost import Cost, OpCost
from .printing import cost_latex
from .registry import op_cost


def op_nodes(G: nx.DiGraph) -> Iterator[tuple[str, dict]]:
    """The nodes that carry an op (graph inputs carry none), in insertion order."""
    for name, data in G.nodes(data=True):
        if "op" in data:
            yield name, data


def node_cost(G: nx.DiGraph, name: str, counting: Counting = Counting()) -> OpCost:
    """The cost of one run of the op at node ``name`` (not multiplied by its count)."""
    return op_cost(G.nodes[name]["op"], counting)


@dataclass(frozen=True)
class Totals:
    """What one step of a graph costs, summed over its ops × their counts."""

    params: sympy.Expr
    params_embedding: sympy.Expr
    forward: Cost
    backward: Cost
    params_active: sympy.Expr | None = None  # parameters one token uses (MoE: top_k of n_experts)

    @property
    def params_non_embedding(self) -> sympy.Expr:
        return sympy.expand(self.params - self.params_embedding)

    @property
    def params_active_non_embedding(self) -> sympy.Expr:
        """Active parameters without the embedding tables (the N of 6·N·D for a mixture of experts)."""
        active = self.params if self.params_active is None else self.params_active
        return sympy.expand(active - self.params_embedding)

    @property
    def training(self) -> Cost:
        return self.forward + self.backward

    def _repr_latex_(self) -> str:  # Jupyter
        return cost_latex(
            {
                "params": self.params,
                "params (embedding)": self.params_embedding,
                "flops (forward)": self.forward.flops,
                "flops (backward)": self.backward.flops,
            }
        )

    def map(self, fn) -> Totals:
        return Totals(
            fn(self.params),
            fn(self.params_embedding),
            self.forward.map(fn),
            self.backward.map(fn),
            None if self.params_active is None else fn(self.params_active),
        )


def totals(G: nx.DiGraph, counting: Counting = Counting()) -> Totals:
    """Parameters and forward and backward costs of one step of ``G``, summed once over its ops × counts.

    (Bytes saved for backward are the memory layer's: :func:`costmodel.memory.activations.activations`.)

    >>> from costmodel.kit import GraphBuilder, totals, symbols as s
    >>> b = GraphBuilder("one", b=s.B, d=s.d)
    >>> x = b.input("x", "b d", dtype="bf16")
    >>> _ = b.matmul("w", x, "b d, d e -> b e", e=s.d)
    >>> t = totals(b.graph)
    >>> t.forward.matmul_flops, t.backward.matmul_flops, t.params
    (2*B*d**2, 4*B*d**2, d**2)
    """
    groups: Counter = Counter()  # equal ops (unrolled identical layers) multiplied once: expanded, the same sums
    for _, data in op_nodes(G):
        groups[data["op"], data["count"], bool(data.get("embedding"))] += 1  # an op hashes faster than its cost
    params, emb, active, fwd, bwd = [], [], [], [], []
    for (op, count, embedding), n in groups.items():
        cost, count = op_cost(op, counting), count * n
        fwd.append(cost.forward * count)
        bwd.append(cost.backward * count)
        params.append(cost.params * count)
        active.append(cost.active_params * count)
        if embedding:
            emb.append(cost.params * count)
    return Totals(sympy.Add(*params), sympy.Add(*emb), add_costs(fwd), add_costs(bwd), sympy.Add(*active)).map(
        sympy.expand
    )


def parameters(G: nx.DiGraph) -> tuple[sympy.Expr, sympy.Expr]:
    """(parameters, active parameters) of ``G``: :func:`totals`' ``params`` and ``params_active`` without the FLOPs
    and bytes of both passes (a catalogue of every preset needs only the counts; expanding the costs was most of
    ``costmodel models``).

    >>> from costmodel.kit import GraphBuilder, symbols as s
    >>> b = GraphBuilder("one", b=s.B, d=s.d)
    >>> _ = b.matmul("w", b.input("x", "b d", dtype="bf16"), "b d, d e -> b e", e=s.d)
    >>> parameters(b.graph)
    (d**2, d**2)
    """
    groups: Counter = Counter()
    for _, data in op_nodes(G):
        groups[data["op"], data["count"]] += 1
    params, active = [], []
    for (op, count), n in groups.items():
        cost = op_cost(op)
        params.append(cost.params * count * n)
        active.append(cost.active_params * count * n)
    return sympy.expand(sympy.Add(*params)), sympy.expand(sympy.Add(*active))


def tokens_per_step(G: nx.DiGraph) -> sympy.Expr:
    """The tokens one step of ``G`` processes: ``graph["tokens"]`` when the builder says
    (:meth:`GraphBuilder.tokens`), else B sequences of T tokens."""
    return G.graph.get("tokens", B * T)


def add_costs(costs: list[Cost]) -> Cost:
    """The sum of many costs, each field summed once (``Add(*terms)``: linear in the number of terms)."""
    return Cost(*(sympy.Add(*(getattr(c, f) for c in costs)) for f in Cost.__dataclass_fields__))


@dataclass(frozen=True)
class Row:
    """Costs of one op or block in a step: both passes and parameters, times the runs per step."""

    forward: Cost
    backward: Cost
    params: sympy.Expr
    active_params: sympy.Expr

    @property
    def training(self) -> Cost:
        return self.forward + self.backward


def breakdown(G: nx.DiGraph, counting: Counting = Counting(), by: str = "op") -> dict[str, Row]:
    """Costs per op (``by="op"``) or per enclosing block (``by="block"``), times counts.

    Dotted node names give the blocks: ``layers.attn.wq`` is in ``layers.attn``.
    """
    if by not in ("op", "block"):
        raise CostModelError(f"breakdown: by must be 'op' or 'block', received {by!r}")
    rows: dict[str, Row] = {}
    for name, data in op_nodes(G):
        c, n = op_cost(data["op"], counting), data["count"]
        key = name if by == "op" else (data["block"] or "(top)")
        scaled = Row(c.forward * n, c.backward * n, c.params * n, c.active_params * n)
        if key in rows:
            prev = rows[key]
            scaled = Row(
                prev.forward + scaled.forward,
                prev.backward + scaled.backward,
                prev.params + scaled.params,
                prev.active_params + scaled.active_params,
            )
        rows[key] = scaled
    return rows


def subgraph_cost(G: nx.DiGraph, prefix: str, counting: Counting = Counting()) -> Cost:
    """Forward cost of every op whose dotted name starts with ``prefix`` (× counts).

    The intensity of a subgraph is ``subgraph_cost(G, "layers.mlp").intensity``:

    >>> from costmodel import load
    >>> from costmodel.symbols import B
    >>> mlp = subgraph_cost(load("gpt").graph, "layers.mlp")
    >>> leading_term(mlp.intensity, B)  # O(d) FLOPs per byte once the batch amortises the weights
    2*d/5 + 11/10
    """
    nodes = [(n, d) for n, d in op_nodes(G) if n == prefix or n.startswith(prefix + ".")]
    if not nodes:
        raise CostModelError(f"no op or block named {prefix!r} in graph {G.graph.get('name')!r}")
    return add_costs([op_cost(d["op"], counting).forward * d["count"] for _, d in nodes]).simplify()


def intensity(cost: Cost) -> sympy.Expr:
    """Arithmetic intensity (FLOPs per byte) of a cost record."""
    return cost.intensity


def leading_term(expr: sympy.Expr, sym: sympy.Symbol | str, point: object = sympy.oo) -> sympy.Expr:
    """The dominant term of ``expr`` as ``sym`` → ``point`` (∞ by default, or 0).

    >>> from costmodel.symbols import B, d
    >>> leading_term(2*B*d**2 / (2*B*d + 2*d**2), B)
    d
    >>> leading_term(2*B*d**2 / (2*B*d + 2*d**2), B, 0)
    B
    """
    s = symbol(sym) if isinstance(sym, str) else sym
    x = sympy.Dummy("x", positive=True)
    if point in (sympy.oo, "oo", float("inf")):
        return sympy.simplify(expr.subs(s, 1 / x).as_leading_term(x).subs(x, 1 / s))
    if point in (0, sympy.Integer(0)):
        return sympy.simplify(expr.subs(s, x).as_leading_term(x).subs(x, s))
    raise CostModelError(f"leading_term: point must be oo or 0, received {point!r}")


def limit(expr: sympy.Expr, sym: sympy.Symbol | str, point: object = sympy.oo) -> sympy.Expr:
    """``lim expr`` as ``sym`` → ``point``."""
    s = symbol(sym) if isinstance(sym, str) else sym
    return sympy.limit(expr, s, point)


def evaluate(expr: sympy.Expr, values: Mapping[object, object], what: str = "expression") -> sympy.Rational:
    """Substitute numbers for symbols and return an exact sympy number.

    Every free symbol must get a value; a symbol left over is an error, never a
    silently symbolic "number".
    """
    subs = {symbol(k) if isinstance(k, str) else k: v for k, v in values.items()}
    expr = sympy.Integer(expr) if isinstance(expr, int) else expr
    result = expr.xreplace({k: sympy.Integer(v) if isinstance(v, int) else v for k, v in subs.items()})
    if result.has(sympy.Float):
        raise CostModelError(f"cannot evaluate {what}: a value is a float; expected exact integers or rationals")
    free = sorted(map(str, result.free_symbols))
    if free:
        raise CostModelError(
            f"cannot evaluate {what}: no value for {', '.join(free)}; "
            f"expected values for every symbol, received {sorted(map(str, subs))}"
        )
    return sympy.Rational(result)


def as_int(value: sympy.Expr, what: str) -> int:
    """An exact Python int, or an error if ``value`` is not a whole number."""
    v = sympy.Rational(value)
    if v.q != 1:
        raise CostModelError(f"{what} is not a whole number: {v}")
    return int(v.p)


@functools.lru_cache(maxsize=4096)
def _whole_and_positive(size: sympy.Expr) -> sympy.Basic:
    """The relation "``size`` is a positive whole number", simplified where sympy can decide a part."""
    num, den = sympy.fraction(sympy.together(size))
    whole = sympy.true if den == 1 and not size.has(sympy.Min, sympy.Max) else sympy.Eq(sympy.Mod(size, 1), 0)
    positive = sympy.true if size.is_positive else size > 0
    return sympy.And(whole, positive)


def value_checks(G: nx.DiGraph) -> list[tuple[sympy.Basic, Text]]:
    """What every config of ``G`` must satisfy, as (relation, message) pairs, in the order they are checked.

    Every axis of every op must come out a positive whole number: this is where "heads must divide d" is
    caught, for any architecture (the head axis of ``d h k`` is sized ``d/h``, and 768/7 is not a size).
    Block counts must come out positive whole numbers too (``L - L_dense`` MoE layers needs ``L > L_dense``),
    a token is routed to at most as many experts as there are, and the graph's declared constraints hold.
    """
    out: list[tuple[sympy.Basic, Text]] = []
    seen: set = set()

    def fresh(relation: sympy.Basic) -> bool:
        # a message is written only for a relation kept: printing one per axis of every op was most of this
        if relation is sympy.true or relation in seen:
            return False
        seen.add(relation)
        return True

    for block, count in G.graph.get("blocks", {}).items():
        count = sympy.sympify(count)
        if fresh(relation := _whole_and_positive(count)):
            message = verbatim(f"block {block!r}: count {count} = ") + "{value} is not a positive whole number; "
            out.append((relation, Text(message + "check the settings it is made of", {"value": count})))
    for name, data in op_nodes(G):
        op = data["op"]
        for axis, size in op.sizes:
            if fresh(relation := _whole_and_positive(size)):
                message = (
                    verbatim(f"op {name!r}: axis {axis!r} = {size} = ")
                    + "{value}"
                    + verbatim(
                        f" is not a positive whole number (pattern {op.pattern!r}); check that the sizes divide evenly"
                    )
                )
                out.append((relation, Text(message, {"value": size})))
        experts, route = op.attr("experts"), op.attr("route")
        if experts and route:  # a token cannot be routed to more experts than there are
            k, e = (op.size[str(a)] for a in (route, experts))
            if fresh(relation := sympy.Le(k, e)):
                message = (
                    verbatim(f"op {name!r}: routes each token to {route!r} = ")
                    + "{k}"
                    + verbatim(f" experts of {experts!r} = ")
                    + "{e}; expected at most as many as there are"
                )
                out.append((relation, Text(message, {"k": k, "e": e})))
    for condition, why in G.graph.get("constraints", ()):
        names = sorted(condition.free_symbols, key=str)
        if fresh(condition):
            message = verbatim(f"graph {G.graph.get('name')!r}: {why}: {condition} fails with ") + ", ".join(
                f"{s} = {{{s}}}" for s in names
            )
            out.append((condition, Text(message)))
    return out


def check_values(G: nx.DiGraph, values: Mapping[sympy.Symbol, object]) -> None:
    """Raise the message of the first of :func:`value_checks` that ``values`` break. A relation that still
    has symbols without a value is not decided here (``evaluate`` names every missing symbol at once)."""
    subs = {k: sympy.Integer(v) if isinstance(v, int) else v for k, v in values.items()}
    names = {str(k): v for k, v in subs.items()}
    for relation, message in value_checks(G):
        if relation.xreplace(subs) is sympy.false:
            fields = {n: e.xreplace(subs) for n, e in message.fields.items()}
            raise CostModelError(message.fill(names, {}, {n: as_fraction(v) for n, v in fields.items()}))


def as_fraction(v: sympy.Expr) -> object:
    """A sympy number as a Python int or Fraction (for messages and cached formulas)."""
    r = sympy.Rational(v)
    return int(r.p) if r.q == 1 else Fraction(int(r.p), int(r.q))


# ---------------------------------------------------------------------------
# Structure: orderings and repeated blocks


@dataclass(frozen=True)
class Structure:
    """The orderings and repeated blocks of a graph, computed once per graph (:func:`structure`).

    ``ops``: op nodes in topological order; ``blocks``: the outermost repeated blocks (count ≠ 1) → count;
    ``block_of``: each node → its outermost repeated block (absent: outside every one); ``members``: each
    block → its op nodes in order; ``first_block``: the position in ``ops`` of the first op in a block;
    ``position``: each op node → its index in ``ops``.
    """

    ops: list[str]
    blocks: dict[str, sympy.Expr]
    block_of: dict[str, str]
    members: dict[str, list[str]]
    first_block: int
    position: dict[str, int]

    def stage(self, node: str) -> str:
        """``"block"`` for a node in a repeated block, else ``"first"`` (before it) or ``"last"`` (after it)."""
        if node in self.block_of:
            return "block"
        position = self.position.get(node)
        return "first" if position is None or position < self.first_block else "last"


_structures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def structure(G: nx.DiGraph) -> Structure:
    """The :class:`Structure` of ``G``, cached per graph object and recomputed when nodes or edges change
    (graphs are built once and rewritten into copies; a sort per query made analyses quadratic in the ops)."""
    # networkx's number_of_edges() walks a degree view (slow Python per node); the adjacency dict's lengths give
    # the same count at C speed, and this check runs once per query (thousands per derivation)
    signature = (len(G._adj), sum(map(len, G._adj.values())))
    got = _structures.get(G)
    if got is not None and got[0] == signature:
        return got[1]
    index = {n: i for i, n in enumerate(G.nodes)}
    ops = [n for n in nx.lexicographical_topological_sort(G, key=index.__getitem__) if "op" in G.nodes[n]]
    declared = G.graph.get("blocks", {})
    blocks: dict[str, sympy.Expr] = {}
    for name in sorted(declared, key=lambda b: b.count(".")):
        parts = name.split(".")  # nested in a block already kept: one of its dotted prefixes is one (not a scan)
        if declared[name] != 1 and not any(".".join(parts[:i]) in blocks for i in range(1, len(parts))):
            blocks[name] = declared[name]
    block_of: dict[str, str] = {}
    for node in G.nodes:
        parts = node.split(".")
        for i in range(1, len(parts)):  # the outermost enclosing block: the shortest prefix
            prefix = ".".join(parts[:i])
            if prefix in blocks:
                block_of[node] = prefix
                break
    members: dict[str, list[str]] = {b: [] for b in blocks}
    for n in ops:
        if n in block_of:
            members[block_of[n]].append(n)
    first = next((i for i, n in enumerate(ops) if n in block_of), len(ops))
    s = Structure(ops, blocks, block_of, members, first, {n: i for i, n in enumerate(ops)})
    _structures[G] = (signature, s)
    return s


def order(G: nx.DiGraph) -> list[str]:
    """Op nodes in a topological order that follows insertion order where it can."""
    return list(structure(G).ops)


def repeated_blocks(G: nx.DiGraph) -> dict[str, sympy.Expr]:
    """The outermost repeated blocks (count ≠ 1) of ``G``: block → count."""
    return dict(structure(G).blocks)


def in_block(node: str, block: str) -> bool:
    """Whether ``node`` sits inside ``block`` (dotted names: ``layers.attn.q`` is in ``layers``)."""
    return node.startswith(block + ".")
