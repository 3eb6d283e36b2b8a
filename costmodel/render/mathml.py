"""Shaped formulas (:mod:`costmodel.formulas.shaped`) as MathML lines for the HTML page: the pieces of
:func:`costmodel.render.paper.pieces`, spelled by sympy's presentation printer, packed a few to a line.

A pulled-out factor opens ``(`` on one line and closes ``)`` on another (each line is its own ``<math>``, so an
``<mfenced>`` could not span them); every symbol name passes :func:`mathml_safe` (no markup from a builder's
names).
"""

from __future__ import annotations

import html

import sympy
from sympy.printing.mathml import MathMLPresentationPrinter

from ..formulas.shaped import Ceiling, Named, Peak, Ratio, Scaled, Shaped, Sum, Term

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


def pieces(s: Shaped) -> list[tuple[str, bool]]:
    """(MathML, starts with a minus) of each piece of ``s``: the places between them a line may break."""
    if isinstance(s, Term):
        return [(_ml(s.expr), s.expr.could_extract_minus_sign())]
    if isinstance(s, Named):
        return [(_name(s.name), False)]
    if isinstance(s, Sum):
        out: list[tuple[str, bool]] = []
        for i, part in enumerate(s.parts):
            got = pieces(part)
            if i and not got[0][1]:
                got[0] = ("<mo>+</mo>" + got[0][0], False)
            out += got
        return out
    if isinstance(s, Scaled):
        inner = pieces(s.inner)
        if s.factor == 1:
            return inner
        factor = "<mo>-</mo>" if s.factor == -1 else _ml(s.factor)
        negative = s.factor.could_extract_minus_sign()
        if isinstance(s.inner, (Term, Named)):
            return [(factor + inner[0][0], negative)]
        opening, closing = (
            ("<mo>&#8968;</mo>", "<mo>&#8969;</mo>") if isinstance(s.inner, Ceiling) else ("<mo>(</mo>", "<mo>)</mo>")
        )
        if isinstance(s.inner, Ceiling):
            inner = pieces(s.inner.inner)
        inner[0] = (factor + opening + inner[0][0], negative)
        inner[-1] = (inner[-1][0] + closing, inner[-1][1])
        return inner
    if isinstance(s, Ceiling):
        inner = pieces(s.inner)
        inner[0] = ("<mo>&#8968;</mo>" + inner[0][0], False)
        inner[-1] = (inner[-1][0] + "<mo>&#8969;</mo>", inner[-1][1])
        return inner
    if isinstance(s, Ratio):
        num = "".join(p for p, _ in pieces(s.numerator))
        den = "".join(p for p, _ in pieces(s.denominator))
        return [(f"<mfrac><mrow>{num}</mrow><mrow>{den}</mrow></mfrac>", False)]
    if isinstance(s, Peak):
        return [*pieces(s.states), ("<mo>+</mo><mi>max</mi><mo>(</mo><mo>&#8230;</mo><mo>)</mo>", False)]
    raise TypeError(f"pieces: not a shaped formula: {s!r}")


def mathml_lines(s: Shaped, per_line: int = 4) -> list[str]:
    """The MathML of ``s`` in lines of ``per_line`` pieces (a line after the first starts with its sign)."""
    got = [p for p, _ in pieces(s)]
    return ["".join(got[i : i + per_line]) for i in range(0, len(got), per_line)] or ["<mn>0</mn>"]
