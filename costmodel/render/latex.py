"""LaTeX (and plain-text) rendering through sympy's printer, with our symbol names.

Symbols print as declared (``d_ff`` → ``d_{ff}``, ``T_max`` → ``T_{max}``);
printing is configured through printer settings, not string munging.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sympy

from ..graph.printing import cost_latex, escape, latex  # noqa: F401 (the document helpers build on them)


def breakable(text: str, marks: str = "._") -> str:
    r"""``text`` escaped for LaTeX, free to break after each of ``marks`` (dots and underscores; ``/`` too if
    given) inside a word: a dotted key or op name in a sentence or a table cell.

    >>> breakable("memory_bytes.peak, then.")
    'memory\\_\\allowbreak bytes.\\allowbreak peak, then.'
    """
    escaped = escape(text)
    pattern = "|".join(re.escape(r"\_" if m == "_" else m) for m in marks)
    return re.sub(rf"(?<=\w)({pattern})(?=[\w\\])", r"\1\\allowbreak ", escaped)


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
    rows = [r"\begin{tabular}{llllll}", r"\toprule", r"op & kind & count & FLOPs & bytes & FLOPs/byte \\", r"\midrule"]
    for name, row in ops.items():
        cells = [
            rf"\texttt{{{name.replace('_', chr(92) + '_')}}}",
            str(row["kind"]),
            f"${latex(row['count'])}$",
            f"${latex(row['flops'])}$",
            f"${latex(row['bytes'])}$",
            f"${latex(row['intensity'])}$",
        ]
        rows.append(" & ".join(cells) + r" \\")
    rows += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(rows)


def number(value: int | float) -> str:
    r"""An exact integer with thin-space thousands (``1\,024``); other numbers in scientific form."""
    if isinstance(value, int) or getattr(value, "is_Integer", False):
        return rf"{int(value):,}".replace(",", r"\,")
    mantissa, exp = f"{float(value):.4e}".split("e")
    return rf"{mantissa} \times 10^{{{int(exp)}}}"


def visible(text: str) -> int:
    r"""About how many characters wide LaTeX math prints (commands and braces take no room; ``\cdot`` one)."""
    return len(re.sub(r"[{}_^]", "", re.sub(r"\\(cdot|quad)", "·", re.sub(r"\\(mathrm|frac|left|right)", "", text))))


#: Characters of math a line of the page holds (10pt on a 2 cm-margin page), the left side included.
LINE = 96


def terms(expr: sympy.Expr, per_line: int = 4, width: int | None = None) -> list[str]:
    """LaTeX of a sum broken into lines of at most ``per_line`` terms, and (``width``) of about ``width``
    characters (each line after the first starts with its sign), so long formulas fit a page."""
    expr = sympy.expand(expr)
    parts = expr.as_ordered_terms(order="lex") if isinstance(expr, sympy.Add) else [expr]
    groups: list[list[sympy.Expr]] = []
    for part in parts:
        if (
            groups
            and len(groups[-1]) < per_line
            and (width is None or visible(latex(sympy.Add(*groups[-1], part, evaluate=False))) <= width)
        ):
            groups[-1].append(part)
        else:
            groups.append([part])
    lines = []
    for i, group in enumerate(groups):
        text = latex(sympy.Add(*group, evaluate=False))
        lines.append(text if i == 0 or text.startswith("-") else "+ " + text)
    return lines or ["0"]


def broken_equations(expressions: Mapping[str, sympy.Expr], per_line: int = 4) -> str:
    """Like :func:`equations`, with long sums broken over several lines that fit the page."""
    rows = []
    room = max(36, LINE - max((visible(key_latex(k)) for k in expressions), default=0))  # align*: one column
    for key, expr in expressions.items():
        lhs = key_latex(key)
        first, *rest = terms(expr, per_line, room)
        rows.append(rf"  {lhs} &= {first}")
        rows += [rf"  &\quad {line}" for line in rest]
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"


def derivation(rows: list[tuple[str, sympy.Expr, sympy.Expr]], lhs: str, total: sympy.Expr) -> str:
    r"""A term-by-term derivation: ``lhs = Σ count × per run`` with one line per op, then the total.

    ``rows`` holds (op name, count, what one run contributes).
    """
    lines = [rf"  {lhs} &= \sum_{{\text{{ops}}}} \text{{count}} \times \text{{one run}} \\"]
    shown = [(name, count, per_run) for name, count, per_run in rows if per_run != 0]
    room = max(30, LINE - visible(lhs) - max((len(name) for name, _, _ in shown), default=0) - 6)
    for name, count, per_run in shown:
        factor = "" if count == 1 else latex(count) + r" \cdot "
        body = latex(per_run)
        if visible(factor + body) <= room:  # one line
            if factor and isinstance(per_run, sympy.Add):
                body = rf"\left({body}\right)"
            lines.append(rf"  &\quad + {factor}{body} && \text{{{escape(name)}}} \\")
            continue
        first, *more = terms(per_run, 8, room - visible(factor) - 2)  # a long term: over several lines
        opening, closing = ("(", ")") if factor else ("", "")
        lines.append(rf"  &\quad + {factor}{opening}{first} && \text{{{escape(name)}}} \\")
        lines += [rf"  &\qquad {line}{closing if i == len(more) - 1 else ''} \\" for i, line in enumerate(more)]
    first, *rest = terms(total, 4, room)  # the names column stands beside these lines too
    lines.append(rf"  &= {first}" + (r" \\" if rest else ""))
    lines += [rf"  &\quad {line}" + (r" \\" if i < len(rest) - 1 else "") for i, line in enumerate(rest)]
    return "\\begin{align*}\n" + "\n".join(lines) + "\n\\end{align*}"
