"""LaTeX of expressions through sympy's printer, with costmodel's symbol names (``d_ff`` → ``d_{ff}``).

Printing is configured through printer settings, not string munging. The graph layer renders cost records
with it in notebooks; the report layer's documents build on it (:mod:`costmodel.render.latex`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sympy
from sympy.printing.latex import LatexPrinter


class _Printer(LatexPrinter):
    """sympy's LaTeX printer; a whole number of 10 digits or more ending in at least 6 zeros is written
    ``m \\cdot 10^{k}`` (exactly the number: a --tokens 15T substituted into 6ND gave ``180000000000000``)."""

    def _print_Integer(self, expr) -> str:
        n = int(expr)
        digits = str(abs(n))
        zeros = len(digits) - len(digits.rstrip("0"))
        if len(digits) < 10 or zeros < 6:
            return str(n)
        mantissa = digits.rstrip("0")
        head = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
        return ("-" if n < 0 else "") + rf"{head} \cdot 10^{{{len(digits) - 1}}}"


_PRINTER = _Printer({"mul_symbol": "dot", "fold_short_frac": False, "order": "lex"})  # _SETTINGS


def latex(expr: sympy.Expr) -> str:
    r"""LaTeX of an expression, terms in a stable order.

    >>> from costmodel.symbols import B, T, d, d_ff
    >>> latex(6*B*T*d*d_ff)
    '6 \\cdot B \\cdot T \\cdot d \\cdot d_{ff}'
    >>> latex(180000000000000*d**2)  # 6 × 15T tokens, exactly
    '1.8 \\cdot 10^{14} \\cdot d^{2}'
    """
    names = unsafe_symbol_names(expr)
    if not names:
        return _PRINTER.doprint(expr)
    return _Printer({**_SETTINGS, "symbol_names": names}).doprint(expr)


_SETTINGS = {"mul_symbol": "dot", "fold_short_frac": False, "order": "lex"}
_SAFE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*")


def unsafe_symbol_names(expr: sympy.Expr) -> dict[sympy.Symbol, str]:
    r"""The symbols of ``expr`` whose names are not letters, digits and ``_`` subscripts (a builder's
    ``\input{/etc/passwd}``), each with its name as escaped text: never LaTeX a document runs.

    >>> unsafe_symbol_names(sympy.Symbol(r"\input{x}") + sympy.Symbol("d_ff"))
    {\input{x}: '\\text{\\textbackslash{}input\\{x\\}}'}
    """
    free = getattr(expr, "free_symbols", ())
    return {s: rf"\text{{{escape(s.name)}}}" for s in free if not _SAFE_NAME.fullmatch(s.name)}


_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    # text of reports: the few signs beyond ASCII they use, in math (pdflatex's fonts lack them)
    "×": r"$\times$",
    "·": r"$\cdot$",
    "µ": r"$\mu$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "→": r"$\to$",
    "≈": r"$\approx$",
    "∞": r"$\infty$",
    "’": "'",
    "–": "--",
    "—": "---",
}


def escape(text: str) -> str:
    r"""Plain text made safe for LaTeX: ``"50% of a_b"`` → ``'50\\% of a\\_b'``; a letter, number or sign
    past Latin Extended-A that pdflatex cannot set (a CJK folder name: 模) as its code point, ``U+6A21``.

    >>> escape("模型/config.json")
    '\\texttt{U+6A21}\\texttt{U+578B}/config.json'
    >>> escape("--hardware")  # two hyphens, not an en dash
    '-{}-hardware'
    """
    out = "".join(_SPECIAL.get(c) or (_code_point(c) if ord(c) > 0x17F else c) for c in str(text))
    # TeX sets -- as an en dash and --- as an em dash: a flag (--hardware) keeps its two hyphens
    return out.replace("--", "-{}-").replace("--", "-{}-")


def _code_point(c: str) -> str:
    import unicodedata  # deferred: only text past Latin needs it

    return rf"\texttt{{U+{ord(c):04X}}}" if unicodedata.category(c)[0] in "LMNS" else c


def cost_latex(fields: Mapping[str, sympy.Expr]) -> str:
    """``$\\begin{aligned}...\\end{aligned}$`` of named expressions (Jupyter's ``_repr_latex_``)."""
    body = r" \\ ".join(rf"\mathrm{{{escape(k)}}} &= {latex(v)}" for k, v in fields.items())
    return rf"$\begin{{aligned}}{body}\end{{aligned}}$"
