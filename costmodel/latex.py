"""LaTeX (and plain-text) rendering through sympy's printer, with our symbol names.

Symbols print as declared (``d_ff`` → ``d_{ff}``, ``T_max`` → ``T_{max}``);
printing is configured through printer settings, not string munging.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy
from sympy.printing.latex import LatexPrinter

_PRINTER = LatexPrinter({"mul_symbol": "dot", "fold_short_frac": False, "order": "lex"})


def latex(expr: sympy.Expr) -> str:
    r"""LaTeX of an expression, terms in a stable order.

    >>> from costmodel.symbols import B, T, d, d_ff
    >>> latex(6*B*T*d*d_ff)
    '6 \\cdot B \\cdot T \\cdot d \\cdot d_{ff}'
    """
    return _PRINTER.doprint(expr)


def key_latex(key: str) -> str:
    r"""A dotted key as a LaTeX name: ``flops.matmul.forward`` → ``\mathrm{flops}_{\mathrm{matmul,forward}}``."""
    head, *rest = key.replace("_", r"\_").split(".")
    sub = ",".join(rest)
    return rf"\mathrm{{{head}}}" + (rf"_{{\mathrm{{{sub}}}}}" if sub else "")


def equations(expressions: Mapping[str, sympy.Expr]) -> str:
    """An ``align*`` environment, one quantity per line."""
    lines = [rf"  {key_latex(k)} &= {latex(v)}" for k, v in expressions.items()]
    return "\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}"


def ops_table(ops: Mapping[str, Mapping[str, object]]) -> str:
    """A booktabs table of the per-op forward costs (name, kind, count, FLOPs, bytes, intensity)."""
    rows = [r"\begin{tabular}{llllll}", r"\toprule",
            r"op & kind & count & FLOPs & bytes & FLOPs/byte \\", r"\midrule"]
    for name, row in ops.items():
        cells = [rf"\texttt{{{name.replace('_', chr(92) + '_')}}}", str(row["kind"]),
                 f"${latex(row['count'])}$",
                 f"${latex(row['flops'])}$", f"${latex(row['bytes'])}$", f"${latex(row['intensity'])}$"]
        rows.append(" & ".join(cells) + r" \\")
    rows += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(rows)
