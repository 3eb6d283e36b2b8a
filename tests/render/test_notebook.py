"""Results in Jupyter: estimate, derive, compare and sweep render as HTML tables (with formulas where they have
them), an estimate opening with the documents' summary; a sweep converts to a pandas DataFrame."""

import html

import pytest

import costmodel
from costmodel.options import Options
from costmodel.render import names, summary
from costmodel.render.notebook import SWEEP_ROWS, facts_of

OPTIONS = {"hardware": "h100-sxm", "devices": 8, "dp": 8, "batch": 16, "tokens": 10**10}


def test_estimate_renders_the_summary_and_every_number():
    r = costmodel.estimate("gpt2-small", **OPTIONS)
    page = r._repr_html_()
    flat = r.flat
    # the facts read off the keys are the ones the documents take from the options
    want = summary.facts(flat, Options.make(None, **OPTIONS))
    assert facts_of(flat) == want
    for what, text in summary.summary(flat, want)[:4]:  # the binding resource needs the ops: report() has it
        assert f"<th>{what}</th><td>{html.escape(text)}</td>" in page
    for key in ("params.total", "flops.training_total", "memory_bytes.peak", "time.training_s", "mfu"):
        assert f"<code>{key}</code>" in page and html.escape(names.show(key, flat[key])) in page
    assert "<td>124439808</td>" in page  # exact


def test_derive_and_compare_render_formulas():
    d = costmodel.derive("gpt2-small")
    assert d._repr_latex_().startswith("$\\begin{aligned}") and "<code>flops.training</code>" in d._repr_html_()
    c = costmodel.compare("gpt2-small")
    assert c._repr_html_().startswith("<table>")


def test_sweep_renders_its_rows_and_converts_to_pandas():
    s = costmodel.sweep("gpt2-small", ["B=1:50:1", "T=512,1024"], ["flops.training", "memory_bytes.total"])
    page = s._repr_html_()
    assert page.count("<tr>") == SWEEP_ROWS + 1 and f"… {100 - SWEEP_ROWS:,} more rows" in page
    assert "<th>flops.training</th>" in page and "<td>GB" not in page
    pd = pytest.importorskip("pandas")
    df = s.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 100
    assert df["flops.training"].tolist() == s.column("flops.training")
