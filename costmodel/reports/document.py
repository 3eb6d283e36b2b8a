r"""Reports as documents: a standalone LaTeX file that compiles with pdflatex, Markdown with GitHub
math, JSON; in Jupyter a :class:`Document` renders itself (``_repr_latex_``, ``_repr_html_``).

A document is a list of :class:`Section`\ s, each made of blocks (:class:`Text`, :class:`Math`,
:class:`Table`). :data:`DOCUMENT_SECTIONS` builds them from a :class:`Context` (the model, its values,
the exact estimate and the symbolic formulas); a new capability appends a function to it. Results of
report sections this module does not know (a roofline table, time) are rendered generically, one table
per top-level key, so they appear without changes here.

>>> doc = report("gpt2-small")
>>> [s.title for s in doc.sections][:3]
['Model and configuration', 'Formulas', 'Training FLOPs, term by term']
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import sympy

from ..devices.roofline import roofline
from ..devices.table import device
from ..errors import CostModelError, closest
from ..files import write_atomic
from ..graph.analysis import breakdown
from ..options import Options
from ..symbols import SYMBOLS, describe
from . import latex as tex
from .derive import derive
from .estimate import estimate, model_for, resolve
from .results import dumps, flatten


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text (escaped for LaTeX)."""

    text: str


@dataclass(frozen=True)
class Math:
    """Display math: LaTeX of an ``align*`` body or environment (rendered as ``aligned`` in Markdown)."""

    latex: str


@dataclass(frozen=True)
class Cell:
    """A table cell: plain text, or inline LaTeX math when ``math`` is set."""

    text: str
    math: bool = False


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    align: str = ""  # LaTeX column spec; default: left-aligned columns


@dataclass(frozen=True)
class Section:
    title: str
    blocks: tuple[object, ...]


@dataclass(frozen=True)
class Document:
    """A report: a title and sections. ``to_latex()`` is a whole pdflatex-ready file."""

    title: str
    sections: tuple[Section, ...]
    data: Mapping[str, object] = field(default_factory=dict)  # the exact numbers, for to_json()

    def to_latex(self) -> str:
        body = "\n\n".join(_section_latex(s) for s in self.sections)
        return (PREAMBLE + rf"\title{{{tex.escape(self.title)}}}" + "\n\\date{}\n\\begin{document}\n\\maketitle\n\n"
                + body + "\n\n\\end{document}\n")

    def to_markdown(self) -> str:
        return f"# {self.title}\n\n" + "\n\n".join(_section_markdown(s) for s in self.sections) + "\n"

    def write(self, kind: str, path: str) -> None:
        """Write the document as ``kind`` (``latex``, ``markdown``, ``json``) to ``path``, atomically."""
        render = {"latex": self.to_latex, "markdown": self.to_markdown, "json": self.to_json}
        if kind not in render:
            raise CostModelError(f"report: kind must be one of {', '.join(render)}, received {kind!r}")
        write_atomic(path, render[kind](), f"the {kind} report")

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
"""


# -- renderers -------------------------------------------------------------------------------------


def _cell_latex(c: Cell) -> str:
    return f"${c.text}$" if c.math else tex.escape(c.text)


def _section_latex(s: Section) -> str:
    out = [rf"\section{{{tex.escape(s.title)}}}"]
    for b in s.blocks:
        if isinstance(b, Text):
            out.append(tex.escape(b.text))
        elif isinstance(b, Math):
            out.append(b.latex if b.latex.lstrip().startswith("\\begin") else f"\\begin{{align*}}\n{b.latex}\n\\end{{align*}}")
        elif isinstance(b, Table):
            spec = b.align or "l" * len(b.header)
            rows = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
                    " & ".join(tex.escape(h) for h in b.header) + r" \\", r"\midrule"]
            rows += [" & ".join(_cell_latex(c) for c in row) + r" \\" for row in b.rows]
            rows += [r"\bottomrule", r"\end{tabular}"]
            out.append("\\begin{center}\n\\resizebox{\\ifdim\\width>\\textwidth\\textwidth\\else\\width\\fi}{!}{%\n"
                       + "\n".join(rows) + "}\n\\end{center}")
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
        elif isinstance(b, Math):
            out.append(_markdown_math(b.latex))
        elif isinstance(b, Table):
            out.append("| " + " | ".join(b.header) + " |\n|" + "---|" * len(b.header))
            out[-1] += "".join("\n| " + " | ".join(f"${c.text}$" if c.math else c.text.replace("|", "\\|")
                                                    for c in row) + " |" for row in b.rows)
    return "\n\n".join(out)


def _section_html(s: Section) -> str:
    out = [f"<h2>{html.escape(s.title)}</h2>"]
    for b in s.blocks:
        if isinstance(b, Text):
            out.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Math):
            out.append(html.escape(_markdown_math(b.latex)))
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(f'${c.text}$' if c.math else c.text)}</td>"
                                            for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(out)


# -- sections --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a document section sees: the model, its values, the estimate and the formulas."""

    model: object  # costmodel.models.Model
    values: Mapping[sympy.Symbol, int]
    estimate: Mapping[str, object]
    derived: Mapping[str, object]
    options: Options


def _value_row(key: str, v: object) -> tuple[Cell, ...]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return Cell(key), Cell(str(v)), Cell("")
    return Cell(key), Cell(tex.number(v), True), Cell(f"{float(v):.4g}")


def config_section(ctx: Context) -> Section:
    r = ctx.estimate
    rows = tuple((Cell(tex.latex(s), True), Cell(describe(str(s)) if str(s) in SYMBOLS else "user symbol"),
                  Cell(tex.number(v), True)) for s, v in sorted(ctx.values.items(), key=lambda kv: str(kv[0])))
    conv = "; ".join(f"{k}: {v}" for k, v in r["conventions"].items())
    blocks = [Text(f"{r['model']} ({r['family']} family)." + (f" Source: {r['source']}." if "source" in r else "")),
              Table(("symbol", "meaning", "value"), rows), Text(f"Conventions: {conv}.")]
    return Section("Model and configuration", tuple(blocks))


def printable(exprs: Mapping[str, sympy.Expr]) -> tuple[dict[str, sympy.Expr], list[str]]:
    """The expressions a page can show (sums of terms), and the keys left out: maxima over many points
    (a liveness peak), piecewise choices and roundings, which the JSON carries in full."""
    shown, left = {}, []
    for k, v in exprs.items():
        if not k.startswith(("params.", "flops.", "bytes.", "memory_bytes.")) or k.endswith("_share"):
            continue  # time and rates: numbers of a device, in the tables below
        if isinstance(v, sympy.Basic) and (v.atoms(sympy.Function) or v.has(sympy.Min, sympy.Max)):
            left.append(k)
        else:
            shown[k] = v
    return shown, left


def formulas_section(ctx: Context) -> Section:
    shown, left = printable(ctx.derived["expressions"])
    blocks = [Text("Symbolic quantities of one training step (B sequences of T tokens), derived from the op graph."),
              Math(tex.broken_equations(shown))]
    if left:
        blocks.append(Text("Derived as a maximum, a choice or a rounding (exact in the JSON report): "
                           + ", ".join(left) + "."))
    return Section("Formulas", tuple(blocks))


def derivation_section(ctx: Context) -> Section:
    rows = []
    for name, c in breakdown(ctx.model.graph, ctx.options.counting).items():
        count = ctx.model.graph.nodes[name]["count"]
        rows.append((name, count, sympy.expand(c.training.flops / count)))
    total = ctx.derived["expressions"]["flops.training"]
    return Section("Training FLOPs, term by term",
                   (Text("What each op contributes to the training FLOPs of one step (forward + backward, "
                         "times the number of runs per step)."),
                    Math(tex.derivation(rows, r"\mathrm{flops}_{\mathrm{training}}", total))))


def ops_section(ctx: Context) -> Section:
    rows = tuple((Cell(name), Cell(str(r["kind"])), Cell(tex.latex(r["count"]), True), Cell(tex.latex(r["flops"]), True),
                  Cell(tex.latex(r["bytes"]), True), Cell(tex.latex(r["intensity"]), True))
                 for name, r in ctx.derived["ops"].items())
    return Section("Per-op forward costs", (Text("One run of each op, forward pass; count = runs per step."),
                                            Table(("op", "kind", "count", "FLOPs", "bytes", "FLOPs/byte"), rows)))


def numbers_section(ctx: Context) -> Section:
    flat = flatten({k: ctx.estimate[k] for k in ("params", "flops", "bytes", "tokens") if k in ctx.estimate})
    rows = tuple(_value_row(k, v) for k, v in flat.items() if v is not None)
    return Section("Numbers for this configuration", (Table(("quantity", "exact", "approx."), rows, "lrr"),))


def memory_section(ctx: Context) -> Section:
    mem = flatten(ctx.estimate.get("memory_bytes", {}), "memory_bytes.")
    info = ctx.estimate.get("memory", {})
    conventions = info.get("conventions", {})
    rows = tuple((Cell(k), Cell(tex.number(v), True), Cell(f"{v / 1e9:,.2f}"), Cell(f"{v / 2**30:,.2f}"),
                  Cell(str(conventions.get(k.removeprefix("memory_bytes."), ""))))
                 for k, v in mem.items() if isinstance(v, int))
    layout = info.get("layout", {})
    where = ", ".join(f"{k} {v}" for k, v in layout.items() if k in ("dp", "tp", "pp", "sp", "ep", "zero"))
    return Section("Memory breakdown", (
        Text("Bytes per device of one step; GB = 1e9 bytes, GiB = 2^30 bytes."
             + (f" Layout: {where}." if where else "")),
        Table(("component", "bytes", "GB", "GiB", "convention"), rows, "lrrrp{6.5cm}")))


def roofline_section(ctx: Context) -> Section | None:
    """Per-op roofline of a training step on ``options.hardware`` (when one is given)."""
    if ctx.options.hardware is None:
        return None
    dev = device(ctx.options.hardware)
    rows = roofline(ctx.model.graph, ctx.values, dev, phase="training", counting=ctx.options.counting)
    cells = tuple((Cell(r.name), Cell(r.kind), Cell(f"{float(r.flops):.3g}"), Cell(f"{float(r.bytes):.3g}"),
                   Cell(f"{float(r.intensity):.3g}"), Cell(r.bound), Cell(f"{float(r.time_s):.3g}")) for r in rows)
    ridge = float(rows[0].ridge) if rows else 0.0
    return Section("Roofline", (Text(f"Each op's forward + backward on {dev.name} (ridge {ridge:.0f} FLOPs/byte): "
                                     "the lower bound max(FLOPs/peak, bytes/bandwidth) per kernel."),
                                Table(("op", "kind", "FLOPs", "bytes", "FLOPs/byte", "bound", "seconds"), cells,
                                      "llrrrlr")))


KNOWN = {"params", "flops", "bytes", "tokens", "memory_bytes", "memory", "model", "family", "config", "conventions",
         "source"}


def other_sections(ctx: Context) -> list[Section]:
    """One generic table per top-level result this module does not know (roofline, time, ...)."""
    out = []
    for key, value in ctx.estimate.items():
        if key in KNOWN:
            continue
        flat = flatten(value, f"{key}.") if isinstance(value, Mapping) else {key: value}
        title = key.upper() if len(key) <= 3 else key.replace("_", " ").capitalize()  # mfu → MFU
        out.append(Section(title,
                           (Table(("quantity", "value", "approx."), tuple(_value_row(k, v) for k, v in flat.items()),
                                  "lrr"),)))
    return out


#: Builders of the document's sections, in order; each returns a Section, a list of them, or None.
DOCUMENT_SECTIONS: list[Callable[[Context], Section | list[Section] | None]] = [
    config_section, formulas_section, derivation_section, ops_section, numbers_section, memory_section,
    roofline_section, other_sections,
]


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


def report(model, *, settings: Mapping[str, object] | None = None, options: Options | None = None,
           **kwargs: object) -> Document:
    """The full report of one model and config (the options of :func:`costmodel.estimate`)."""
    opts = Options.make(options, **kwargs)
    m = model_for(model, settings, opts)
    values = resolve(m, opts)
    r = estimate(m, options=opts)
    d = derive(m, options=opts)
    ctx = Context(m, values, r, d, opts)
    sections: list[Section] = []
    for build in DOCUMENT_SECTIONS:
        made = build(ctx)
        sections += made if isinstance(made, list) else [made] if made is not None else []
    shown, _ = printable(d["expressions"])
    data = {"estimate": r.to_dict(), "expressions": {k: str(v) for k, v in d["expressions"].items()},
            "latex": {k: tex.latex(v) for k, v in shown.items()}}
    return Document(f"costmodel report: {r['model']}", tuple(sections), data)
