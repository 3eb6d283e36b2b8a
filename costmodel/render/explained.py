r"""Where each term of a formula comes from (``derive --explain``), as a page shows it: for each explained
expression a table of its terms, leading first, each with the ops that contribute it grouped by block
(``layers.attn.q/k/v/proj, layers.mlp.fc/proj``). LaTeX tables fit a plain article's text width (the ops wrap
after a dot, a slash or a comma's space) and a page (:data:`PER` rows a table); Markdown is one table per expression.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .latex import breakable
from .paper import tex

#: Rows of one LaTeX table (a longer explanation continues in the next table: a plain article has no longtable).
PER = 15


def by_block(ops: Sequence[str]) -> str:
    """Op names grouped by their block, the way a reader checks them: ``layers.attn.q/k/v, layers.mlp.fc``.

    >>> by_block(["layers.attn.q", "layers.attn.k", "lm_head"])
    'layers.attn.q/k, lm_head'
    """
    by: dict[str, list[str]] = {}
    for op in ops:
        head, _, last = op.rpartition(".")
        by.setdefault(head, []).append(last)
    return ", ".join(f"{head}.{'/'.join(lasts)}" if head else "/".join(lasts) for head, lasts in by.items())


def _wrapping(text: str) -> str:
    """Text in type that a line may break after each dot, slash and underscore of (and at a space)."""
    return r"\texttt{" + breakable(text, "./_") + "}"


def latex(explained: Mapping[str, Sequence[Mapping[str, object]]]) -> str:
    r"""``\paragraph*{Where each term comes from}`` and, for each expression, its terms and their ops in tables of
    :data:`PER` rows (two ``p`` columns, 0.94 of the text width with the column gap)."""
    if not explained:
        return ""
    out = [r"\paragraph*{Where each term comes from} (each term, leading first, and the ops that contribute it)"]
    for key, terms in explained.items():
        for start in range(0, len(terms), PER):
            head = rf"term of {_wrapping(key)}" + (" (continued)" if start else "")
            body = [rf"${tex(t['term'])}$ & {_wrapping(by_block(list(t['ops'])))} \\" for t in terms[start:][:PER]]
            out += [
                "",
                r"\noindent\begin{tabular}{@{}p{0.4\textwidth}p{0.54\textwidth}@{}}",
                r"\toprule",
                rf"{head} & ops (by block) \\",
                r"\midrule",
                *body,
                r"\bottomrule",
                r"\end{tabular}",
            ]
    return "\n".join(out)


def text(explained: Mapping[str, Sequence[Mapping[str, object]]]) -> str:
    """Plain text: for each expression its terms (as sympy prints them), each with its ops by block."""
    out = ["where each term comes from (ops, by block):"]
    for key, terms in explained.items():
        out += [f"{key}:", *(f"  {t['term']!s:<28} <- {by_block(list(t['ops']))}" for t in terms)]
    return "\n".join(out)


def markdown(explained: Mapping[str, Sequence[Mapping[str, object]]]) -> str:
    """For each expression a Markdown table: each term (KaTeX/MathJax ``$…$``) and its ops by block."""
    out: list[str] = []
    for key, terms in explained.items():
        out += ["", f"| term of `{key}` | ops (by block) |", "|---|---|"]
        out += [f"| ${tex(t['term'])}$ | `{by_block(list(t['ops']))}` |" for t in terms]
    return "\n".join(["", "**Where each term comes from**", *out]) if out else ""


__all__ = ["by_block", "latex", "markdown", "text"]
