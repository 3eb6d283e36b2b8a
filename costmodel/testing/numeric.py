"""The substitute-then-count path: a graph's costs at numbers, op by op, against its derived formulas.

The derived side is every formula an estimate evaluates (:func:`costmodel.sections.quantities.quantities`,
compiled once). The counted side never sees a summed formula: each op gets the drawn numbers for its axes
first (``Op.subs``), its rule then counts with numbers, and the counts are multiplied by the op's count at
those numbers and added up as Python integers. Where a term differs, the ops whose own derived cost differs
from their count are named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

from ..families import graph_symbols
from ..graph.analysis import op_nodes
from ..graph.cost import OpCost
from ..graph.registry import op_cost
from ..options import Options
from .results import Difference
from .subject import Subject

#: Each term counted op by op: how one run of an op contributes to it (the op's cost record, whether its
#: parameters are embeddings).
TERMS: dict[str, Callable[[OpCost, bool], sympy.Expr]] = {
    "params.total": lambda c, emb: c.params,
    "params.embedding": lambda c, emb: c.params if emb else sympy.Integer(0),
    "params.active": lambda c, emb: c.active_params,
    "flops.forward": lambda c, emb: c.forward.flops,
    "flops.backward": lambda c, emb: c.backward.flops,
    "flops.training": lambda c, emb: c.forward.flops + c.backward.flops,
    "flops.matmul.forward": lambda c, emb: c.forward.matmul_flops,
    "flops.matmul.backward": lambda c, emb: c.backward.matmul_flops,
    "flops.matmul.training": lambda c, emb: c.forward.matmul_flops + c.backward.matmul_flops,
    "bytes.forward": lambda c, emb: c.forward.bytes,
    "bytes.backward": lambda c, emb: c.backward.bytes,
}


def _number(e: object, what: str) -> Fraction:
    r = sympy.Rational(sympy.sympify(e))
    return Fraction(int(r.p), int(r.q))


def counted(subject: Subject, values: Mapping[str, int], options: Options | None = None) -> dict[str, dict]:
    """Per term of :data:`TERMS`: ``{op node: its contribution at values}``, each op costed at numbers."""
    counting = (options or Options()).counting
    G = subject.graph
    subs = _subs(G, values)
    out: dict[str, dict] = {t: {} for t in TERMS}
    for name, data in op_nodes(G):
        cost = op_cost(data["op"].subs(subs), counting)
        n = _number(data["count"].xreplace(subs), f"count of {name}")
        emb = bool(data.get("embedding"))
        for term, part in TERMS.items():
            out[term][name] = n * _number(part(cost, emb), f"{term} of {name}")
    return out


def derived_per_op(subject: Subject, values: Mapping[str, int], term: str, options: Options | None = None) -> dict:
    """Per op node: its derived (symbolic) contribution to ``term``, with the numbers substituted after."""
    counting = (options or Options()).counting
    G = subject.graph
    subs = _subs(G, values)
    return {
        name: _number(
            (TERMS[term](op_cost(data["op"], counting), bool(data.get("embedding"))) * data["count"]).xreplace(subs),
            term,
        )
        for name, data in op_nodes(G)
    }


def numeric_differences(
    subject: Subject, values: Mapping[str, int], options: Options | None = None
) -> list[Difference]:
    """Every term whose derived value at ``values`` differs from the graph counted op by op at them."""
    derived = subject.estimate(values, options)
    ops = counted(subject, values, options)
    out = []
    for term, parts in ops.items():
        if term not in derived:
            continue
        total = sum(parts.values(), Fraction(0))
        if Fraction(derived[term]) != total:
            symbolic = derived_per_op(subject, values, term, options)
            wrong = [n for n in parts if parts[n] != symbolic[n]]
            detail = (
                "ops whose formula differs from their count at numbers: "
                + ", ".join(f"{n} ({symbolic[n]} vs {parts[n]})" for n in wrong[:4])
                if wrong
                else "every op's own formula agrees: the sum over ops differs"
            )
            out.append(Difference(term, derived[term], total, "op by op at numbers", detail))
    return out


def _subs(G, values: Mapping[str, int]) -> dict:
    declared = {str(s): s for s in graph_symbols(G)}
    return {declared[k]: sympy.Integer(v) for k, v in values.items() if k in declared}
