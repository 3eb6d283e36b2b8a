"""``costmodel report MODEL --latex report.tex``: the whole report as LaTeX, Markdown, JSON or an interactive HTML page."""

from __future__ import annotations

import argparse
import sys

import costmodel

from . import estimate
from ._common import options, output_file, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="a full report (summary, formulas, memory, time, ops) as LaTeX/Markdown/JSON/HTML",
        description="Write the report of one model and config: a standalone LaTeX document "
        "(compiles with pdflatex as is), Markdown with GitHub math, JSON, or an interactive HTML page. "
        "With no output option, Markdown goes to stdout.",
    )
    estimate.add_options(p)
    p.add_argument("--latex", metavar="FILE", type=output_file, help="standalone LaTeX document ('-' for stdout)")
    p.add_argument("--markdown", metavar="FILE", type=output_file, help="Markdown with $...$ math ('-' for stdout)")
    p.add_argument(
        "--json", metavar="FILE", type=output_file, help="exact numbers and formulas as JSON ('-' for stdout)"
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        type=output_file,
        help="one self-contained interactive page: summary, formulas (MathML), charts, and controls "
        "that recompute every number ('-' for stdout)",
    )
    p.add_argument(
        "--control",
        metavar="SYMBOL",
        action="append",
        default=[],
        help="a symbol the HTML page lets a reader change besides B, T and the devices (repeatable)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    doc = costmodel.report(args.model, settings=settings(args), options=options(args), controls=tuple(args.control))
    outputs = {"latex": doc.to_latex, "markdown": doc.to_markdown, "json": doc.to_json, "html": doc.to_html}
    chosen = {k: getattr(args, k) for k in outputs if getattr(args, k) is not None}
    files = {kind: path for kind, path in chosen.items() if path != "-"}
    doc.write_all(files)  # every file rendered and staged, then renamed: a failure changes none of them
    for kind, path in (chosen or {"markdown": "-"}).items():
        if path == "-":
            text = outputs[kind]()
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            continue
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in path)  # a newline: one line still
        print(f"wrote {kind} report to {shown}", file=sys.stderr)
    return 0
