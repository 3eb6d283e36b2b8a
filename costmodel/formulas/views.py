"""Views of a derivation a writer asks for (``derive --keys/--leading/--per-token/--per-layer/--rename/--explain``).

Each is exact: a view selects expressions, divides them by an expression of the derivation, keeps the terms that
lead at a config (saying which share they cover), renames symbols, or lists, for each term, the ops whose costs
add up to it. A renaming is read by a small parser of its own (``d=h,T=s``: names, never an expression), so no
user text reaches sympy's parser.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence

import sympy

from ..errors import CostModelError

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)?")


def select(expressions: Mapping[str, sympy.Expr], patterns: str) -> dict[str, sympy.Expr]:
    """The expressions whose keys match one of the comma-separated shell patterns (``flops.*,params.total``)."""
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    out = {k: v for k, v in expressions.items() if any(fnmatch.fnmatchcase(k, p) for p in wanted)}
    if not out:
        raise CostModelError(f"--keys {patterns!r}: no expression matches; known: {', '.join(expressions)}")
    return out


def per(expressions: Mapping[str, sympy.Expr], unit: sympy.Expr) -> dict[str, sympy.Expr]:
    """Every expression divided by ``unit`` exactly (per token: the tokens of a step), sums kept expanded."""
    return {k: sympy.expand(sympy.cancel(v / unit)) for k, v in expressions.items()}


def per_layer(expressions: Mapping[str, sympy.Expr], count: sympy.Symbol) -> dict[str, sympy.Expr]:
    """The part of each expression that one repetition of the block adds: its coefficient of ``count``
    (``12 L d² + 2 V d`` → ``12 d²``); expressions that do not grow with ``count`` are left out."""
    out = {}
    for k, v in expressions.items():
        c = sympy.expand(v).coeff(count)
        if c != 0 and not c.has(count):
            out[k] = c
    return out


def parse_rename(text: str, known: Sequence[str]) -> dict[sympy.Symbol, sympy.Symbol]:
    """``d=h,T=s`` as a simultaneous renaming of known symbols to new names (letters, digits, one ``_``
    subscript); raises :class:`CostModelError` on anything else or where two symbols would share a name."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        old, eq, new = (s.strip() for s in item.partition("="))
        if not eq or not _NAME.fullmatch(old) or not _NAME.fullmatch(new):
            raise CostModelError(f"--rename: expected OLD=NEW names such as d=h,T=s; received {item!r}")
        if old not in known:
            raise CostModelError(f"--rename: {old!r} is not a symbol of this derivation; known: {', '.join(known)}")
        out[old] = new
    names = [out.get(s, s) for s in known]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise CostModelError(f"--rename {text!r}: two symbols would be named {', '.join(clash)}")
    return {
        sympy.Symbol(o, positive=True, integer=True): sympy.Symbol(n, positive=True, integer=True)
        for o, n in out.items()
    }


def leading(expr: sympy.Expr, at: Mapping[sympy.Symbol, int], cover: float = 0.9) -> tuple[sympy.Expr, float] | None:
    """The fewest largest terms of ``expr`` at ``at`` that make up ``cover`` of it, and the share they make;
    None when ``expr`` is not a sum of terms with numbers at ``at`` (a peak's max, a ratio)."""
    from .shaped import fractional  # a share (a ratio of sums) has no leading terms of its own

    e = sympy.expand(expr)
    if fractional(e):
        return None
    at = {s: sympy.Integer(v) for s, v in at.items()}
    total = e.xreplace(at)
    if not total.is_Rational or total == 0:
        return None
    terms = sorted(sympy.Add.make_args(e), key=lambda t: -abs(t.xreplace(at)))
    kept, got = [], sympy.S.Zero
    for t in terms:
        v = t.xreplace(at)
        if not v.is_Rational:
            return None
        kept.append(t)
        got += v
        if got / total >= cover:
            break
    return sympy.Add(*kept), float(got / total)


def explain(
    expr: sympy.Expr, sources: Mapping[str, sympy.Expr], at: Mapping[sympy.Symbol, int] | None = None
) -> list[dict[str, object]] | None:
    """For each term of ``expr`` (leading first: largest at ``at``, else by degree), the ops whose contributions add up to it:
    ``[{"term": 72*B*L*T*d**2, "ops": {"layers.attn.q": 18*B*L*T*d**2, ...}}]`` (sympy; the JSON's are strings).
    None unless the sources sum to ``expr`` exactly (then every term is accounted for)."""
    e = sympy.expand(expr)
    parts = {op: dict(sympy.expand(v).as_coefficients_dict()) for op, v in sources.items() if v != 0}
    if sympy.expand(sympy.Add(*(sympy.expand(v) for v in sources.values())) - e) != 0:
        return None
    from .shaped import order  # the order the shaped formulas print their terms in

    out = []
    for term in order(sympy.Add.make_args(e), at):
        coeff, m = term.as_coeff_Mul()
        ops = {op: d[m] * m for op, d in parts.items() if d.get(m, 0) != 0}
        out.append({"term": term, "ops": ops})
    return out


__all__ = ["explain", "leading", "parse_rename", "per", "per_layer", "select"]
