r"""Shaped formulas (:mod:`costmodel.formulas.shaped`) as LaTeX a paper can paste: lines that fit the page.

A shaped formula prints as *pieces*, the places between them where a line may break (before a ``+`` or
``-``, at any depth: a pulled-out factor opens ``\bigl(`` on one line and closes ``\bigr)`` on another, which
``\left(``/``\right)`` could not). :func:`lines` packs pieces into lines of about :data:`LINE` characters.
Products print without a dot (``72 B L T d^{2}``), as papers write them; every symbol name that is not letters
and ``_`` subscripts prints as text (:func:`costmodel.graph.printing.unsafe_symbol_names`).

:func:`fragment` is ``derive --format latex``: a glossary of symbols, the formulas grouped by what they count,
the liveness peak as states plus the largest of its named points, and the per-op table, for a plain
``\documentclass{article}\usepackage{amsmath,amssymb,booktabs}`` document (:data:`PACKAGES`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import sympy
from sympy.printing.latex import LatexPrinter

from ..formulas.shaped import Ceiling, Named, Peak, Ratio, Scaled, Shaped, Sum, Term, shape
from ..graph.printing import escape, unsafe_symbol_names
from .latex import breakable, key_latex, number

#: What :func:`fragment` needs from the preamble.
PACKAGES = ("amsmath", "amssymb", "booktabs")
#: Characters of math one line of a plain article's text width holds (10 pt, 345 pt wide).
LINE = 54
#: A left side wider than this stands in an environment of its own (an aligned column that wide leaves no room).
SHORT = 26
#: A fraction longer than this prints as ``(a + b) / (c + d)``, which may break.
FRACTION = 40
_FRACTION = re.compile(r"\\frac\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_SETTINGS = {"mul_symbol": None, "fold_short_frac": False, "order": "lex"}


def tex(expr: sympy.Expr) -> str:
    r"""LaTeX of one term, products without a dot: ``72 B L T d^{2}``, ``\frac{T}{6 d}``.

    >>> from costmodel.symbols import B, T, d_ff
    >>> tex(6*B*T*d_ff)
    '6 B T d_{ff}'
    """
    names = unsafe_symbol_names(expr)
    return LatexPrinter({**_SETTINGS, "symbol_names": names} if names else _SETTINGS).doprint(expr)


def width(text: str) -> int:
    r"""About how many characters wide LaTeX math prints: a fraction its longer part, a command one, braces
    and scripts nothing, a sign with its spaces two."""
    text = _FRACTION.sub(lambda m: max(m.group(1), m.group(2), key=len), text)
    text = re.sub(r"\\(max|min)\b", "max", text)
    text = re.sub(r"\\(frac|left|right|bigl|bigr|big|mathrm|text|texttt|quad)\b", "", text)
    text = re.sub(r"\\[A-Za-z]+", "·", text)
    return len(re.sub(r"[{}_^ ]", "", text)) + len(re.findall(r" [-+=] ", text))


class Spelling:
    """How a target writes the pieces of a shaped formula: LaTeX here, MathML in :mod:`costmodel.render.mathml`
    (one walk, :func:`pieces`, for both)."""

    plus, minus = "+ ", "-"

    def term(self, expr: sympy.Expr) -> str:
        return tex(expr)

    def name(self, name: str) -> str:
        """A named quantity, given by its LaTeX (``N_{layer}``)."""
        return name

    def times(self, factor: str, first: str) -> str:
        return f"{factor} {first}"

    def around(self, inner: list[str], ceiling: bool = False) -> list[str]:
        """``inner``'s pieces in brackets (a ceiling's when ``ceiling``), the opening on the first, the closing
        on the last: no ``\\left``/``\\right`` pair, which could not span lines."""
        if ceiling:
            opening, closing = r"\bigl\lceil ", r" \bigr\rceil"
        else:
            opening, closing = (r"\bigl(", r"\bigr)") if any(r"\frac" in p for p in inner) else ("(", ")")
        return _bracketed(inner, opening, closing)

    def ratio(self, num: list[str], den: list[str]) -> list[str]:
        whole = rf"\frac{{{' '.join(num)}}}{{{' '.join(den)}}}"
        if width(whole) <= FRACTION:
            return [whole]
        num = num if len(num) == 1 else self.around(num)
        den = den if len(den) == 1 else self.around(den)
        return [*num, r"\big/ " + den[0], *den[1:]]

    def peak(self) -> str:
        return r"+ \max_{i} A_{i}"


LATEX = Spelling()


def _bracketed(inner: list[str], opening: str, closing: str) -> list[str]:
    out = list(inner)
    out[0] = opening + out[0]
    out[-1] += closing
    return out


def negative(s: Shaped) -> bool:
    """Whether ``s`` prints with a leading minus (then a sum writes no ``+`` before it)."""
    if isinstance(s, Term):
        return s.expr.could_extract_minus_sign()
    if isinstance(s, Scaled):
        return negative(s.inner) if s.factor == 1 else s.factor.could_extract_minus_sign()
    if isinstance(s, Sum):
        return negative(s.parts[0])
    return False


def pieces(s: Shaped, spell: Spelling = LATEX) -> list[str]:
    """``s`` as ``spell`` writes it, cut where a line may break; each piece after the first starts with its sign."""
    if isinstance(s, Term):
        return [spell.term(s.expr)]
    if isinstance(s, Named):
        return [spell.name(s.name)]
    if isinstance(s, Sum):
        out: list[str] = []
        for i, part in enumerate(s.parts):
            got = pieces(part, spell)
            if i and not negative(part):
                got[0] = spell.plus + got[0]
            out += got
        return out
    if isinstance(s, Scaled):
        inner = pieces(s.inner, spell)
        if s.factor == 1:
            return inner
        if not isinstance(s.inner, (Term, Ceiling, Named)):
            inner = spell.around(inner)
        inner[0] = spell.times(spell.minus if s.factor == -1 else spell.term(s.factor), inner[0])
        return inner
    if isinstance(s, Ceiling):
        return spell.around(pieces(s.inner, spell), ceiling=True)
    if isinstance(s, Ratio):
        return spell.ratio(pieces(s.numerator, spell), pieces(s.denominator, spell))
    if isinstance(s, Peak):
        return [*pieces(s.states, spell), spell.peak()]
    raise TypeError(f"pieces: not a shaped formula: {s!r}")


def lines(s: Shaped, room: int = LINE) -> list[str]:
    """The pieces of ``s`` packed into lines of about ``room`` characters (a piece longer stays whole)."""
    out: list[str] = []
    for p in pieces(s):
        if out and width(out[-1] + " " + p) <= room:
            out[-1] += " " + p
        else:
            out.append(p)
    return out


def rows(lhs: str, s: Shaped, room: int = LINE, column: int | None = None, relation: str = "=") -> list[str]:
    r"""``align*`` rows of ``lhs = s``: the first at ``&=``, the rest indented at ``&\quad``; ``column``: how wide
    the environment's left column is (its widest left side), ``lhs``'s own width by default."""
    column = width(lhs) if column is None else column
    first, *rest = lines(s, room - column - 2)
    return [rf"{lhs} &{relation} {first}", *(rf"&\quad {line}" for line in rest)]


def long_rows(lhs: str, s: Shaped, room: int = LINE, relation: str = "=") -> list[str]:
    r"""Rows of ``lhs = s`` for a left side too long to align (an environment of its own, an empty left
    column): ``lhs =`` and the first line, then the rest indented."""
    first, *rest = lines(s, room - 4)
    fits = width(lhs) + width(first) + 2 <= room
    head = [rf"&{lhs} {relation} {first}"] if fits else [rf"&{lhs} {relation}", rf"&\quad {first}"]
    return head + [rf"&\quad {line}" for line in rest]


def align(rowlist: Sequence[str]) -> str:
    r"""An ``align*`` of rows; page breaks allowed between them (only here: a group keeps the setting)."""
    return "{\\allowdisplaybreaks\n\\begin{align*}\n" + " \\\\\n".join(rowlist) + "\n\\end{align*}}"


def labels_text(labels: Sequence[str], most: int = 4) -> str:
    """A point's names as text, at most ``most`` of them and how many more."""
    shown = ",\n".join(breakable(x) for x in labels[:most])
    return shown + (f" and {len(labels) - most} more" if len(labels) > most else "")


def peak_rows(lhs: str, p: Peak, *, intertext: bool = True, labels: bool = True) -> list[str]:
    r"""A peak as ``lhs = S + \max_i A_i``, ``S`` = the states, then each point ``A_i`` after its names (an
    ``\intertext``; without ``intertext``, for KaTeX and MathJax, a ``\text`` row; without ``labels``, none:
    the page names the points beside the formula, :func:`point_labels`)."""
    column = width(rf"A_{{{len(p.points)}}}")
    out = [rf"&{lhs} = S + \max_{{i}} A_{{i}}", *rows("S", p.states, column=column)]
    if p.common is not None:  # the part most points share, once
        out += rows("K", shape(sympy.expand(p.common.expr), counts=_counts(p.common.expr)), column=column)
    for i, (names, point) in enumerate(p.points, 1):
        first, *rest = rows(rf"A_{{{i}}}", point, column=column)
        if not labels:
            out += [first, *rest]
        elif intertext:
            out += [rf"\intertext{{\raggedright $A_{{{i}}}$: live at {labels_text(names)}}}" + "\n" + first, *rest]
        else:
            out += [rf"&\text{{$A_{{{i}}}$: live at {escape(point_labels(names))}}}", first, *rest]
    return out


def point_labels(labels: Sequence[str], most: int = 4) -> str:
    """A point's names as plain text, at most ``most`` of them and how many more."""
    return ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")


def _counts(expr: sympy.Expr) -> list[sympy.Symbol]:
    from ..symbols import L  # the block count K is collected by (a point's part is L times a layer's)

    return [L] if expr.has(L) else []


def display(shaped: Mapping[str, Shaped], lhs: Callable[[str], str] = key_latex) -> str:
    r"""The rows of an ``aligned`` (or ``align*``) body of every formula, ``=`` aligned, a peak by its named
    points in ``\text`` rows: what Markdown's ``$$…$$``, Jupyter and a report's derivation show."""
    out: list[str] = []
    column = max((width(lhs(k)) for k, s in shaped.items() if not isinstance(s, Peak)), default=0)
    for key, s in shaped.items():
        if isinstance(s, Peak):
            out += peak_rows(lhs(key), s, intertext=False)
        else:
            out += rows(lhs(key), s, room=max(LINE, column + 40), column=column)
    return " \\\\\n".join(out)


def winner_text(p: Peak, values: Mapping[sympy.Symbol, int], where: str) -> str:
    """Which point is the peak at ``values`` and its bytes, as a sentence."""
    i, names, live = p.winner(values)
    states = int(p.states.value().xreplace(values))
    return (
        rf"{{\raggedright At {escape(where)}, the peak is $A_{{{i + 1}}}$ ({labels_text(names)}): "
        f"${number(live)}$ bytes live over ${number(states)}$ bytes of states, "
        f"${number(live + states)}$ bytes in all.\\par}}"
    )


def symbols_table(symbols: Mapping[str, str]) -> str:
    """The glossary: each symbol and what it stands for."""
    body = [rf"${tex(sympy.Symbol(s))}$ & {escape(about)} \\" for s, about in symbols.items()]
    return "\n".join(
        [r"\begin{tabular}{@{}lp{0.8\textwidth}@{}}", r"\toprule", *body, r"\bottomrule", r"\end{tabular}"]
    )


def _op_name(name: str) -> str:
    return r"\texttt{" + breakable(name) + "}"


def ops_tables(ops: Mapping[str, Mapping[str, object]], shaped: Mapping[str, tuple[Shaped, Shaped]], per: int = 15):
    """The per-op forward costs (name and kind, count, FLOPs, bytes) in tables of ``per`` rows that fit the
    width and a page."""
    head = [
        r"\noindent\begin{tabular}{@{}p{0.24\textwidth}p{0.11\textwidth}p{0.26\textwidth}p{0.26\textwidth}@{}}",
        r"\toprule",
        r"op (kind) & count & FLOPs & bytes \\",
        r"\midrule",
    ]
    tables, body = [], []
    for name, row in ops.items():
        flops, nbytes = shaped[name]
        cells = [
            rf"{_op_name(name)} ({breakable(str(row['kind']))})",
            f"${tex(row['count'])}$",
            "$" + " ".join(pieces(flops)) + "$",
            "$" + " ".join(pieces(nbytes)) + "$",
        ]
        body.append(" & ".join(cells) + r" \\")
        if len(body) == per:
            tables.append(body)
            body = []
    if body:
        tables.append(body)
    return "\n\n".join("\n".join([*head, *b, r"\bottomrule", r"\end{tabular}"]) for b in tables)


def source_lines(text: str, most: int = 200) -> str:
    """``text`` with every line longer than ``most`` characters broken at spaces (a comment's continuations
    stay comments): TeX reads a line end as a space, so the document is the same."""
    out = []
    for line in text.split("\n"):
        lead = "% " if line.startswith("%") else ""
        while len(line) > most and " " in line[len(lead) + 1 : most]:
            cut = line.rindex(" ", len(lead) + 1, most)
            out.append(line[:cut])
            line = lead + line[cut + 1 :]
        out.append(line)
    return "\n".join(out)


#: The headings of :func:`fragment`, by a key's first part.
GROUPS = {
    "params": "Parameters",
    "flops": "FLOPs",
    "bytes": "Bytes moved",
    "tokens": "Tokens",
    "memory_bytes": "Memory (bytes)",
    "memory": "Memory",
    "communication_bytes": "Communication (bytes)",
}


def fragment(
    title: str,
    symbols: Mapping[str, str],
    shaped: Mapping[str, Shaped],
    ops: Mapping[str, Mapping[str, object]],
    ops_shaped: Mapping[str, tuple[Shaped, Shaped]],
    at: tuple[str, Mapping[sympy.Symbol, int]] | None = None,
    named: Mapping[str, Shaped] | None = None,
    leading: Mapping[str, Mapping[str, object]] | None = None,
    note: str = "",
    explained: str = "",
) -> str:
    r"""``derive --format latex``: the packages it needs (a comment), the glossary, the ``named`` quantities
    (LaTeX name → shaped definition) the formulas use, every formula by group (the
    keys that are 0 named in one line), the peak with its winning point at ``at`` (a config's name and values),
    and the per-op table; ``note``: a sentence after the formulas. ``leading`` (key → its leading ``expression`` and the ``share`` it covers): those
    instead of the formulas, each ``≈`` with its share; ``explained``: LaTeX at the end (where each term comes
    from, :func:`costmodel.render.explained.latex`)."""
    tail = ["", explained] if explained else []
    out = [
        f"% {title}",
        "% needs \\usepackage{" + ",".join(PACKAGES) + "} (a plain article compiles it)",
        r"\paragraph*{Symbols} (positive integers)",
        "",
        symbols_table(symbols),
    ]
    if named:
        out += ["", r"\paragraph*{Named quantities}", "", _aligned(list(named.items()))[0]]
    if leading is not None:
        return source_lines("\n".join(out + _leading(leading, at) + tail))
    zero = [k for k, s in shaped.items() if s.value() == 0]
    by_group: dict[tuple[str, str], list[str]] = {}  # (heading, the keys' head it stands for) → keys
    for key in shaped:
        if key not in zero:
            head = key.split(".")[0]
            group = (GROUPS[head], head) if head in GROUPS and "." in key else ("Other", "")
            by_group.setdefault(group, []).append(key)
    for (heading, head), keys in by_group.items():
        out += ["", rf"\paragraph*{{{heading}}}" + (rf" (\texttt{{{escape(head)}.}}$\ldots$)" if head else ""), ""]
        aligned: list[tuple[str, Shaped]] = []  # short left sides, one environment, their = signs aligned
        for key in keys:
            s = shaped[key]
            lhs = key_latex(key.partition(".")[2] if head else key)  # the heading names the head
            if width(lhs) <= SHORT and not isinstance(s, Peak):
                aligned.append((lhs, s))
                continue
            out += _aligned(aligned)
            aligned = []
            out.append(align(peak_rows(lhs, s) if isinstance(s, Peak) else long_rows(lhs, s)))
            if isinstance(s, Peak) and at is not None:
                out.append(winner_text(s, at[1], at[0]))
        out += _aligned(aligned)
    if note:  # a sentence (the peak's parts at its winning point), its dotted keys breakable
        out += ["", r"{\raggedright\noindent " + breakable(note) + r"\par}"]
    if zero:
        out += ["", r"{\raggedright\noindent Zero here: " + ",\n".join(map(_op_name, zero)) + r".\par}"]
    out += [
        "",
        r"\paragraph*{Per op} (forward, one run; count = runs per step)",
        "",
        ops_tables(ops, ops_shaped),
        *tail,
    ]
    return source_lines("\n".join(out))


def _leading(leading: Mapping[str, Mapping[str, object]], at) -> list[str]:
    where = escape(at[0]) if at else "the config"
    out = ["", rf"\paragraph*{{Leading terms}} at {where}, each with the share of the exact value it covers", ""]
    for key, row in leading.items():
        lhs = key_latex(key)
        s = shape(row["expression"], at=at[1] if at else None)
        got = long_rows(lhs, s, relation=r"\approx")
        got[-1] += rf" \quad ({100 * float(row['share']):.1f}\%)"
        out.append(align(got))
    return out


def _aligned(pairs: list[tuple[str, Shaped]]) -> list[str]:
    if not pairs:
        return []
    column = max(width(lhs) for lhs, _ in pairs)
    return [align([r for lhs, s in pairs for r in rows(lhs, s, column=column)])]


def whole_document(body: str) -> str:
    """``body`` in a document pdflatex compiles as it is."""
    return (
        "\\documentclass{article}\n\\usepackage{"
        + ",".join(PACKAGES)
        + "}\n\\begin{document}\n"
        + body
        + "\n\\end{document}\n"
    )
