"""No injection through symbol names (issue 31, items 4-6): a builder's symbol named ``z</math><img ...>`` is
text in the HTML page (MathML, attributes, the script's JSON), one named ``\\input{/etc/passwd}`` is text in
the LaTeX document, and a model path holding ``<!--<script>`` cannot swallow the page's own script."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import costmodel
from costmodel.families import graph_symbols
from costmodel.render.html import script_json

ROOT = Path(__file__).resolve().parents[2]

BUILDER = """
import sympy

from costmodel.kit import GraphBuilder
from costmodel.symbols import B, T

EVIL = sympy.Symbol("z</math><img src=x onerror=alert(1)>", positive=True, integer=True)
TEX = sympy.Symbol(r"\\input{/etc/passwd}", positive=True, integer=True)


def build(*, dtype="bf16"):
    g = GraphBuilder("evil", dtype=dtype, b=B, t=T, d=EVIL, e=TEX)
    x = g.input("x", "b t d")
    g.matmul("proj", x, "b t d, d e -> b t e")
    return g.graph
"""


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    path = tmp_path_factory.mktemp("evil") / "evil.py"
    path.write_text(BUILDER)
    m = costmodel.load(f"{path}:build")
    m = dataclasses.replace(m, values={s: 8 for s in graph_symbols(m.graph)})
    return costmodel.report(m, controls=("z</math><img src=x onerror=alert(1)>",))


def test_html_symbol_names_are_text(doc):
    page = doc.to_html()
    assert "onerror" in page  # the name is shown...
    assert "<img" not in page  # ...as text, never as a tag
    assert "</math><" not in page.replace("</math></div>", "").replace("</math></td>", "")


def test_latex_symbol_names_are_text(doc):
    tex = doc.to_latex()
    assert "passwd" in tex
    assert r"\input" not in tex
    assert r"\text{\textbackslash{}input\{/etc/passwd\}}" in tex


def test_the_script_json_escapes_markup():
    text = script_json({"model": "m<!--<script>x</script>&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert text == '{"model":"m\\u003c!--\\u003cscript\\u003ex\\u003c/script\\u003e\\u0026"}'


def test_a_cjk_model_folder_stays_latex_pdflatex_sets(tmp_path):
    """A config in a folder named 模型: the document holds its code points, not characters pdflatex cannot set."""
    folder = tmp_path / "模型"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "docs/examples/config.json").read_text())
    tex = costmodel.report(str(folder / "config.json")).to_latex()
    assert "模" not in tex and r"\texttt{U+6A21}\texttt{U+578B}" in tex
    assert all(ord(c) <= 0x17F for c in tex), sorted({c for c in tex if ord(c) > 0x17F})
