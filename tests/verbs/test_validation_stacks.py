"""Software stacks in the validation: each run names a described stack and its source; a stack's factor is
fitted on its runs (recomputed here, not typed) and stored with them; leave-one-source-out never predicts a run
with a factor its own source helped to fit; the stack view's recorded errors are the documented ones."""

from __future__ import annotations

import math
import os

import pytest

from costmodel.devices.table import builtin
from costmodel.errors import CostModelError
from costmodel.verbs.validation import stacks as validation_stacks
from costmodel.verbs.validation import validation

DOC = validation.__file__.rsplit("/costmodel/", 1)[0] + "/docs/validation.md"


def _row(run, predicted):
    return validation.Row(run, predicted, 1.0, 0.5, 1.0, {})


def test_every_run_names_a_described_stack_and_its_source():
    described = validation_stacks.stacks()
    assert all(described[s]["about"] and described[s]["source"] for s in described)
    for run in validation.runs():
        assert validation_stacks.stack_of(run) in described and run["source_key"]
    by_id = {r["id"]: r for r in validation.runs()}
    # BLOOM (bigscience's Megatron-DeepSpeed fork) and MT-NLG (DeepSpeed's pipeline with Megatron's tensor
    # slicing) share one stack from two sources; Table 5 and its DP run share one source
    assert by_id["bloom-176b"]["stack"] == by_id["mtnlg-530b-2240"]["stack"] == "megatron-deepspeed"
    assert by_id["bloom-176b"]["source_key"] != by_id["mtnlg-530b-2240"]["source_key"]
    assert (
        by_id["korthikanti22-530B-dp8-seqsel"]["source_key"] == by_id["korthikanti22-1T-full_recompute"]["source_key"]
    )


def _deepspeed_rows():
    """The DeepSpeed runs with made-up predictions: BLOOM 0.8 of its measured step, each MT-NLG run 0.75."""
    runs = [r for r in validation.runs() if r["stack"] == "megatron-deepspeed"]
    return [_row(r, 0.8 if r["id"].startswith("bloom") else 0.75) for r in runs]


def test_fit_stacks_is_the_geometric_mean_over_the_stack_and_needs_two_sources():
    llama = [r for r in validation.runs() if r["stack"] == "meta-llama3"]
    rows = _deepspeed_rows() + [_row(r, 0.9) for r in llama]  # Llama 3: one paper, no factor
    (fit,) = validation_stacks.fit_stacks(rows)
    default = float(builtin()["a100-80gb"].attained.sustained)  # 0.89
    # one pass from the default: 0.89 × (0.8 · 0.75³)^(1/4)
    assert fit.sustained == pytest.approx(default * (0.8 * 0.75**3) ** 0.25)
    assert (fit.device, fit.stack, set(fit.sources)) == ("a100-80gb", "megatron-deepspeed", {"bloom-tr11", "mtnlg22"})


def test_leave_one_source_out_fits_each_run_on_the_other_sources_only(monkeypatch):
    seen = []

    def predict(run):  # what the refit predicts with, without running the model
        seen.append((run["id"], float(run["hardware"]["sustained"])))
        return _row(run, 1.0)

    monkeypatch.setattr(validation_stacks, "predict", predict)
    refits = validation_stacks.leave_one_source_out(_deepspeed_rows())
    default = float(builtin()["a100-80gb"].attained.sustained)
    for r in refits:
        if r.row.run["id"] == "bloom-176b":  # from MT-NLG's three runs alone: 0.89 × 0.75
            assert (
                r.sustained == pytest.approx(default * 0.75) and "without bloom-tr11: 3 runs of mtnlg22" in r.fitted_on
            )
        else:  # from BLOOM's run alone: 0.89 × 0.8
            assert r.sustained == pytest.approx(default * 0.8) and "without mtnlg22: 1 run of bloom-tr11" in r.fitted_on
    assert len(refits) == 4 and [round(s, 4) for _, s in seen] == [round(r.sustained, 4) for r in refits]


def test_out_of_sample_takes_the_stack_refit_then_the_left_out_error_then_the_default():
    by_id = {r["id"]: r for r in validation.runs()}
    stack, fitted, held = by_id["bloom-176b"], by_id["dgxc-llama31-8b-8-bf16"], by_id["llama3-405b-8192-cp1"]
    rows = [_row(stack, 0.8), _row(fitted, 1.05), _row(held, 0.85)]
    loso = [validation.Refit(_row(stack, 1.1), 0.6, "megatron-deepspeed without bloom-tr11")]
    loo = [validation.Refit(_row(fitted, 0.9), 0.7, "the others")]
    oos = validation_stacks.out_of_sample(rows, loo, loso)
    assert [round(o.error, 6) for o in oos] == [0.1, -0.1, -0.15]
    assert [o.basis for o in oos] == list(validation_stacks.BASES)
    p = validation_stacks.pooled(oos)
    assert p[validation_stacks.POOLS[0]] == pytest.approx({"runs": 3, "mean": 0.35 / 3, "max": 0.15})
    assert p[validation_stacks.POOLS[1]] == pytest.approx({"runs": 2, "mean": 0.125, "max": 0.15})
    with pytest.raises(CostModelError, match="has no leave-one-out error"):
        validation_stacks.out_of_sample(rows, [], loso)


@pytest.fixture(scope="module")
def deepspeed():
    """The four DeepSpeed runs predicted on the A100's default factor (a few seconds each)."""
    return validation.validate([r for r in validation.runs() if r["stack"] == "megatron-deepspeed"])


def test_the_tables_deepspeed_factor_is_the_fit_on_its_runs(deepspeed):
    (fit,) = validation_stacks.fit_stacks(deepspeed)
    stored = builtin()["a100-80gb"].attained.stacks["megatron-deepspeed"]
    assert float(stored.sustained) == pytest.approx(fit.sustained, abs=5e-5)  # written to four decimals
    assert stored.fitted_on == fit.runs and "fit_stacks" in stored.source


def test_deepspeed_runs_out_of_sample_within_their_recorded_error(deepspeed):
    loso = validation_stacks.leave_one_source_out(deepspeed)
    own = {r.row.run["id"]: r.row.run["source_key"] for r in loso}
    assert all(f"without {own[r.row.run['id']]}:" in r.fitted_on for r in loso)
    s = validation_stacks.summary(validation_stacks.out_of_sample(deepspeed, [], loso))["other-a100"]
    mean, worst = validation_stacks.RECORDED["other-a100"]
    assert s["mean"] <= mean + 1e-4 and s["max"] <= worst + 1e-4
    assert s["mean"] < validation.RECORDED["other-a100"][0] / 2  # the device default's 24.8 %: the stack is the cause


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("COSTMODEL_SLOW"), reason="every run and its refits: minutes")
def test_every_stack_factor_and_the_pooled_stack_view_recomputed():
    rows = validation.validate()
    fits = validation_stacks.fit_stacks(rows)
    for f in fits:
        stored = builtin()[f.device].attained.stacks[f.stack]
        assert float(stored.sustained) == pytest.approx(f.sustained, abs=5e-5) and stored.fitted_on == f.runs
    oos = validation_stacks.out_of_sample(
        rows, validation.leave_one_out(rows), validation_stacks.leave_one_source_out(rows)
    )
    for label, p in validation_stacks.pooled(oos).items():
        assert p["mean"] <= validation.RECORDED_POOLED[label][0] + 1e-4
    for group, s in validation_stacks.summary(oos).items():
        assert s["mean"] <= validation_stacks.RECORDED[group][0] + 1e-4


def test_the_stack_views_recorded_errors_are_the_documented_ones():
    doc = open(DOC, encoding="utf-8").read()
    section = doc.split("## Software stacks", 1)[1].split("\n## ", 1)[0]
    for group, (mean, worst) in validation_stacks.RECORDED.items():
        assert f"| {group} | " in section and f"{100 * mean:.2f}% | {100 * worst:.2f}% |" in section
    for label in validation_stacks.POOLS:
        mean, worst = validation.RECORDED_POOLED[label]
        assert f"| {label} | " in section and f"{100 * mean:.2f}% | {100 * worst:.2f}% |" in section
    assert set(validation_stacks.RECORDED) == {r["group"] for r in validation.runs()}
    # every stored factor is printed with the runs it was fitted on
    for name, dev in builtin().items():
        for st in dev.attained.stacks.values():
            assert f"| {name} | {st.name} | {float(st.sustained):.4f} |" in section
            assert ", ".join(st.fitted_on) in section
    assert math.isfinite(sum(m for m, _ in validation_stacks.RECORDED.values()))
