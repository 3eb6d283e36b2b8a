"""Quantities a paper names once and then uses by name: ``N_{layer}``, ``N_{embed}``, ``N``, ``N_{ne}``, ``D``,
``b_{kv}`` (:func:`glossary`), and shaped formulas rewritten with them (:func:`use_names`: ``12 N``,
``6 N_{ne} D``, ``L N_{layer}``). A rewrite is made only where it is exact: a multiple found at two points of
odd primes, then checked symbolically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

from ..symbols import B, C
from .quantities import choose, maximum
from .shaped import Named, Peak, Scaled, Shaped, Sum, shape


def glossary(expressions: Mapping[str, sympy.Expr], counts: Sequence[sympy.Symbol] = ()) -> dict[str, sympy.Expr]:
    """The quantities a paper names once (LaTeX name → expression), those a derivation has: the parameters of
    one layer ``N_{layer}`` (the coefficient of the first block count in ``params.total``), of the embeddings
    ``N_{embed}``, all of them ``N``, the active non-embedding ones ``N_{ne}`` (6ND's N), the tokens of a step
    ``D`` and the KV-cache bytes per token ``b_{kv}`` (the cache is ``B·C·b_{kv}``)."""
    out: dict[str, sympy.Expr] = {}
    total = sympy.expand(expressions.get("params.total", 0))
    count = next((c for c in counts if total.has(c)), None)
    if count is not None:
        layer = total.coeff(count)
        if layer != 0 and not layer.has(*counts):
            out["N_{layer}"] = layer
    if expressions.get("params.embedding", 0) != 0:
        out["N_{embed}"] = expressions["params.embedding"]
    if total != 0:
        out["N"] = total
    active = expressions.get("params.active_non_embedding", 0)
    if active != 0 and sympy.expand(active - total) != 0:
        out["N_{ne}"] = active
    if expressions.get("tokens.per_step", 0) != 0:
        out["D"] = expressions["tokens.per_step"]
    kv = sympy.cancel(expressions.get("memory_bytes.kv_cache", 0) / (B * C))
    if kv != 0 and not kv.has(B, C) and sympy.fraction(kv)[1].is_Number:
        out["b_{kv}"] = sympy.expand(kv)
    # a name a symbol of the model has already (a user's D, a --rename to N) is not given to a quantity
    taken = {str(x) for e in expressions.values() if isinstance(e, sympy.Basic) for x in e.free_symbols}
    return {n: e for n, e in out.items() if n.replace("{", "").replace("}", "") not in taken}


def _at(expr: sympy.Expr, seed: int) -> sympy.Expr:
    """``expr`` at a fixed point of odd primes (a quick exact test before a symbolic one)."""
    primes = (101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179)
    syms = sorted(expr.free_symbols, key=str)
    return expr.xreplace({s: primes[(i * 7 + seed) % len(primes)] for i, s in enumerate(syms)})


def _multiple(v: sympy.Expr, e: sympy.Expr) -> sympy.Expr | None:
    """The number ``c`` with ``v = c·e`` exactly, or None."""
    a, b, va = _at(e, 0), _at(e, 5), _at(v, 0)
    if not all(isinstance(x, sympy.Expr) and x.is_Rational for x in (a, b, va)) or a == 0 or b == 0:
        return None  # not numbers at the point: a choice, a relation
    c = va / a
    if not c.is_Rational or c == 0 or _at(v, 5) / b != c or sympy.expand(v - c * e) != 0:
        return None
    return c


def use_names(s: Shaped, names: Mapping[str, sympy.Expr], counts: Sequence[sympy.Symbol] = ()) -> Shaped:
    """``s`` written with the quantities of ``names`` where it is a multiple of one (``12 N``), of two (``6 N_{ne}
    D``) or of the KV cache's (``B C b_{kv}``), or where a part of its sum is a block count times the parameters of
    one layer (``L N_{layer}``); else ``s``."""
    if isinstance(s, (Peak, Named)) or not names:
        return s
    v = s.value()
    if not isinstance(v, sympy.Expr) or v.has(sympy.Piecewise, choose, maximum):
        return s
    items = [(n, e) for n, e in names.items() if n != "b_{kv}"]
    candidates = [*items, *((f"{n1} {n2}", e1 * e2) for i, (n1, e1) in enumerate(items) for n2, e2 in items[i + 1 :])]
    if "b_{kv}" in names:
        candidates.append((r"B C b_{kv}", B * C * names["b_{kv}"]))
    for name, e in candidates:
        c = _multiple(v, e)
        if c is not None:
            return Named(name, e) if c == 1 else Scaled(c, Named(name, e))
    if not isinstance(s, Sum):
        return s
    parts = list(s.parts)
    layer = names.get("N_{layer}")
    if layer is not None:
        for i, p in enumerate(parts):
            c = next(((c, n) for n in counts if (c := _multiple(p.value(), n * layer)) is not None), None)
            parts[i] = p if c is None else Scaled(c[0] * c[1], Named("N_{layer}", layer))
    for name, e in items:  # a sum the parts of which a name stands for: V d + T_{max} d → N_{embed}
        if name != "N_{layer}" and len(sympy.Add.make_args(sympy.expand(e))) > 1:
            parts = _subsum(parts, name, e)
    return Sum(tuple(parts)) if len(parts) > 1 else parts[0]


def _subsum(parts: list[Shaped], name: str, e: sympy.Expr) -> list[Shaped]:
    """``parts`` with those whose terms are all terms of ``e`` written as ``name`` (times a number) where
    together they are a multiple of ``e``; the name stands where the first of them stood."""
    monomials = set(sympy.expand(e).as_coefficients_dict())
    picked = [
        i
        for i, p in enumerate(parts)
        if not isinstance(p, Named) and set(sympy.expand(p.value()).as_coefficients_dict()) <= monomials
    ]
    if not picked:
        return parts
    c = _multiple(sympy.Add(*(parts[i].value() for i in picked)), e)
    if c is None:
        return parts
    named = Named(name, e) if c == 1 else Scaled(c, Named(name, e))
    return [named if i == picked[0] else p for i, p in enumerate(parts) if i == picked[0] or i not in picked]


def definitions(names: Mapping[str, sympy.Expr], counts: Sequence[sympy.Symbol] = (), at=None) -> dict[str, Shaped]:
    """Each quantity of a :func:`glossary` shaped, written with the names defined before it."""
    out: dict[str, Shaped] = {}
    for i, (name, e) in enumerate(names.items()):
        earlier = dict(list(names.items())[:i])
        out[name] = use_names(shape(e, counts=counts, at=at), earlier, counts)
    return out


__all__ = ["definitions", "glossary", "use_names"]
