"""The one walk that writes a derived expression as code: each target (Python, JavaScript) says only how it
spells a number, a product, a call.

Costs are sums of products of symbols with exact rational coefficients, plus a few functions
(``Max``/``maximum``, ``Min``, ``ceiling``/``roundup``, ``floor``, ``Mod``, ``choose``, ``Piecewise``) and
relations. :class:`ExactPrinter` walks them once for every target; a target subclasses it beside sympy's own
code printer (``class _Printer(ExactPrinter, PythonCodePrinter)``) and fills in its spelling:
:meth:`integer`, :meth:`rational`, :meth:`power`, :meth:`product`, :meth:`total`, :meth:`call`,
:meth:`where`, :meth:`relation`, :meth:`symbol` and the constants ``TRUE``, ``FALSE``, ``NOTHING``.
"""

from __future__ import annotations

import sympy

#: The functions every target provides, by the name :meth:`ExactPrinter.call` passes.
CALLS = ("max", "min", "ceil", "floor", "mod", "and")


class ExactPrinter:
    """A printer mixin: the structure of the walk, exact numbers kept exact (no float is ever written)."""

    TARGET = "code"
    TRUE, FALSE, NOTHING = "True", "False", "None"

    # -- the spelling a target gives -------------------------------------------------------------------
    def integer(self, p: int) -> str:
        raise NotImplementedError

    def rational(self, p: int, q: int) -> str:
        raise NotImplementedError

    def power(self, base: str, n: int) -> str:
        """``base`` to the whole power ``n`` ≥ 1."""
        raise NotImplementedError

    def product(self, numerator: list[str], denominator: list[str]) -> str:
        """The factors over the divisors (``denominator`` may be empty)."""
        raise NotImplementedError

    def total(self, terms: list[str]) -> str:
        raise NotImplementedError

    def call(self, fn: str, args: list[str]) -> str:
        """One of :data:`CALLS` applied to printed arguments."""
        raise NotImplementedError

    def where(self, condition: str, then: str, otherwise: str) -> str:
        raise NotImplementedError

    def relation(self, op: str, lhs: str, rhs: str) -> str:
        """``op`` one of ``== != < <= > >=``."""
        raise NotImplementedError

    def symbol(self, s: sympy.Symbol) -> str:
        raise NotImplementedError

    def text(self, e) -> str:
        """``doprint(e)`` without its first step, a rebuild of the whole tree that strips ``re(...)`` around
        unevaluated expressions (costs have none): that walk was most of the time of writing thousands of
        formulas. What the printer cannot write goes through ``doprint``, which says so."""
        self._not_supported, self._number_symbols = set(), set()
        out = self._print(e)
        if self._not_supported or self._number_symbols:
            return self.doprint(e)
        return out

    # -- the walk --------------------------------------------------------------------------------------
    def _args(self, e) -> list[str]:
        return [self._print(a) for a in e.args]

    def _print_Integer(self, e):
        return self.integer(e.p)

    def _print_Zero(self, e):
        return self.integer(0)

    def _print_One(self, e):
        return self.integer(1)

    def _print_NegativeOne(self, e):
        return self.integer(-1)

    def _print_Rational(self, e):
        return self.rational(e.p, e.q)

    def _print_Half(self, e):
        return self.rational(1, 2)

    def _print_Float(self, e):
        raise ValueError(f"{self.TARGET}: a float {e} in a formula; expected exact numbers")

    def _print_Pow(self, e, rational=False):
        base, exp = e.args
        if exp.is_Integer and exp > 0:
            return self.power(self._print(base), int(exp))
        if exp.is_Integer and exp < 0:
            return self.product([], [self.power(self._print(base), -int(exp))])
        raise ValueError(f"{self.TARGET}: cannot write a non-integer power {e}")

    def _print_Mul(self, e, order=None):
        num, den = [], []
        for a in e.as_ordered_factors():
            if a.is_Pow and a.exp.is_Integer and a.exp < 0:
                base = self._print(a.base)
                den.append(base if a.exp == -1 else self.power(base, -int(a.exp)))
            elif a.is_Rational and not a.is_Integer:
                if a.p != 1:
                    num.append(self.integer(a.p))
                den.append(self.integer(a.q))
            else:
                num.append(self._print(a))
        return self.product(num, den)

    def _print_Add(self, e, order=None):
        return self.total(self._args(e))

    def _print_Max(self, e):
        return self.call("max", self._args(e))

    _print_maximum = _print_Max  # costmodel.formulas.quantities.maximum: a Max that stays unevaluated

    def _print_Min(self, e):
        return self.call("min", self._args(e))

    def _print_ceiling(self, e):
        return self.call("ceil", self._args(e))

    _print_roundup = _print_ceiling  # costmodel.formulas.quantities.roundup: a fractional shard, rounded up

    def _print_floor(self, e):
        return self.call("floor", self._args(e))

    def _print_Mod(self, e):
        return self.call("mod", self._args(e))

    def _print_And(self, e):
        return self.call("and", self._args(e))

    def _print_choose(self, e):
        x, y, a, b = self._args(e)
        return self.where(self.relation(">=", x, y), a, b)

    def _print_Piecewise(self, e):
        out = self.NOTHING
        for value, cond in reversed(e.args):
            out = self._print(value) if cond is sympy.true else self.where(self._print(cond), self._print(value), out)
        return out

    def _print_Relational(self, e):
        return self.relation(e.rel_op, self._print(e.lhs), self._print(e.rhs))

    def _print_BooleanTrue(self, e):
        return self.TRUE

    def _print_BooleanFalse(self, e):
        return self.FALSE

    def _print_Symbol(self, e):
        return self.symbol(e)

    _print_Dummy = _print_Symbol  # noqa: N815  (sympy's printer method names)


class Shared:
    """A printer mixin for :func:`hash_consed`: a named subexpression prints as its name, except where it is
    being defined (``defining``). ``Shared(names, settings)`` beside a target's printer."""

    def __init__(self, names: dict[sympy.Basic, str], settings: dict | None = None):
        super().__init__(settings or {})
        self.names = names
        self.defining: sympy.Basic | None = None

    def _print(self, expr, **kwargs):
        if expr is not self.defining and isinstance(expr, sympy.Basic):
            got = self.names.get(expr)
            if got is not None:
                return got
        return super()._print(expr, **kwargs)


def hash_consed(exprs, printer: Shared, line) -> tuple[list[str], list[str]]:
    """(definitions, printed expressions): every subexpression of ``exprs`` met more than once computed once,
    named ``_x0``, ``_x1``... and defined by ``line(name, text)``; ``printer`` a :class:`Shared` printer of the
    target, with no names yet.

    One walk counts the subtrees (a subtree already seen is not walked again), a second prints each repeated
    one after its own repeated parts, and the expressions refer to them by name; nothing is rebuilt in sympy.
    Exact arithmetic gives the same numbers however the sums are grouped.
    """
    seen: dict[sympy.Basic, int] = {}

    def count(e) -> None:
        if not isinstance(e, sympy.Expr) or e.is_Atom:  # numbers and symbols print as they are
            for a in e.args if isinstance(e, sympy.Basic) else ():
                count(a)
            return
        if e in seen:
            seen[e] += 1
            return
        seen[e] = 1
        for a in e.args:
            count(a)

    for e in exprs:
        count(e)
    names = printer.names
    lines: list[str] = []

    def define(e) -> None:  # post-order: a subtree's own shared parts are named first
        if not isinstance(e, sympy.Basic) or e in names:
            return
        for a in e.args:
            define(a)
        if seen.get(e, 0) > 1:
            printer.defining = e
            text = printer.text(e)
            names[e] = f"_x{len(names)}"
            lines.append(line(names[e], text))

    for e in exprs:
        define(e)
    printer.defining = None
    return lines, [printer.text(e) for e in exprs]


__all__ = ["CALLS", "ExactPrinter", "Shared", "hash_consed"]
