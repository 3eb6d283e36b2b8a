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


class _Printer(JavascriptCodePrinter):
    """JavaScript of an expression over the exact runtime ``R`` (every operation a call)."""

    def _print_Integer(self, e):
        return f"{e.p}n"

    def _print_Rational(self, e):
        return f"R.q({e.p}n, {e.q}n)"

    def _print_Half(self, e):
        return "R.q(1n, 2n)"

    def _print_Zero(self, e):
        return "0n"

    def _print_One(self, e):
        return "1n"

    def _print_NegativeOne(self, e):
        return "-1n"

    def _print_Float(self, e):
        raise ValueError(f"jscode: a float {e} in a formula; expected exact numbers")

    def _print_Pow(self, e, rational=False):
        base, exp = e.args
        if exp.is_Integer and exp > 0:
            return f"R.pow({self._print(base)}, {int(exp)})"
        if exp.is_Integer and exp < 0:
            return f"R.div(1n, R.pow({self._print(base)}, {-int(exp)}))"
        raise ValueError(f"jscode: cannot write a non-integer power {e}")

    def _print_Mul(self, e, order=None):
        top, bottom = [], []
        for a in e.as_ordered_factors():
            if a.is_Pow and a.exp.is_Integer and a.exp < 0:
                bottom.append(self._print(a.base) if a.exp == -1 else f"R.pow({self._print(a.base)}, {-int(a.exp)})")
            elif a.is_Rational and not a.is_Integer:
                if a.p != 1:
                    top.append(f"{a.p}n")
                bottom.append(f"{a.q}n")
            else:
                top.append(self._print(a))
        num = top[0] if len(top) == 1 else f"R.mul({', '.join(top)})" if top else "1n"
        if not bottom:
            return num
        return f"R.div({num}, {bottom[0] if len(bottom) == 1 else 'R.mul(' + ', '.join(bottom) + ')'})"

    def _print_Add(self, e, order=None):
        return "R.add(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _call(self, name, args):
        return f"R.{name}(" + ", ".join(self._print(a) for a in args) + ")"

    def _print_Max(self, e):
        return self._call("max", e.args)

    def _print_maximum(self, e):
        return self._call("max", e.args)

    def _print_Min(self, e):
        return self._call("min", e.args)

    def _print_roundup(self, e):
        return self._call("ceil", e.args)

    def _print_ceiling(self, e):
        return self._call("ceil", e.args)

    def _print_floor(self, e):
        return self._call("floor", e.args)

    def _print_Mod(self, e):
        return self._call("mod", e.args)

    def _print_choose(self, e):
        x, y, a, b = (self._print(v) for v in e.args)
        return f"R.where(R.ge({x}, {y}), {a}, {b})"

    def _print_Piecewise(self, e):
        out = "null"
        for value, cond in reversed(e.args):
            out = (
                self._print(value)
                if cond is sympy.true
                else f"R.where({self._print(cond)}, {self._print(value)}, {out})"
            )
        return out

    def _print_Relational(self, e):
        name = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[e.rel_op]
        return f"R.{name}({self._print(e.lhs)}, {self._print(e.rhs)})"

    def _print_And(self, e):
        return self._call("and", e.args)

    def _print_BooleanTrue(self, e):
        return "true"

    def _print_BooleanFalse(self, e):
        return "false"

    def _print_Symbol(self, e):
        return name(e)

    def _print_Dummy(self, e):
        return name(e)


def name(s: sympy.Symbol) -> str:
    """The JavaScript name of a symbol's value: ``d_ff`` → ``v_d_ff``."""
    return "v_" + "".join(c if c.isalnum() else "_" for c in str(s))


def source(exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol]) -> str:
    """``function (R, <symbols>) { ...; return [<exprs>]; }``, common subexpressions computed once."""
    printer = _Printer()
    replacements, reduced = sympy.cse(list(exprs), symbols=sympy.numbered_symbols("_x"), optimizations=None)
    lines = ["function (" + ", ".join(["R", *(name(s) for s in symbols)]) + ") {"]
    lines += [f"  const {name(sym)} = {printer.doprint(expr)};" for sym, expr in replacements]
    lines.append("  return [" + ", ".join(printer.doprint(e) for e in reduced) + "];")
    return "\n".join(lines) + "\n}"
