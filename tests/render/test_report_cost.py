"""A report costs little more than the estimate it shows (issue 30, "Slow"): ``report deepseek-v3 --devices 2048
--markdown`` took 61 s against 3.7 s for ``estimate`` (expanding every expression of the step, the time's too, when
the document prints the counts, FLOPs and memory; and deriving the quantities twice), ``costmodel models`` 4.7 s
(each preset's FLOPs expanded to list its parameters). Wall times are the benchmark's (benchmarks/report_cost.py);
here, what the waste was made of."""

from __future__ import annotations

import costmodel
from costmodel.families import catalogue, load
from costmodel.graph.analysis import parameters, totals
from costmodel.memory import quantities as mq
from costmodel.render.sections import PRINTED
from costmodel.sections import quantities as sq
from costmodel.verbs import derive as derive_module

SETTINGS = {"L": "2", "d": "64", "h": "4", "n_kv": "2", "d_ff": "128", "V": "100", "T": "64"}


def test_a_report_derives_once_and_expands_only_what_it_prints(monkeypatch):
    walks = []
    real = mq.training_memory
    monkeypatch.setattr(mq, "training_memory", lambda *a, **k: walks.append(1) or real(*a, **k))
    monkeypatch.setattr(sq, "_CACHE", {})
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", "off")
    doc = costmodel.report("llama", settings=SETTINGS, hardware="h100-sxm", batch=2)
    assert "Derivation" in doc.to_markdown()
    assert len(walks) == 1  # the estimate's derivation, shared by the document (was 2: shown=True again)
    # what the document expands: counts, FLOPs, bytes and memory, never the time of a device
    m, opts = load("llama", SETTINGS), costmodel.Options.make(hardware="h100-sxm")
    printed = derive_module.expressions(m, opts, keep=lambda k: k.startswith(PRINTED), shown=False)
    every = derive_module.expressions(m, opts)
    assert printed and all(k.startswith(PRINTED) for k in printed)
    assert any(k.startswith("time.") for k in every)
    assert all(printed[k] == every[k] for k in printed if k != "memory_bytes.peak")  # the same formulas


def test_the_catalogue_counts_what_totals_counts():
    rows = {r["name"]: r for r in catalogue()["presets"]}
    for name in ("gpt2-small", "mixtral-8x7b", "deepseek-v3"):
        m = load(name)
        t = totals(m.graph)
        assert parameters(m.graph) == (t.params, t.params_active)
        assert rows[name]["params"] == int(t.params.xreplace(m.values))
    assert rows["gpt2-small"]["params"] == 124_439_808  # GPT-2 small with its tied head: 124,439,808 (HF numel)


def test_an_html_report_builds_no_document_section(monkeypatch):
    # the page is written from the quantities themselves: the LaTeX/Markdown sections (shaped formulas, the
    # liveness peak's points, the ops' numbers) were built for every report, an HTML one too (deepseek-v3: 1.5 of
    # its 6 CPU seconds); built when read now, once
    from costmodel.verbs import report as report_module

    built = []
    real = list(report_module.DOCUMENT_SECTIONS)
    monkeypatch.setattr(report_module, "DOCUMENT_SECTIONS", [lambda ctx, b=b: built.append(b) or b(ctx) for b in real])
    doc = costmodel.report("llama", settings=SETTINGS, hardware="h100-sxm", batch=2)
    assert "<!DOCTYPE html>" in doc.to_html()
    assert built == []
    assert [s.title for s in doc.sections][:2] == ["Summary", "Derivation"]
    assert len(built) == len(real)
    assert "## Summary" in doc.to_markdown() and len(built) == len(real)  # not built again


def test_the_time_parts_an_estimate_gives_are_not_recomputed_from_the_ops(monkeypatch):
    # the calibrated step gives its own parts (time.breakdown.*): the summary shows those, and evaluating every
    # op's roofline bound only to drop it was half a second of deepseek-v3's page
    from costmodel.render import summary

    calls = []
    real = summary.evaluate_ops
    monkeypatch.setattr(summary, "evaluate_ops", lambda *a, **k: calls.append(1) or real(*a, **k))
    options = {"hardware": "h100-sxm", "batch": 4, "dp": 2, "devices": 2}
    doc = costmodel.report("llama", settings=SETTINGS, **options)
    flat = costmodel.estimate("llama", settings=SETTINGS, **options).flat
    compute = flat["time.breakdown.compute_s"]
    page = doc.to_html()
    assert calls == []  # was 1: time_parts evaluated the ops, then parts_from returned the breakdown
    text = doc.to_markdown()
    assert len(calls) == 1  # the ops section's table, its one evaluation
    # the parts shown are the estimate's: the compute time, and hidden communication is no part of the step
    assert summary.time_parts(None, costmodel.Options.make(**options), {}, None, flat) == {
        "compute": compute,
        "exposed communication": 0.0,
        "bubble": 0.0,
        "optimizer": flat["time.breakdown.optimizer_s"],
    }
    assert "Binding resource" in text and "Binding resource" in page


def test_the_page_javascript_shares_subtrees_without_sympy_cse(monkeypatch):
    # sympy's cse also splits sums, which the exact runtime does not need: 0.8 of deepseek-v3's page's seconds
    import sympy

    from costmodel.formulas import javascript
    from costmodel.symbols import B, d

    monkeypatch.setattr(sympy, "cse", lambda *a, **k: (_ for _ in ()).throw(AssertionError("cse called")))
    shared = (B * d + 3) ** 2
    text = javascript.source([shared * B, shared + d, sympy.Integer(7)], (B, d))
    # the shared square is defined once and used by name twice (the browser tests of test_html.py evaluate pages)
    assert text.count("R.pow(") == 1 and text.count("const _x0 = ") == 1 and text.count("_x0") == 3


def test_printable_walks_a_shared_term_once():
    # a liveness peak's points share their terms: sympy's atoms/has walk every occurrence (3^k nodes below),
    # printable now visits each distinct subtree once (3k nodes)
    import sympy

    from costmodel.render.sections import printable
    from costmodel.symbols import B, d

    e = B
    for _ in range(40):
        e = (e + d) * (e + B)
    chosen = sympy.Function("choice")(e, d)  # a function of the sum: left to the JSON
    shown, left = printable({"flops.x": e, "memory_bytes.y": d * chosen + e, "time.z": e})
    assert list(shown) == ["flops.x"] and left == ["memory_bytes.y"]
