"""Exports: the LaTeX report compiles with pdflatex as is; Markdown, JSON and Jupyter reprs."""

import json
import shutil
import subprocess

import pytest
import sympy

from costmodel import estimate
from costmodel.cli import main
from costmodel.expr import parse_expr
from costmodel.families import load, presets
from costmodel.kit import totals
from costmodel.render.blocks import Text
from costmodel.render.latex import derivation, escape, terms
from costmodel.symbols import L, d
from costmodel.verbs.report import report
from tests.render.pdflatex import PDFLATEX, need_pdflatex, pdflatex

PDFTOTEXT = shutil.which("pdftotext")
# the four models issue 18 names; deepseek-v3 (19 pages, 61 distinct blocks) is the slowest test of the suite
# (about 80 s of one core, most of it derive's expansion of 558 formulas), and the only MLA + MoE report checked
MODELS = [m for m in ("gpt3-175b", "llama3-8b", "mixtral-8x7b", "deepseek-v3") if m in presets()]


@pytest.mark.parametrize("model", MODELS)
def test_latex_report_compiles_unchanged(model, tmp_path):
    need_pdflatex()
    assert (
        main(
            [
                "report",
                model,
                "--tokens",
                "3e11",
                "--hardware",
                "h100-sxm",
                "--devices",
                "1024",
                "--latex",
                str(tmp_path / "report.tex"),
            ]
        )
        == 0
    )
    run = pdflatex(tmp_path, "report.tex", timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    assert (tmp_path / "report.pdf").stat().st_size > 10_000
    assert "Overfull \\hbox" not in (tmp_path / "report.log").read_text(errors="replace")  # nothing runs off the page
    if PDFTOTEXT is None:  # poppler-utils: with texlive on Debian, not everywhere
        return
    first = subprocess.run(
        [PDFTOTEXT, "-f", "1", "-l", "1", "report.pdf", "-"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    ).stdout
    # the answer first: the summary leads page 1, the number a person asks for in the unit they would say
    assert first.index("Summary") < first.index("Derivation")
    for what in ("Training FLOPs", "Time", "Memory per device", "Binding resource", "of 80.00 GB", "devices ×"):
        assert what in first, what
    assert "flops.training_total" not in first.split("Derivation")[0]


def test_document_has_the_sections_and_exact_numbers():
    doc = report("gpt3-175b", tokens=3 * 10**11)
    titles = [s.title for s in doc.sections]
    # the answer first; no time section without a device, no communication rows when nothing is sent
    assert titles == [
        "Summary",
        "Derivation",
        "Memory per device",
        "Ops",
        "Training FLOPs, term by term",
        "Every number",
        "Conventions",
    ]
    text = doc.to_latex()
    assert r"\usepackage{booktabs}" in text and r"\toprule" in text
    assert "174\\,604\\,259\\,328" in text  # params.total, exact
    data = json.loads(doc.to_json())
    assert data["estimate"]["params"]["total"] == 174_604_259_328
    six_nd = parse_expr(data["expressions"]["flops.six_nd"])  # with --tokens D: 6·N·D for the whole run
    assert sympy.expand(six_nd - 6 * 3 * 10**11 * (12 * L * d**2 + 13 * L * d + 2 * d)) == 0


def test_markdown_uses_github_math():
    md = report("gpt2-small").to_markdown()
    assert "$$\n\\begin{aligned}" in md and "| $B$ | batch size" in md
    assert "\\begin{align*}" not in md


def test_derivation_sums_to_the_total():
    # each op's line is count × one run; the lines add up to the total the engine reports
    G = load("gpt").graph
    from costmodel.kit import breakdown

    rows = [
        (n, G.nodes[n]["count"], sympy.expand(c.training.flops / G.nodes[n]["count"])) for n, c in breakdown(G).items()
    ]
    total = totals(G).training.flops
    assert sympy.expand(sum(c * r for _, c, r in rows) - total) == 0
    tex = derivation(rows, "F", total)
    assert tex.count("&&") == sum(1 for _, _, r in rows if r != 0)


def test_reprs_and_escaping():
    t = totals(load("gpt").graph)
    assert t._repr_latex_().startswith("$\\begin{aligned}") and "d_{ff}" not in t._repr_latex_()
    assert "matmul" in t.forward._repr_latex_()
    doc = report("gpt2-small")
    assert doc._repr_html_().startswith("<h1>") and doc._repr_markdown_().startswith("# ")
    assert escape("50% a_b & c#") == r"50\% a\_b \& c\#"
    assert terms(sympy.Integer(0)) == ["0"]


def test_cli_report_errors_are_one_line(tmp_path, capsys):
    assert main(["report", "gpt2-small", "--latex", str(tmp_path / "no" / "r.tex")]) == 2
    assert capsys.readouterr().err.startswith("costmodel: error: cannot write the latex report")


def test_time_section_with_a_device():
    doc = report("gpt3-175b", hardware="h100-sxm")
    titles = [s.title for s in doc.sections]
    assert titles[:5] == ["Summary", "Derivation", "Memory per device", "Time", "Ops"]


def test_any_quantity_as_an_equation_compiles(tmp_path):
    from costmodel import CostModelError
    from costmodel.verbs.report import PREAMBLE, equation

    eqs = "\n".join(equation("gpt", k) for k in ("flops.training", "memory_bytes.total", "params.non_embedding"))
    with pytest.raises(CostModelError, match="did you mean 'flops.training'"):
        equation("gpt", "flops.trainig")
    if PDFLATEX is None:
        pytest.skip("pdflatex not installed")
    (tmp_path / "eq.tex").write_text(PREAMBLE + "\\begin{document}\n" + eqs + "\n\\end{document}\n")
    run = pdflatex(tmp_path, "eq.tex", timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]


def test_the_derivation_names_the_peaks_points_and_the_winner():
    # the peak is the states plus the largest named point, as derive prints it; the winning point and its bytes
    # are the ones the estimate's own liveness walk reports (memory.peak_at, memory_bytes.peak)
    doc = report("gpt2-small")
    e = estimate("gpt2-small")
    texts = [b.text for b in next(s for s in doc.sections if s.title == "Derivation").blocks if isinstance(b, Text)]
    won = next(t for t in texts if t.startswith("At the values above"))
    assert f"({e['memory']['peak_at']}" in won and won.endswith(f"{e['memory_bytes']['peak']:,} bytes in all."), won
    left = [t for t in texts if t.startswith("Derived as a maximum")]
    assert all("memory_bytes.peak," not in t and not t.endswith("memory_bytes.peak.") for t in left), left
    for text in (doc.to_latex(), doc.to_markdown()):
        assert r"\mathrm{memory\_bytes}_{\mathrm{peak}} = S + \max_{i} A_{i}" in text
