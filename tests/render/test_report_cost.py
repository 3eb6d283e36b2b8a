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
