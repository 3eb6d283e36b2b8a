"""Formulas as JavaScript: the same expressions :mod:`costmodel.formulas.python` writes as Python, for a page
that recomputes its numbers in the browser.

sympy's JavaScript printer, with the arithmetic routed through an exact runtime ``R``
(``render/assets/exact.js``: BigInt integers and BigInt fractions), so a page gives the numbers Python's
exact mode gives, whatever their size: no count is ever a double. ``maximum``, ``roundup`` and ``choose``
(the unevaluated functions of :mod:`costmodel.formulas.quantities`) and exact rationals are printed here.

>>> import sympy
>>> from costmodel.symbols import B, d
>>> print(source([B * d**2 / 3 + 1], (B, d)))
function (R, v_B, v_d) {
  return [R.add(1n, R.div(R.mul(v_B, R.pow(v_d, 2)), 3n))];
}
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from sympy.printing.jscode import JavascriptCodePrinter

from .printer import ExactPrinter, Shared, hash_consed


class _Printer(ExactPrinter, JavascriptCodePrinter):
    """JavaScript of an expression over the exact runtime ``R`` (every operation a call; the walk:
    :class:`~costmodel.formulas.printer.ExactPrinter`)."""

    TARGET = "jscode"
    TRUE, FALSE, NOTHING = "true", "false", "null"
    RELATIONS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}

    def integer(self, p: int) -> str:
        return f"{p}n"

    def rational(self, p: int, q: int) -> str:
        return f"R.q({p}n, {q}n)"

    def power(self, base: str, n: int) -> str:
        return f"R.pow({base}, {n})"

    def product(self, numerator: list[str], denominator: list[str]) -> str:
        num = numerator[0] if len(numerator) == 1 else f"R.mul({', '.join(numerator)})" if numerator else "1n"
        if not denominator:
            return num
        den = denominator[0] if len(denominator) == 1 else "R.mul(" + ", ".join(denominator) + ")"
        return f"R.div({num}, {den})"

    def total(self, terms: list[str]) -> str:
        return "R.add(" + ", ".join(terms) + ")"

    def call(self, fn: str, args: list[str]) -> str:
        return f"R.{fn}(" + ", ".join(args) + ")"

    def where(self, condition: str, then: str, otherwise: str) -> str:
        return f"R.where({condition}, {then}, {otherwise})"

    def relation(self, op: str, lhs: str, rhs: str) -> str:
        return f"R.{self.RELATIONS[op]}({lhs}, {rhs})"

    def symbol(self, s: sympy.Symbol) -> str:
        return name(s)


def name(s: sympy.Symbol) -> str:
    """The JavaScript name of a symbol's value: ``d_ff`` → ``v_d_ff``."""
    return "v_" + "".join(c if c.isalnum() else "_" for c in str(s))


class _Shared(Shared, _Printer):
    """JavaScript with shared subexpressions by name (:func:`~costmodel.formulas.printer.hash_consed`)."""


def source(exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol]) -> str:
    """``function (R, <symbols>) { ...; return [<exprs>]; }``, every subexpression met more than once computed
    once (by hash-consing: the runtime is exact, so no grouping of a sum can change a number; sympy's ``cse``,
    which also splits sums, took most of the time of writing a page)."""
    defined, printed = hash_consed(list(exprs), _Shared({}), lambda n, text: f"  const {n} = {text};")
    lines = ["function (" + ", ".join(["R", *(name(s) for s in symbols)]) + ") {", *defined]
    lines.append("  return [" + ", ".join(printed) + "];")
    return "\n".join(lines) + "\n}"
