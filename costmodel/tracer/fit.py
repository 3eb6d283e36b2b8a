"""Exact sparse fits: a number known at a few integer points, as a short sum of monomials in the points' sizes.

A traced size (the width of a projection, ``h·d_head``; a block count, ``L``; a KV width,
``n_kv·d_head``) is a fixed function of the config's sizes. :func:`fit_sparse` finds the shortest sum
``c1·m1 + c2·m2 + ...`` of monomials (exponents −1 to 2 per size: ``d/h`` is a monomial) with rational
coefficients that reproduces every sample exactly, trying one term, then two, then three; the caller checks
the result on samples it did not see. Exact arithmetic throughout (:class:`fractions.Fraction`).

>>> fit_sparse(["d", "h"], [{"d": 8, "h": 2}, {"d": 12, "h": 3}, {"d": 20, "h": 2}, {"d": 6, "h": 3}],
...            [4, 4, 10, 2])
d/h
>>> fit_sparse(["h", "g", "k"], [{"h": 4, "g": 2, "k": 3}, {"h": 6, "g": 3, "k": 5}, {"h": 6, "g": 2, "k": 4},
...            {"h": 9, "g": 3, "k": 2}, {"h": 4, "g": 1, "k": 6}], [24, 60, 40, 30, 36])
2*g*k + h*k
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction

import sympy

EXPONENTS = (-1, 1, 2)


def monomials(names: Sequence[str], max_vars: int = 2, max_degree: int = 3) -> list[tuple[int, ...]]:
    """Exponent vectors: at most ``max_vars`` sizes, each to −1, 1 or 2, total positive degree ≤ ``max_degree``,
    at most one division; the constant first, then by number of sizes and degree."""
    n = len(names)
    out = [(0,) * n]
    for k in range(1, max_vars + 1):
        for idx in itertools.combinations(range(n), k):
            for exps in itertools.product(EXPONENTS, repeat=k):
                if sum(e for e in exps if e > 0) > max_degree or sum(1 for e in exps if e < 0) > 1:
                    continue
                v = [0] * n
                for i, e in zip(idx, exps):
                    v[i] = e
                out.append(tuple(v))
    return sorted(out, key=lambda m: (sum(1 for e in m if e), sum(abs(e) for e in m)))


def _value(m: tuple[int, ...], point: Sequence[int]) -> Fraction:
    out = Fraction(1)
    for e, x in zip(m, point):
        if e:
            out *= Fraction(x) ** e
    return out


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """Gauss–Jordan on a square system; None if singular."""
    n = len(rows)
    a = [row[:] + [r] for row, r in zip(rows, rhs)]
    for c in range(n):
        p = next((i for i in range(c, n) if a[i][c] != 0), None)
        if p is None:
            return None
        a[c], a[p] = a[p], a[c]
        for i in range(n):
            if i != c and a[i][c] != 0:
                f = a[i][c] / a[c][c]
                a[i] = [x - f * y for x, y in zip(a[i], a[c])]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit_sparse(
    names: Sequence[str], points: Sequence[Mapping[str, int]], values: Sequence[object], max_terms: int = 3
) -> sympy.Expr | None:
    """The shortest exact fit of ``values`` at ``points`` (see the module), or None if there is none."""
    pts = [tuple(int(p[n]) for n in names) for p in points]
    vals = [Fraction(sympy.Rational(v).p, sympy.Rational(v).q) for v in values]
    if all(v == 0 for v in vals):
        return sympy.Integer(0)
    symbols = [sympy.Symbol(n, positive=True, integer=True) for n in names]
    cands = monomials(names)
    table = {m: [_value(m, p) for p in pts] for m in cands}
    for k in range(1, max_terms + 1):
        if len(pts) < k + 1:
            break
        pool = cands if k < 3 else [m for m in cands if all(e >= 0 for e in m) and sum(m) <= 2]
        for combo in itertools.combinations(pool, k):
            cols = [table[m] for m in combo]
            coeffs = None
            for rows in itertools.combinations(range(len(pts)), k):  # the first k points that are independent
                coeffs = _solve([[c[i] for c in cols] for i in rows], [vals[i] for i in rows])
                if coeffs is not None:
                    break
            if coeffs is None or any(c == 0 for c in coeffs):
                continue
            if all(sum(c * col[i] for c, col in zip(coeffs, cols)) == vals[i] for i in range(len(pts))):
                return sympy.Add(
                    *(
                        sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(s**e for s, e in zip(symbols, m) if e))
                        for c, m in zip(coeffs, combo)
                    )
                )
    return None
