"""One rule for "does it fit" in every verb (issue 30, item 12): the per-device liveness peak on one pipeline
stage, under any tensor and sequence parallelism; the sum only where no peak is modelled (pp > 1).

Before, ``estimate --tp 2`` said "fits one h100-sxm: total 77.21 GB of 80.00 GB (97%)" by the sum while ``fit``
at the same layout called micro-batch 4 the largest (the peak was not modelled under tp, so both read the sum)
and the peak a device reaches, 89.82 GB, overflowed; ``plan`` ranked layouts by the sum.
"""

from __future__ import annotations

import costmodel
from costmodel.render import summary
from costmodel.sections.fits import judged

O = costmodel.Options.make
#: llama3-8b, 4 sequences of 8,192 tokens, tp 2 with Megatron SP, full recompute: the sum fits an H100, the peak not
CASE = dict(batch=4, flash=True, tp=2, megatron_sp=True, recompute="full")
TINY = {"L": "4", "d": "64", "h": "4", "n_kv": "2", "d_ff": "128", "V": "100", "T": "64"}


def test_estimate_under_tp_judges_by_the_peak_as_fit_does():
    r = costmodel.estimate("llama3-8b", options=O(hardware="h100-sxm", **CASE))
    m = r["memory_bytes"]
    assert m["total"] <= 80 * 10**9 < m["peak"]  # 77.21 GB by the sum, 89.82 GB at the peak (backward of the loss)
    assert r["memory"]["fits_by"] == "peak" and r["memory"]["fits"] is False
    assert r["memory"]["shortfall_bytes"] == m["peak"] - 80 * 10**9
    f = costmodel.fit("llama3-8b", hardware="h100-sxm", options=O(**{k: v for k, v in CASE.items() if k != "batch"}))
    assert f["by"] == "peak" and f["largest"] < 4  # the same rule: 4 does not fit
    at = costmodel.estimate("llama3-8b", options=O(hardware="h100-sxm", **{**CASE, "batch": f["largest"]}))
    assert at["memory"]["fits"] is True and at["memory_bytes"]["peak"] == f["at_largest"]["peak"]
    flat = costmodel.estimate("llama3-8b", options=O(hardware="h100-sxm", **CASE)).flat
    assert summary.fits(flat, summary.facts(flat, O(hardware="h100-sxm", **CASE))) is False  # every report's row


def test_megatron_sp_halves_every_live_tensor_of_the_walk():
    # Megatron SP splits every activation by tp: the walk's live bytes at tp 2 are those at tp 1 halved, up to
    # the rounding up of each tensor's half to whole bytes (at most one byte per tensor per iteration)
    def live(**kw):
        r = costmodel.estimate("llama", settings=TINY, options=O(batch=2, **kw))["memory_bytes"]
        return r["peak"] - r["params"] - r["grads"] - r["optimizer"]

    one, two = live(), live(tp=2, megatron_sp=True)
    assert 0 <= two - one / 2 <= 200, (one, two)
    # context parallelism splits what has the sequence axis: every tensor of this walk
    assert 0 <= live(sp=2) - one / 2 <= 200


def test_the_rule_reads_a_peak_where_modelled_else_the_sum():
    assert judged({"memory_bytes.peak": 5, "memory_bytes.total": 4}) == (5, "peak")
    assert judged({"memory_bytes.peak": None, "memory_bytes.total": 4}) == (4, "total")
    assert judged({"total": 4}, "") == (4, "total")
    piped = costmodel.estimate("llama", settings=TINY, options=O(batch=4, pp=2, micro_batch=1, hardware="h100-sxm"))
    assert piped["memory_bytes"]["peak"] is None and piped["memory"]["fits_by"] == "total"  # pp > 1: the sum


def test_sweep_judges_as_estimate_does():
    # a sweep over B at tp 2 evaluates the estimate's own memory.fits: the peak's rule, at every point
    opts = O(hardware="h100-sxm", **{k: v for k, v in CASE.items() if k != "batch"})
    s = costmodel.sweep("llama3-8b", ["B=2,4"], ["memory.fits", "memory_bytes.peak"], options=opts)
    assert list(s.column("memory.fits")) == [True, False]  # 77.03 GB and 89.82 GB at the peak
    four = costmodel.estimate("llama3-8b", options=O(hardware="h100-sxm", **CASE))
    assert list(s.column("memory_bytes.peak"))[1] == four["memory_bytes"]["peak"]
