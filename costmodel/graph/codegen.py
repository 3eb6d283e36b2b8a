"""Derive with sympy, evaluate without it: formulas emitted as plain Python arithmetic.

:func:`source` writes expressions as the body of a Python function of the symbols' values, with common
subexpressions shared. The same text runs in two modes, chosen by the helpers it is given
(:data:`costmodel.formulas.EXACT`, :func:`costmodel.formulas.float_mode`): exact (Python ints and ``fractions.Fraction``: the numbers ``estimate``
gives) and vectorised (numpy float64 arrays: a sweep of millions of configs). ``max``, ``min``, ceilings,
floors, ``Mod`` and piecewise choices are helpers, so both modes are the same formula.

>>> import sympy
>>> from costmodel.formulas import EXACT
>>> from costmodel.symbols import B, d
>>> f = compile_exprs([B * d**2 / 3, sympy.ceiling(B / 2)], (B, d))
>>> f(EXACT, 2, 3)
[6, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from sympy.printing.pycode import PythonCodePrinter

from ..formulas import run_source


class _Printer(PythonCodePrinter):
    """Python source with exact constants (``_F(p, q)``) and the mode's helpers for non-arithmetic functions."""

    def _print_Integer(self, e):
        return str(e.p)

    def _print_Rational(self, e):
        return f"_F({e.p}, {e.q})"

    def _print_Half(self, e):
        return "_F(1, 2)"

    def _print_Pow(self, e, rational=False):
        base, exp = e.args
        if exp.is_Integer and exp > 0:
            return f"({self._print(base)})**{int(exp)}"
        if exp.is_Integer and exp < 0:
            return f"_div(1, ({self._print(base)})**{-int(exp)})"
        raise ValueError(f"codegen: cannot write a non-integer power {e}")

    def _print_Mul(self, e):
        num, den = [], []
        for a in e.as_ordered_factors():
            if a.is_Pow and a.exp.is_Integer and a.exp < 0:
                den.append(self._print(a.base) if a.exp == -1 else f"({self._print(a.base)})**{-int(a.exp)}")
            elif a.is_Rational and not a.is_Integer:
                num.append(str(a.p))
                den.append(str(a.q))
            else:
                num.append(self._print(a))
        top = "*".join(f"({n})" for n in num) or "1"
        return f"_div({top}, {'*'.join(f'({d})' for d in den)})" if den else top

    def _print_Add(self, e):
        return "(" + " + ".join(self._print(a) for a in e.args) + ")"

    def _print_Max(self, e):
        return f"_max({', '.join(self._print(a) for a in e.args)})"

    def _print_Min(self, e):
        return f"_min({', '.join(self._print(a) for a in e.args)})"

    def _print_maximum(self, e):
        return f"_max({', '.join(self._print(a) for a in e.args)})"

    def _print_roundup(self, e):
        return f"_ceil({self._print(e.args[0])})"

    def _print_choose(self, e):
        x, y, a, b = (self._print(v) for v in e.args)
        return f"_where(({x}) >= ({y}), {a}, {b})"

    def _print_ceiling(self, e):
        return f"_ceil({self._print(e.args[0])})"

    def _print_floor(self, e):
        return f"_floor({self._print(e.args[0])})"

    def _print_Mod(self, e):
        return f"(({self._print(e.args[0])}) % ({self._print(e.args[1])}))"

    def _print_Piecewise(self, e):
        out = "None"
        for value, cond in reversed(e.args):
            out = (
                self._print(value)
                if cond is sympy.true
                else f"_where({self._print(cond)}, {self._print(value)}, {out})"
            )
        return out

    def _print_Relational(self, e):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[e.rel_op]
        return f"(({self._print(e.lhs)}) {op} ({self._print(e.rhs)}))"

    def _print_And(self, e):
        return "_and(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_BooleanTrue(self, e):
        return "True"

    def _print_BooleanFalse(self, e):
        return "False"

    def _print_Symbol(self, e):
        return _name(e)

    def _print_Dummy(self, e):
        return _name(e)


def _name(s: sympy.Symbol) -> str:
    return "v_" + "".join(c if c.isalnum() else "_" for c in str(s))


def source(exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol], name: str = "f") -> str:
    """``def name(h, <symbols>): ...; return [<exprs>]`` (``h``: the helpers of a mode)."""
    printer = _Printer({"fully_qualified_modules": False})
    replacements, reduced = sympy.cse(list(exprs), symbols=sympy.numbered_symbols("_x"), optimizations=None)
    args = ", ".join(_name(s) for s in symbols)
    lines = [f"def {name}(h{', ' if args else ''}{args}):", "    _F, _div, _max, _min, _ceil, _floor, _where, _and = h"]
    for sym, expr in replacements:
        lines.append(f"    {_name(sym)} = {printer.doprint(expr)}")
    lines.append("    return [" + ", ".join(printer.doprint(e) for e in reduced) + "]")
    return "\n".join(lines) + "\n"


def compile_exprs(exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol]):
    """A Python function ``f(mode, *values)`` returning the expressions' values (see the module notes)."""
    return run_source(source(exprs, symbols))  # our own generated source


# The modes (EXACT, float_mode, object_mode) live with the sympy-free formulas (:mod:`costmodel.formulas`), which
# evaluate the same generated source without importing this module.
