"""Formulas shaped the way papers write them, each equal to the exact expression it shows.

A derivation's expressions are exact sympy sums in sympy's own order (``12*B*L*T**2*d + 13*B*L*T**2*h +
72*B*L*T*d**2 + ...``). :func:`shape` writes one as a small tree of :class:`Shaped` nodes that prints the
way a paper does, without changing its value:

* a ceiling or floor of an integer is its argument (every size is a positive integer: ``⌈8·B·T⌉ = 8·B·T``);
* the terms that repeat with a block count (``L``) are collected: ``L·d·(12·d + 13) + V·d + ...``, each group
  with its common factor pulled out;
* terms are ordered leading first: by their value at a reference config when one is given, else by degree;
* FLOPs read in the Megatron form, the leading term times one plus its corrections:
  ``72·B·L·T·d²·(1 + T/(6·d) + V/(12·L·d) + ...)``;
* a ratio of sums is one fraction over a common denominator;
* a liveness peak is the model states plus the largest of its named points (:class:`Peak`), the points no
  other point can exceed dropped (:func:`costmodel.memory.peak.maximal`) and equal ones named together;
* quantities a paper names (``N_{layer}``, ``D``) are used by name (:class:`Named`, :mod:`costmodel.formulas.named`).

``shaped.value()`` rebuilds the sympy expression a tree shows; tests check it equals the exact one at random
positive-integer points (exact arithmetic, never floats). Printing (LaTeX pieces a line may break between) is
:mod:`costmodel.render.paper`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import sympy

from .quantities import maximum, roundup


class Shaped:
    """A formula as it is shown; :meth:`value` is the exact expression it stands for."""

    def value(self) -> sympy.Expr:
        raise NotImplementedError


@dataclass(frozen=True)
class Term(Shaped):
    """One expression printed as sympy prints it (a monomial, a ratio of monomials, a ceiling)."""

    expr: sympy.Expr

    def value(self) -> sympy.Expr:
        return self.expr


@dataclass(frozen=True)
class Sum(Shaped):
    """Parts added in the order shown (the leading part first)."""

    parts: tuple[Shaped, ...]

    def value(self) -> sympy.Expr:
        return sympy.Add(*(p.value() for p in self.parts))


@dataclass(frozen=True)
class Scaled(Shaped):
    """``factor · (inner)``: a common factor pulled out of a sum (``L·B·T·(...)``, ``72·B·L·T·d²·(1 + ...)``)."""

    factor: sympy.Expr
    inner: Shaped

    def value(self) -> sympy.Expr:
        return self.factor * self.inner.value()


@dataclass(frozen=True)
class Ceiling(Shaped):
    """``⌈inner⌉``: whole bytes of a sum that may be fractional (a share of layers, 8-bit Adam's 513/512)."""

    inner: Shaped

    def value(self) -> sympy.Expr:
        return roundup(self.inner.value())


@dataclass(frozen=True)
class Ratio(Shaped):
    """One fraction: a numerator over a denominator, each shaped."""

    numerator: Shaped
    denominator: Shaped

    def value(self) -> sympy.Expr:
        return self.numerator.value() / self.denominator.value()


@dataclass(frozen=True)
class Peak(Shaped):
    """``states + max over points``: each point the live bytes at the places of a step its labels name."""

    states: Shaped
    points: tuple[tuple[tuple[str, ...], Shaped], ...]
    #: a part several points share (the activations the layers keep, ``L·(...)``), named ``K`` in them
    common: Named | None = None

    def value(self) -> sympy.Expr:
        return self.states.value() + maximum(*(p.value() for _, p in self.points))

    def winner(self, values: Mapping[sympy.Symbol, int]) -> tuple[int, tuple[str, ...], int]:
        """(index, labels, live bytes) of the point that is the peak at ``values``; of equal points the one whose
        last label comes last alphabetically (the tie rule of ``memory.peak_at``)."""
        nums = [int(p.value().xreplace(values)) for _, p in self.points]
        i = max(range(len(nums)), key=lambda j: (nums[j], max(self.points[j][0])))
        return i, self.points[i][0], nums[i]


@dataclass(frozen=True)
class Named(Shaped):
    """A quantity defined once and used by its name (``N_{layer}``, LaTeX); its value is what it names."""

    name: str
    expr: sympy.Expr

    def value(self) -> sympy.Expr:
        return self.expr


def integral(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every ceiling and floor of an integer replaced by its argument, expanded.

    >>> from costmodel.symbols import B, T, d
    >>> integral(roundup(8*B*T) + roundup(B*T*d/3))
    8*B*T + roundup(B*T*d/3)
    """
    found = {f: f.args[0] for f in expr.atoms(roundup, sympy.ceiling, sympy.floor) if f.args[0].is_integer}
    if not found:
        return expr
    return sympy.expand(expr.xreplace(found))


def _monomial(term: sympy.Expr) -> bool:
    """A number times powers of symbols and of ceilings (``13*B*T**2*h/d``): what a line of a sum holds."""
    _, m = term.as_coeff_Mul()
    for f in sympy.Mul.make_args(m):
        if f.is_Number:
            continue
        base = f.base if f.is_Pow and f.exp.is_Integer else f
        if not (base.is_Symbol or isinstance(base, (roundup, sympy.ceiling, sympy.floor)) or _small_call(base)):
            return False
    return True


def _small_call(e: sympy.Expr) -> bool:
    """A function of a few atoms and short sums (``min(T, W)``, ``min(C, W - 1)``): a factor like a symbol."""
    return isinstance(e, (sympy.Min, sympy.Max, maximum)) and all(len(sympy.Add.make_args(a)) <= 2 for a in e.args)


def fractional(expr: sympy.Expr) -> bool:
    """Whether a sum sits in a denominator (a share: one quantity over another)."""
    return any(p.is_Pow and p.exp.is_negative and p.base.is_Add for p in sympy.preorder_traversal(expr))


def order(terms: Iterable[sympy.Expr], at: Mapping[sympy.Symbol, int] | None) -> list[sympy.Expr]:
    """Terms leading first: largest at ``at`` (a symbol it lacks counts as 64), else highest degree and
    coefficient first; sympy's order breaks ties."""
    terms = sorted(terms, key=sympy.default_sort_key)

    def weight(t: sympy.Expr):
        if at is not None:
            free = {s: at.get(s, 64) for s in t.free_symbols}
            return (abs(float(t.xreplace(free))),)
        coeff, m = t.as_coeff_Mul()
        degree = sum(e for e in m.as_powers_dict().values() if e.is_Integer) if m != 1 else 0
        return (degree, abs(float(coeff)))

    return sorted(terms, key=weight, reverse=True)


def common_factor(terms: Sequence[sympy.Expr]) -> sympy.Expr:
    """The largest number and product of positive powers that divides every term (``2·B·T`` of ``4·B·T·d +
    2·B·T``); 1 when there is none."""
    content = sympy.Add(*terms).as_content_primitive()[0] if len(terms) > 1 else sympy.S.One
    powers: dict | None = None
    for t in terms:
        mine = {b: e for b, e in t.as_coeff_Mul()[1].as_powers_dict().items() if e.is_Integer and e > 0}
        powers = mine if powers is None else {b: min(e, mine[b]) for b, e in powers.items() if b in mine}
    return content * sympy.Mul(*(b**e for b, e in (powers or {}).items()))


def factored(terms: Sequence[sympy.Expr]) -> Shaped:
    """A sum of terms (in the order given) with its common factor pulled out."""
    if len(terms) == 1:
        return Term(terms[0])
    f = common_factor(terms)
    if f == 1:
        return Sum(tuple(Term(t) for t in terms))
    return Scaled(f, Sum(tuple(Term(sympy.expand(t / f)) for t in terms)))


def collected(terms: Sequence[sympy.Expr], counts: Sequence[sympy.Symbol]) -> Shaped:
    """Terms (leading first) grouped by the block count each is linear in: ``L·(per-layer terms) + the rest``,
    each group factored; a group stands where its leading term would."""
    groups: dict[tuple, list[sympy.Expr]] = {}  # (a block count,) or (None, a term on its own)
    for t in terms:
        powers = t.as_powers_dict()
        count = next((c for c in counts if powers.get(c) == 1), None)
        groups.setdefault((count,) if count is not None else (None, t), []).append(t if count is None else t / count)
    parts: list[Shaped] = []
    for key, members in groups.items():
        count = key[0]
        if count is None:
            parts.append(part(key[1]))
        elif len(members) == 1:
            parts.append(Term(count * members[0]))
        else:
            inner = factored(members)
            parts.append(
                Scaled(count * inner.factor, inner.inner) if isinstance(inner, Scaled) else Scaled(count, inner)
            )
    return parts[0] if len(parts) == 1 else Sum(tuple(parts))


def part(term: sympy.Expr) -> Shaped:
    """One term; a multiple of a ceiling of a sum as the multiple of the sum shaped inside ``⌈ ⌉``."""
    ceilings = [f for f in sympy.Mul.make_args(term) if isinstance(f, roundup) and f.args[0].is_Add]
    if len(ceilings) != 1:
        return Term(term)
    inner = Ceiling(shape(ceilings[0].args[0]))
    rest = sympy.Mul(*(f for f in sympy.Mul.make_args(term) if f is not ceilings[0]))
    return inner if rest == 1 else Scaled(rest, inner)


def megatron(terms: Sequence[sympy.Expr]) -> Shaped:
    """The leading term times one plus each other term's ratio to it (Narayanan et al. 2021, eq. 3:
    ``72·B·s·L·h²·(1 + s/(6·h) + V/(12·h·L))``)."""
    lead, *rest = terms
    if not rest:
        return Term(lead)
    return Scaled(lead, Sum((Term(sympy.S.One), *(Term(sympy.cancel(t / lead)) for t in rest))))


def shape(
    expr: sympy.Expr,
    *,
    counts: Sequence[sympy.Symbol] = (),
    at: Mapping[sympy.Symbol, int] | None = None,
    leading: bool = False,
) -> Shaped:
    """``expr`` shaped for reading (see the module notes); ``leading``: the Megatron form (FLOPs).

    >>> from costmodel.symbols import B, L, T, V, d
    >>> s = shape(72*B*L*T*d**2 + 12*B*L*T**2*d + 6*B*T*V*d, leading=True)
    >>> sympy.expand(s.value()) == 72*B*L*T*d**2 + 12*B*L*T**2*d + 6*B*T*V*d  # the same value
    True
    >>> [str(t.value()) for t in s.inner.parts]
    ['1', 'T/(6*d)', 'V/(12*L*d)']
    """
    e = integral(sympy.sympify(expr))
    if fractional(e):
        num, den = sympy.fraction(sympy.cancel(sympy.together(e)))
        if den != 1:
            return Ratio(shape(num, counts=counts, at=at), shape(den, counts=counts, at=at))
        e = sympy.expand(num)
    terms = sympy.Add.make_args(e)
    if len(terms) == 1 and not e.is_Mul or not all(map(_monomial, terms)):
        return part(e)
    terms = order(terms, at)
    return megatron(terms) if leading else collected(terms, counts)


def shape_peak(
    expr: sympy.Expr,
    labels: Sequence[str],
    *,
    counts: Sequence[sympy.Symbol] = (),
    at: Mapping[sympy.Symbol, int] | None = None,
    maximal: Callable[[list[dict], list[str]], list[int]] | None = None,
) -> Shaped:
    """A liveness peak ``states + maximum(points)`` (``labels[i]`` names point i) as a :class:`Peak`: equal points
    named together, and with ``maximal`` (the peak's own rule, :func:`costmodel.memory.peak.maximal`: the indices
    of the points no other always exceeds) only those; anything else as :func:`shape` gives it."""
    tops = [a for a in sympy.Add.make_args(expr) if isinstance(a, maximum)]
    if len(tops) != 1 or len(tops[0].args) != len(labels):
        return shape(expr, counts=counts, at=at)
    states = sympy.Add(*(a for a in sympy.Add.make_args(expr) if a is not tops[0]))
    points = [integral(sympy.expand(p)) for p in tops[0].args]
    if not all(_monomial(t) for p in points for t in sympy.Add.make_args(p)):
        return shape(expr, counts=counts, at=at)
    same: dict[sympy.Expr, list[str]] = {}
    for p, label in zip(points, labels):
        same.setdefault(p, []).append(label)
    distinct = list(same)
    dicts = [dict(p.as_coefficients_dict()) for p in distinct]
    keep = maximal(dicts, [max(same[p]) for p in distinct]) if maximal else range(len(distinct))
    shaped = [(tuple(same[distinct[i]]), shape(distinct[i], counts=counts, at=at)) for i in keep]
    common = _common_part([s for _, s in shaped])
    if common is not None:
        shaped = [(names, _named_part(s, common)) for names, s in shaped]
    return Peak(shape(states, counts=counts, at=at), tuple(shaped), common)


def _common_part(points: Sequence[Shaped]) -> Named | None:
    """``K``: the block-count part (``Scaled``) of a sum that most points hold, where at least two do."""
    seen: dict[sympy.Expr, int] = {}
    for p in points:
        for part in {q.value() for q in (p.parts if isinstance(p, Sum) else ()) if isinstance(q, Scaled)}:
            seen[part] = seen.get(part, 0) + 1
    best = max(seen, key=lambda v: (seen[v], sympy.default_sort_key(v)), default=None)
    return Named("K", best) if best is not None and seen[best] >= 2 else None


def _named_part(s: Shaped, common: Named) -> Shaped:
    if not isinstance(s, Sum):
        return s
    return Sum(tuple(common if isinstance(q, Scaled) and q.value() == common.expr else q for q in s.parts))


def shape_all(
    expressions: Mapping[str, sympy.Expr],
    *,
    peaks: Mapping[str, Sequence[str]] | None = None,
    counts: Sequence[sympy.Symbol] = (),
    at: Mapping[sympy.Symbol, int] | None = None,
    maximal: Callable[[list[dict], list[str]], list[int]] | None = None,
) -> dict[str, Shaped]:
    """Every expression of a derivation shaped: ``peaks`` names the points of each liveness peak (key → labels),
    FLOPs (``flops.*`` but a share) in the Megatron form, the rest collected by the block ``counts``."""
    out: dict[str, Shaped] = {}
    for key, e in expressions.items():
        if peaks and key in peaks:
            out[key] = shape_peak(e, peaks[key], counts=counts, at=at, maximal=maximal)
        else:
            out[key] = shape(e, counts=counts, at=at, leading=key.startswith("flops.") and not key.endswith("share"))
    return out


__all__ = [
    "Ceiling",
    "Peak",
    "Ratio",
    "Scaled",
    "Shaped",
    "Sum",
    "Term",
    "integral",
    "shape",
    "shape_all",
    "shape_peak",
]
