"""Shaped formulas (:mod:`costmodel.formulas.shaped`) as MathML lines for the HTML page: the pieces of
:func:`costmodel.render.paper.pieces` in a MathML :class:`~costmodel.render.paper.Spelling` (terms by sympy's
presentation printer), packed a few to a line.

A pulled-out factor opens ``(`` on one line and closes ``)`` on another (each line is its own ``<math>``, so an
``<mfenced>`` could not span them); every symbol name passes :func:`mathml_safe` (no markup from a builder's
names).
"""

from __future__ import annotations

import html

import sympy
from sympy.printing.mathml import MathMLPresentationPrinter

from ..formulas.shaped import Shaped
from .paper import Spelling, pieces

_MATHML = MathMLPresentationPrinter({"mul_symbol": None, "order": "lex"})


def mathml_safe(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each symbol whose name holds ``<``, ``>``, ``&`` or a quote renamed to its escaped name:
    sympy's MathML printer writes a name as it is, and a builder's symbol ``z</math><img onerror=...>``
    would be markup in the page."""
    free = getattr(expr, "free_symbols", ())
    swap = {s: sympy.Symbol(html.escape(s.name), **s.assumptions0) for s in free if html.escape(s.name) != s.name}
    return expr.xreplace(swap) if swap else expr


def _ml(expr: sympy.Expr) -> str:
    return _MATHML.doprint(mathml_safe(expr))


def _name(latex_name: str) -> str:
    """A named quantity's LaTeX (``N_{layer}``, ``N_{ne} D``) as MathML: each word a symbol."""
    words = [sympy.Symbol(w.replace("{", "").replace("}", "")) for w in latex_name.split()]
    return "".join(_ml(w) for w in words)


class MathML(Spelling):
    """The pieces of :func:`costmodel.render.paper.pieces` spelled in MathML."""

    plus, minus = "<mo>+</mo>", "<mo>-</mo>"

    def term(self, expr: sympy.Expr) -> str:
        return _ml(expr)

    def name(self, name: str) -> str:
        return _name(name)

    def times(self, factor: str, first: str) -> str:
        return factor + first

    def around(self, inner: list[str], ceiling: bool = False) -> list[str]:
        opening, closing = ("<mo>&#8968;</mo>", "<mo>&#8969;</mo>") if ceiling else ("<mo>(</mo>", "<mo>)</mo>")
        return (
            [opening + inner[0], *inner[1:-1], inner[-1] + closing]
            if len(inner) > 1
            else [opening + inner[0] + closing]
        )

    def ratio(self, num: list[str], den: list[str]) -> list[str]:
        return [f"<mfrac><mrow>{''.join(num)}</mrow><mrow>{''.join(den)}</mrow></mfrac>"]

    def peak(self) -> str:
        return "<mo>+</mo><mi>max</mi><mo>(</mo><mo>&#8230;</mo><mo>)</mo>"


def mathml_lines(s: Shaped, per_line: int = 4) -> list[str]:
    """The MathML of ``s`` in lines of ``per_line`` pieces (a line after the first starts with its sign)."""
    got = pieces(s, MathML())
    return ["".join(got[i : i + per_line]) for i in range(0, len(got), per_line)] or ["<mn>0</mn>"]
