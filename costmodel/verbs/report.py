r"""Reports as documents, answer first: a standalone LaTeX file that compiles with pdflatex, Markdown with
GitHub math, JSON, and a self-contained interactive HTML page (:mod:`costmodel.render.html`); in Jupyter a
:class:`Document` renders itself (``_repr_latex_``, ``_repr_html_``).

A document is a list of :class:`Section`\ s, each made of blocks (:mod:`costmodel.render.blocks`).
:data:`~costmodel.render.sections.DOCUMENT_SECTIONS` builds them from a
:class:`~costmodel.render.sections.Context`; a new capability appends a function to it.

>>> doc = report("gpt2-small")
>>> [s.title for s in doc.sections][:3]
['Summary', 'Derivation', 'Memory per device']
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import CostModelError, closest
from ..files import write_all, write_atomic
from ..options import Options
from ..render import latex as tex
from ..render.blocks import Box, Cell, Math, Section, Table, Text
from ..render.results import dumps
from ..render.sections import DOCUMENT_SECTIONS, PRINTED, Context, printable
from ..sections.quantities import quantities
from ..sections.run import prepare, resolve
from .derive import derive, expressions
from .estimate import estimate


class Later(Mapping):
    """A mapping computed on first use: a report's JSON prints every formula, which for a model of many
    distinct blocks (deepseek-v3) takes minutes, and a LaTeX or HTML report never reads it."""

    def __init__(self, make: Callable[[], Mapping[str, object]]):
        self._make = make

    @functools.cached_property
    def _data(self) -> Mapping[str, object]:
        return self._make()

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class LaterSections(Sequence):
    """The sections, built on first use: the HTML page is rendered from the quantities themselves and reads
    none of them, so a report written only as HTML does not build (and shape, and evaluate) them at all."""

    def __init__(self, make: Callable[[], list[Section]]):
        self._make = make

    @functools.cached_property
    def _sections(self) -> tuple[Section, ...]:
        return tuple(self._make())

    def __getitem__(self, i):
        return self._sections[i]

    def __len__(self) -> int:
        return len(self._sections)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"LaterSections({list(self._sections)!r})" if "_sections" in self.__dict__ else "LaterSections(...)"


@dataclass(frozen=True)
class Document:
    """A report: a title and sections. ``to_latex()`` is a whole pdflatex-ready file."""

    title: str
    sections: Sequence[Section]  # a tuple, or LaterSections: built when first read
    data: Mapping[str, object] = field(default_factory=dict)  # the exact numbers, for to_json()
    page: Callable[[], str] | None = field(default=None, repr=False, compare=False)  # the HTML page, when asked

    def to_latex(self) -> str:
        body = "\n\n".join(_section_latex(s) for s in self.sections)
        return (
            PREAMBLE
            + rf"\title{{{tex.escape(self.title)}}}"
            + "\n\\date{}\n\\begin{document}\n\\maketitle\n\n"
            + body
            + "\n\n\\end{document}\n"
        )

    def to_markdown(self) -> str:
        return f"# {self.title}\n\n" + "\n\n".join(_section_markdown(s) for s in self.sections) + "\n"

    def to_html(self) -> str:
        """The interactive page: one self-contained HTML file whose numbers follow its controls."""
        if self.page is None:
            raise CostModelError("report: this document has no HTML page (build it with costmodel.report)")
        return self.page()

    def write(self, kind: str, path: str) -> None:
        """Write the document as ``kind`` (``latex``, ``markdown``, ``json``, ``html``) to ``path``, atomically."""
        render = {"latex": self.to_latex, "markdown": self.to_markdown, "json": self.to_json, "html": self.to_html}
        if kind not in render:
            raise CostModelError(f"report: kind must be one of {', '.join(render)}, received {kind!r}")
        write_atomic(path, render[kind](), f"the {kind} report")

    def write_all(self, paths: Mapping[str, str]) -> None:
        """Write each ``kind → path`` of ``paths``: every output rendered and staged first, renamed last, so a
        failure (a missing folder for one of them) changes no file."""
        render = {"latex": self.to_latex, "markdown": self.to_markdown, "json": self.to_json, "html": self.to_html}
        for kind in paths:
            if kind not in render:
                raise CostModelError(f"report: kind must be one of {', '.join(render)}, received {kind!r}")
        write_all([(path, render[kind](), f"the {kind} report") for kind, path in paths.items()])

    def to_json(self) -> str:
        """The exact numbers (ints), the formulas (strings and LaTeX), the section titles."""
        return dumps({"title": self.title, "sections": [s.title for s in self.sections], **self.data})

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_latex_(self) -> str:
        return "\n\n".join(_section_latex(s) for s in self.sections)

    def _repr_html_(self) -> str:
        return f"<h1>{html.escape(self.title)}</h1>" + "".join(_section_html(s) for s in self.sections)


PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[margin=2cm]{geometry}
\usepackage{amsmath}
\usepackage{booktabs}
\usepackage{graphicx}
\allowdisplaybreaks
\setlength{\emergencystretch}{2em}
"""


# -- renderers -------------------------------------------------------------------------------------


def _cell_latex(c: Cell) -> str:
    if c.math:
        return f"${c.text}$"
    if c.code:  # a key or an op name: in type, breakable after its dots and underscores
        return r"\texttt{" + tex.breakable(c.text) + "}"
    return tex.escape(c.text)


def _box_latex(b: Box) -> str:
    rows = "\n".join(rf"\textbf{{{tex.escape(k)}}} & {tex.escape(v)} \\[2pt]" for k, v in b.rows)
    return (
        "\\noindent\\fbox{\\begin{minipage}{\\dimexpr\\linewidth-2\\fboxsep-2\\fboxrule\\relax}\n"
        "\\begin{tabular}{@{}p{3.7cm}p{\\dimexpr\\linewidth-3.7cm-2\\tabcolsep\\relax}@{}}\n"
        + rows
        + "\n\\end{tabular}\n\\end{minipage}}"
    )


def _section_latex(s: Section) -> str:
    out = [rf"\section{{{tex.escape(s.title)}}}"]
    for b in s.blocks:
        if isinstance(b, Text):  # a dotted key in a sentence breaks after its dots and underscores
            out.append(tex.breakable(b.text))
        elif isinstance(b, Box):
            out.append(_box_latex(b))
        elif isinstance(b, Math):
            out.append(
                b.latex if b.latex.lstrip().startswith("\\begin") else f"\\begin{{align*}}\n{b.latex}\n\\end{{align*}}"
            )
        elif isinstance(b, Table):
            spec = b.align or "l" * len(b.header)
            rows = [
                rf"\begin{{tabular}}{{{spec}}}",
                r"\toprule",
                " & ".join(tex.escape(h) for h in b.header) + r" \\",
                r"\midrule",
            ]
            rows += [" & ".join(_cell_latex(c) for c in row) + r" \\" for row in b.rows]
            rows += [r"\bottomrule", r"\end{tabular}"]
            out.append(
                "\\begin{center}\n\\resizebox{\\ifdim\\width>\\textwidth\\textwidth\\else\\width\\fi}{!}{%\n"
                + "\n".join(rows)
                + "}\n\\end{center}"
            )
    return "\n\n".join(out)


def _markdown_math(latex: str) -> str:
    body = latex.strip()
    for env in ("align*", "align"):
        body = body.replace(f"\\begin{{{env}}}", "\\begin{aligned}").replace(f"\\end{{{env}}}", "\\end{aligned}")
    if not body.startswith("\\begin"):
        body = "\\begin{aligned}\n" + body + "\n\\end{aligned}"
    return "$$\n" + body + "\n$$"


def _section_markdown(s: Section) -> str:
    out = [f"## {s.title}"]
    for b in s.blocks:
        if isinstance(b, Text):
            out.append(b.text)
        elif isinstance(b, Box):
            out.append("\n".join(f"> **{k}**: {v}  " for k, v in b.rows).rstrip())
        elif isinstance(b, Math):
            out.append(_markdown_math(b.latex))
        elif isinstance(b, Table):
            out.append("| " + " | ".join(b.header) + " |\n|" + "---|" * len(b.header))
            out[-1] += "".join("\n| " + " | ".join(_cell_markdown(c) for c in row) + " |" for row in b.rows)
    return "\n\n".join(out)


def _cell_markdown(c: Cell) -> str:
    if c.math:
        return f"${c.text}$"
    text = c.text.replace("|", "\\|")
    return f"`{text}`" if c.code and text else text


def _section_html(s: Section) -> str:
    out = [f"<h2>{html.escape(s.title)}</h2>"]
    for b in s.blocks:
        if isinstance(b, Text):
            out.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Box):
            out.append(
                "<table class='summary'><tbody>"
                + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in b.rows)
                + "</tbody></table>"
            )
        elif isinstance(b, Math):
            out.append(html.escape(_markdown_math(b.latex)))
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header)
            body = "".join("<tr>" + "".join(f"<td>{_cell_html(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(out)


def _cell_html(c: Cell) -> str:
    text = html.escape(f"${c.text}$" if c.math else c.text)
    return f"<code>{text}</code>" if c.code else text


def equation(model, key: str, *, settings: Mapping[str, object] | None = None, **options: object) -> str:
    r"""One quantity of a family as a LaTeX ``equation*`` (long sums broken over lines).

    >>> print(equation("gpt", "flops.six_nd"))
    \begin{equation*}
    \begin{split}
      \mathrm{flops}_{\mathrm{six\_nd}} &= 72 \cdot B \cdot L \cdot T \cdot d^{2} + 78 \cdot B \cdot L \cdot T \cdot d + 12 \cdot B \cdot T \cdot d
    \end{split}
    \end{equation*}
    """
    exprs = derive(model, settings=settings, **options)["expressions"]
    if key not in exprs:
        raise CostModelError(f"equation: unknown quantity {key!r}{closest(key, exprs)}; known: {', '.join(exprs)}")
    body = tex.broken_equations({key: exprs[key]}).replace("align*", "split")
    return "\\begin{equation*}\n" + body + "\n\\end{equation*}"


def report(
    model,
    *,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    controls: tuple[str, ...] = (),
    **kwargs: object,
) -> Document:
    """The full report of one model and config (the options of :func:`costmodel.estimate`); ``controls``:
    symbols the HTML page lets a reader change besides B, T and the devices."""
    opts = Options.make(options, **kwargs)
    m = prepare(model, settings, opts).model
    values = resolve(m, opts)
    r = estimate(m, options=opts)
    # the document prints the expressions of printable's keys (and the training FLOPs): only those are expanded,
    # from the quantities the estimate derived (shown=False: a peak, which no page prints, over its maximal points);
    # the JSON export, which carries every expression, derives them all when it is written
    printed = lambda k: k.startswith(PRINTED) and not k.endswith("_share")  # noqa: E731

    def sections() -> list[Section]:  # built when a LaTeX, Markdown or JSON document reads them
        d = {"expressions": expressions(m, opts, keep=printed, shown=False)}
        ctx = Context(m, values, r, d, opts, quantities(m, opts, shown=False))
        out: list[Section] = []
        for build in DOCUMENT_SECTIONS:
            made = build(ctx)
            out += made if isinstance(made, list) else [made] if made is not None else []
        return out

    def data() -> dict[str, object]:
        every = derive(m, options=opts)["expressions"]
        shown, _ = printable(every)
        return {
            "estimate": r.to_dict(),
            "expressions": {k: str(v) for k, v in every.items()},
            "latex": {k: tex.latex(v) for k, v in shown.items()},
        }

    def page() -> str:
        from ..render.html import render  # the page writes JavaScript of every formula: only when asked for

        return render(m, opts, r, controls)

    return Document(f"costmodel report: {r['model']}", LaterSections(sections), Later(data), page)


__all__ = ["Document", "Section", "Text", "Math", "Table", "Cell", "Box", "report", "equation", "PREAMBLE"]
