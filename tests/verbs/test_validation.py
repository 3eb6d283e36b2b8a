"""Predicted against measured: Korthikanti et al. 2022 Table 5 (the issue's target: mean |error| <= 3.5 %,
max <= 8 %) stays within its recorded error; the measured-time derivations reproduce the sources' own numbers."""

from __future__ import annotations

import pytest

from costmodel.verbs.validation import validation


def test_korthikanti_table5_within_its_recorded_error():
    runs = [r for r in validation.runs() if r["group"] == "korthikanti22-table5"]
    assert len(runs) == 8
    s = validation.summary(validation.validate(runs))["korthikanti22-table5"]
    mean, worst = validation.RECORDED["korthikanti22-table5"]
    assert s["mean"] <= mean + 1e-4 and s["max"] <= worst + 1e-4
    assert s["mean"] <= 0.035 and s["max"] <= 0.08  # better than Calculon's 3.65 % / 8.87 %


def test_recorded_errors_are_the_documented_ones():
    text = validation.__file__.rsplit("/costmodel/", 1)[0] + "/docs/validation.md"
    doc = open(text, encoding="utf-8").read()
    for group, (mean, worst) in validation.RECORDED.items():
        assert f"| {group} |" in doc and f"{100 * mean:.2f}%" in doc and f"{100 * worst:.2f}%" in doc


def test_leave_one_out_errors_are_the_documented_ones():
    text = validation.__file__.rsplit("/costmodel/", 1)[0] + "/docs/validation.md"
    doc = open(text, encoding="utf-8").read()
    loo = doc.split("## Leave one out", 1)[1].split("\n## ", 1)[0]
    for group, (mean, worst) in validation.RECORDED_LOO.items():
        assert f"| {group} |" in loo and f"{100 * mean:.2f}%" in loo and f"{100 * worst:.2f}%" in loo
    assert set(validation.RECORDED_LOO) == {g for g, (_, _) in validation.RECORDED.items() if g in loo}


def test_pooled_errors_are_the_documented_ones():
    text = validation.__file__.rsplit("/costmodel/", 1)[0] + "/docs/validation.md"
    doc = open(text, encoding="utf-8").read()
    for label, (mean, worst) in validation.RECORDED_POOLED.items():
        assert f"| {label} |" in doc and f"{100 * mean:.2f}% | {100 * worst:.2f}% |" in doc


def test_pooled_errors_take_the_left_out_error_of_an_in_sample_run():
    runs = {r["id"]: r for r in validation.runs()}
    held, fitted, table5 = (
        runs["narayanan21-1008.0B"],
        runs["dgxc-llama31-8b-8-bf16"],
        runs["korthikanti22-22B-full_recompute"],
    )
    rows = [validation.Row(run, p, 1.0, 0.5, 1.0, {}) for run, p in ((held, 1.2), (fitted, 1.05), (table5, 2.0))]
    loo = [validation.Refit(validation.Row(fitted, 0.9, 1.0, 0.5, 1.0, {}), 0.7, "the others")]
    p = validation.pooled(rows, loo)
    assert p["every run but Table 5"] == pytest.approx({"runs": 2, "mean": 0.15, "max": 0.2})
    assert p["held-out runs"] == pytest.approx({"runs": 1, "mean": 0.2, "max": 0.2})


def test_a_refitted_factor_reaches_the_prediction():
    run = next(r for r in validation.runs() if r["id"] == "korthikanti22-22B-full_recompute")
    assert validation.hardware(run) == "a100-80gb"
    dev = validation.hardware(validation.with_sustained(run, 0.8))
    assert float(dev.attained.sustained) == 0.8 and run["hardware"] == "a100-80gb"  # the run is not changed
    fast, slow = (validation.predict(validation.with_sustained(run, s)) for s in (0.9, 0.6))
    # the step is compute-bound at TP 8 on one node: time ∝ 1/sustained, but for overheads and communication
    assert 1.3 < slow.predicted / fast.predicted <= 0.9 / 0.6
    rows = [validation.Row(run, 2.0, 1.0, 0.5, 1.0, {}), validation.Row(run, 0.5, 1.0, 0.5, 1.0, {})]
    assert validation.fit_sustained(rows, 0.9) == pytest.approx(0.9)  # geometric mean of 2 and 1/2: 1


def test_measured_times_from_throughput_match_the_sources_arithmetic():
    by_id = {r["id"]: r for r in validation.runs()}
    # Narayanan et al. 2021 Table 1, 1T on 3072 GPUs at 163 TFLOP/s: Eq. 3 gives 102.63 s per iteration
    assert validation.measured_step(by_id["narayanan21-1008.0B"]) == pytest.approx(102.63, abs=0.01)
    # 175B-class row (145.6B, 1536 GPUs, 148 TFLOP/s): 24.82 s
    assert validation.measured_step(by_id["narayanan21-145.6B"]) == pytest.approx(24.82, abs=0.01)
    # Megatron-Bridge 25.11, Qwen3 235B-A22B on 256 GB200 at 4916 tokens/s/GPU, GBS 8192 x 4096 tokens:
    # 33,554,432 / (4916 x 256 = 1,258,496) = 26.662 s
    assert validation.measured_step(by_id["mbridge2511-qwen3-235b-a22b-256-gb200-bf16"]) == pytest.approx(
        26.662, abs=1e-3
    )
    # GPT OSS 120B on 64 B200 at 8213 tokens/s/GPU, GBS 512 x 4096: 2,097,152 / 525,632 = 3.990 s
    assert validation.measured_step(by_id["mbridge2511-gpt-oss-120b-64-b200-bf16"]) == pytest.approx(3.990, abs=1e-3)
    assert all(r.get("source") and r.get("flop_convention") and r.get("status") for r in by_id.values())
