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


__all__ = ["CALLS", "ExactPrinter"]
