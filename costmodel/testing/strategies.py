"""Valid sizes for any model's free symbols, drawn by hypothesis: :func:`sizes`.

A graph says what a config must satisfy (:func:`costmodel.graph.analysis.value_checks`): every axis a positive
whole number (``d/h`` — heads divide the width; ``h/n_kv`` — key/value heads divide the heads), a token routed
to at most as many experts as there are, block counts positive (``L - L_dense``), and the builder's own
``require`` conditions (``T <= T_max``). Filtering random draws by those relations would reject almost every
draw; instead the symbols are drawn one at a time, a denominator before the symbols it must divide, and each
value is the first one at or after a drawn integer (wrapping around its range) that meets every relation whose
symbols are all drawn by then (past the range when nothing in it does: Jamba's L is a multiple of 8). Hypothesis shrinks the drawn integers, so a counterexample shrinks towards the
smallest valid sizes.

hypothesis is imported inside :func:`sizes` only: it is the optional dependency of the ``verify`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from ..errors import CostModelError
from ..families import graph_symbols
from ..graph.analysis import value_checks
from ..symbols import symbol

#: The range each symbol is drawn from unless the caller says (small: a check runs the model at each draw;
#: torch builds a module at each). Any other symbol: :data:`DEFAULT_RANGE`.
RANGES: dict[str, tuple[int, int]] = {
    "B": (1, 4),
    "T": (1, 16),
    "C": (1, 16),
    "T_src": (1, 12),
    "T_max": (1, 32),
    "W": (1, 16),
    "L": (1, 3),
    "L_dec": (1, 3),
    "L_dense": (1, 2),
    "n_experts": (1, 8),
    "top_k": (1, 4),
    "n_shared": (1, 2),
    "c_in": (1, 4),
    "d_conv": (1, 4),
    "r_patch": (1, 4),
    "V": (2, 48),
}
DEFAULT_RANGE = (1, 32)

#: How far past its range a symbol is searched when no value in it meets its relations (Jamba's layers come in
#: periods of 8, L = 8k, beyond the usual 1..3).
BEYOND = 64


def hypothesis_strategies():
    """``hypothesis.strategies``, or an error saying how to install it (the ``verify`` extra)."""
    try:
        from hypothesis import strategies  # deferred: hypothesis is optional (pip install 'costmodel[verify]')
    except ImportError:
        raise CostModelError(
            "checking a model needs hypothesis: pip install 'costmodel[verify]' (and 'costmodel[torch]' for --against)"
        ) from None
    return strategies


def relations(G: nx.DiGraph) -> list[sympy.Basic]:
    """The relations every config of ``G`` must satisfy (those of ``value_checks``, without their messages)."""
    return [relation for relation, _ in value_checks(G)]


def draw_order(G: nx.DiGraph, names: list[str]) -> list[str]:
    """``names`` in the order they are drawn: a symbol in the denominator of an axis size (``h`` of ``d/h``)
    before the symbols of its numerator, so that the numerator can be drawn as a multiple of it."""
    order = nx.DiGraph()
    order.add_nodes_from(names)
    for relation in relations(G):
        for mod in relation.atoms(sympy.Mod):
            num, den = sympy.fraction(sympy.together(mod.args[0]))
            for a in den.free_symbols:
                for b in num.free_symbols:
                    if str(a) in order and str(b) in order and a != b:
                        order.add_edge(str(a), str(b))
    try:
        return list(nx.lexicographical_topological_sort(order, key=lambda n: (names.index(n), n)))
    except nx.NetworkXUnfeasible:  # a cycle of divisibility (d/h and h/d): drawn in name order, searched
        return list(names)


def free_names(G: nx.DiGraph, fixed: Mapping[str, int] = {}) -> list[str]:
    """The names of the symbols a check draws for ``G``: every symbol its sizes and counts use, less ``fixed``."""
    return sorted(str(s) for s in graph_symbols(G) if str(s) not in fixed)


def sizes(
    model: object,
    *,
    fixed: Mapping[str, int] | None = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    extra: tuple[str, ...] = (),
):
    """A hypothesis strategy of valid sizes for ``model``'s free symbols: ``{"B": 2, "d": 12, "h": 3, ...}``.

    ``model`` is a graph, a :class:`~costmodel.Model` or anything ``costmodel.load`` takes; ``fixed`` pins
    symbols (name → whole number), ``ranges`` overrides the inclusive range a symbol is drawn from (see
    :data:`RANGES`), ``extra`` names symbols drawn besides the graph's (``C``, a KV cache's context). Every
    draw satisfies the graph's relations (heads divide the width, KV heads divide heads, experts ≥ top-k,
    ``T <= T_max``...); a draw that cannot is rejected.

    >>> from hypothesis import given
    >>> @given(sizes("llama"))
    ... def test(s):
    ...     assert s["d"] % s["h"] == 0 and s["h"] % s["n_kv"] == 0
    >>> test()
    """
    st = hypothesis_strategies()
    G = _graph(model)
    fixed = {str(k): int(v) for k, v in (fixed or {}).items()}
    bounds = {**RANGES, **{str(k): (int(lo), int(hi)) for k, (lo, hi) in (ranges or {}).items()}}
    names = draw_order(G, [*free_names(G, fixed), *(e for e in extra if e not in fixed)])
    for name in names:
        lo, hi = bounds.get(name, DEFAULT_RANGE)
        if not 1 <= lo <= hi:
            raise CostModelError(f"sizes: range of {name} is {lo}..{hi}; expected 1 <= low <= high")
    declared = {str(s): s for s in graph_symbols(G)}
    sym = {n: declared.get(n) or symbol(n) for n in [*names, *fixed]}
    pending = [(r, {str(s) for s in r.free_symbols}) for r in relations(G)]
    fixed_subs = {sym[k]: sympy.Integer(v) for k, v in fixed.items()}
    for r, syms in list(pending):
        if syms <= set(fixed):  # decided by the pins alone
            if r.xreplace(fixed_subs) is not sympy.true:
                raise CostModelError(f"sizes: the fixed sizes {fixed} break {r}")
            pending.remove((r, syms))
    # each relation is checked at the first symbol of the draw order after which all its symbols are known
    at: dict[str, list[sympy.Basic]] = {n: [] for n in names}
    known = set(fixed)
    for name in names:
        known.add(name)
        for r, syms in list(pending):
            if syms <= known:
                at[name].append(r.xreplace(fixed_subs))
                pending.remove((r, syms))

    @st.composite
    def draw(one) -> dict[str, int]:
        values = dict(fixed)
        subs = dict(fixed_subs)
        for name in names:
            lo, hi = bounds.get(name, DEFAULT_RANGE)
            start = one(st.integers(lo, hi), label=name)
            for v in [*range(start, hi + 1), *range(start - 1, lo - 1, -1), *range(hi + 1, hi + BEYOND + 1)]:
                trial = {**subs, sym[name]: sympy.Integer(v)}
                if all(r.xreplace(trial) is sympy.true for r in at[name]):
                    values[name], subs = v, trial
                    break
            else:
                one(st.nothing())  # no value of this symbol meets its relations given those drawn before
        return values

    return draw()


def _graph(model: object) -> nx.DiGraph:
    if isinstance(model, nx.DiGraph):
        return model
    graph = getattr(model, "graph", None)
    if isinstance(graph, nx.DiGraph):
        return graph
    from ..families import load  # deferred: only a name needs loading

    return load(model).graph
