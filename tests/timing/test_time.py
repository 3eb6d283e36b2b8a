"""Time and utilisation against published figures, with their stated inputs."""

import pytest
import sympy

from costmodel import CostModelError
from costmodel.devices.table import device
from costmodel.timing.links import comm_time
from costmodel.timing.quantities import (
    DAY,
    YEAR,
    gpu_hours,
    mfu_from_throughput,
    pipeline_bubble,
    pipeline_time,
    step_time,
    training_time,
    utilization,
)
from costmodel.verbs.estimate import estimate


def test_lecture_gpt3_on_one_h100_is_25_years():
    # Lecture 2: C ≈ 6·N·D = 6 × 1.75e11 × 3e11 ≈ 3.1e23 FLOPs; one H100 at 400 TFLOP/s: ≈ 7.8e8 s ≈ 25 years
    t = training_time(6 * 175 * 10**9 * 300 * 10**9, 1, 400 * 10**12)
    assert t == 787_500_000
    assert float(t / YEAR) == pytest.approx(25, abs=0.1)


@pytest.fixture(scope="module")
def gpt3_lecture():
    return estimate("gpt3-175b", tokens=300 * 10**9, hardware="h100-sxm", achieved_flops=400 * 10**12)


def test_lecture_example_from_the_engine(gpt3_lecture):
    t = gpt3_lecture["time"]
    # 6ND with the engine's non-embedding N (173.96e9) at the same rate: the lecture's 7.8e8 s
    assert t["six_nd_training_s"] == pytest.approx(7.8e8, rel=0.01)
    # the exact count adds attention scores (full T×T), the unembedding and element-wise ops: +3%
    assert 24.5 < t["training_s"] / (365.25 * 86400) < 26.5
    assert gpt3_lecture["mfu"] == pytest.approx(400 / 989.4)  # achieved ÷ the table's dense bf16 peak
    assert t["gpu_hours"] == pytest.approx(t["training_s"] / 3600)


def test_megatron_gpt3_on_1024_a100_is_34_days():
    # Narayanan et al. 2021 (Megatron-LM, §5.1): end-to-end time ≈ 8·T·P/(n·X); GPT-3 175B, T = 300B tokens,
    # n = 1024 A100s, X = 140 TFLOP/s each: "about 34 days". 8 = 6 (model) + 2 (activation recompute).
    their = training_time(8 * 300 * 10**9 * 175 * 10**9, 1024, 140 * 10**12)
    assert float(their / DAY) == pytest.approx(34, abs=0.5)
    r = estimate(
        "gpt3-175b",
        tokens=300 * 10**9,
        hardware="a100-80gb",
        devices=1024,
        achieved_flops=140 * 10**12,
        recompute="full",
    )
    assert r["time"]["training_days"] == pytest.approx(34, rel=0.05)  # the engine's exact count
    assert r["hfu"] == pytest.approx(140 / 312)  # every executed FLOP ÷ A100 bf16 peak
    assert r["mfu"] < r["hfu"]


def test_palm_540b_mfu():
    # PaLM (Chowdhery et al. 2022), §4 and Appendix B: 238.3K tokens/s on 6144 TPU v4 chips → MFU 46.2%;
    # model FLOPs per token 6N + 12·L·H·Q·T with N = 540.35e9, L = 118, H = 48, Q = 256, T = 2048
    per_token = 6 * 540_350_000_000 + 12 * 118 * 48 * 256 * 2048
    mfu = mfu_from_throughput(238_300, per_token, 6144, device("tpu-v4").peak("bf16"))
    assert round(float(mfu), 3) == 0.462


def test_mfu_given_sets_the_rate():
    r = estimate("gpt2-small", batch=8, seq=1024, hardware="a100-80gb", mfu=sympy.Rational(1, 2))
    t = r["time"]
    assert r["mfu"] == pytest.approx(0.5)
    assert t["step_s"] == pytest.approx(r["flops"]["training"] / (0.5 * 312e12))
    assert t["tokens_per_s"] == pytest.approx(8 * 1024 / t["step_s"])


def test_roofline_basis_without_a_rate():
    r = estimate("gpt2-small", batch=8, seq=1024, hardware="h100-sxm", devices=8, time_model="roofline")
    t = r["time"]
    assert t["basis"] == "roofline" and t["step_s"] == t["roofline_step_s"]
    assert 0 < r["mfu"] < 1


def test_time_options_errors():
    with pytest.raises(CostModelError, match="needs a device"):
        estimate("gpt2-small", mfu=sympy.Rational(1, 2))
    with pytest.raises(CostModelError, match="give one of achieved_flops, mfu and tokens_per_s"):
        estimate("gpt2-small", hardware="h100-sxm", mfu=sympy.Rational(1, 2), achieved_flops=10**14)
    with pytest.raises(CostModelError, match="0 < MFU <= 1"):
        estimate("gpt2-small", hardware="h100-sxm", mfu=2)


def test_pipeline_bubble_and_communication():
    assert pipeline_bubble(1, 8) == 0
    assert pipeline_bubble(4, 8) == sympy.Rational(3, 11)  # (p − 1)/(m + p − 1)
    assert pipeline_time(8, 4, 8) == 11  # busy 8 s over m = 8 microbatches → (m + p − 1) slots of 1 s
    # 10 GB over NVLink 4 (450 GB/s per direction) takes 1/45 s
    t = comm_time(10 * 10**9, device("h100-sxm").link("scale_up"))
    assert t == sympy.Rational(1, 45)
    assert step_time(1, t) == 1 + t and step_time(1, t, overlap=True) == 1
    with pytest.raises(CostModelError, match="no scale_out bandwidth"):
        device("tpu-v4").link("scale_out")


def test_comm_bytes_option_adds_time_to_the_roofline_step_only():
    base = estimate("gpt2-small", hardware="h100-sxm", time_model="roofline")
    r = estimate("gpt2-small", hardware="h100-sxm", comm_bytes={"scale_up": 450 * 10**9}, time_model="roofline")
    assert r["time"]["comm_s"] == 1.0 and r["time"]["overlap"] is False  # 450 GB over 450 GB/s NVLink
    assert r["time"]["step_s"] == pytest.approx(base["time"]["step_s"] + 1)
    # an MFU is end-to-end (PaLM's definition): communication is already inside it
    half = sympy.Rational(1, 2)
    a = estimate("gpt2-small", hardware="h100-sxm", mfu=half)
    b = estimate("gpt2-small", hardware="h100-sxm", mfu=half, comm_bytes={"scale_up": 450 * 10**9})
    assert a["time"]["step_s"] == b["time"]["step_s"] and b["mfu"] == pytest.approx(0.5)


def test_utilization_and_hours():
    assert utilization(100, 1, 2, 100) == sympy.Rational(1, 2)
    assert gpu_hours(7200, 8) == 16


def _step_with(keys, **options):
    """A time section fed the keys the memory section writes (communication, recompute, micro-batches)."""
    from costmodel.families import load
    from costmodel.formulas.quantities import Quantities
    from costmodel.options import Options
    from costmodel.sections.quantities import count_quantities
    from costmodel.symbols import B
    from costmodel.timing.quantities import time_quantities

    m = load("gpt2-small")
    rated = any(k in options for k in ("mfu", "achieved_flops", "tokens_per_s"))
    opts = Options.make(hardware="h100-sxm", **({} if rated else {"time_model": "roofline"}), **options)
    q = count_quantities(m, opts, Quantities())
    for k, v in keys.items():
        q.add(k, v)
    values = {**m.values, B: 8}
    return q.evaluate(values), time_quantities(m, opts, q).evaluate(values)


def test_time_uses_the_memory_sections_layout_and_volumes():
    layout = {"dp": 4, "tp": 2, "pp": 2}
    # dp gradients over the network (50 GB/s per direction): 25 GB → 0.5 s; tp over NVLink (450 GB/s): 450 GB → 1 s
    volumes = {
        "communication_bytes.dp": 25 * 10**9,
        "communication_bytes.tp": 450 * 10**9,
        "communication_bytes.total": 475 * 10**9,
    }
    report, t = _step_with({"memory.layout.micro_batches": 8, **volumes, "flops.recompute": 10**12}, **layout)
    assert t["time.devices"] == 16
    assert t["time.comm_by_kind.dp"] == 0.5 and t["time.comm_by_kind.tp"] == 1.0 and t["time.comm_s"] == 1.5
    assert t["time.pipeline_bubble"] == pytest.approx(1 / 9)  # (p − 1)/(m + p − 1) with p = 2, m = 8
    # the roofline basis: compute bound + communication (no overlap), then the bubble
    assert t["time.step_s"] == pytest.approx((t["time.compute_s"] + 1.5) * 9 / 8)
    assert t["hfu"] > t["mfu"]  # the recompute FLOPs count as hardware work
    # at a given MFU the step is the model FLOPs at that rate, bubbles and communication included
    _, e2e = _step_with({"memory.layout.micro_batches": 8, **volumes}, mfu=sympy.Rational(1, 2), **layout)
    assert e2e["mfu"] == pytest.approx(0.5)
    assert e2e["time.step_s"] == pytest.approx(report["flops.training"] / (16 * 0.5 * 989.4e12))


def test_devices_must_agree_with_the_layout():
    with pytest.raises(CostModelError, match="disagrees with the layout"):
        _step_with({}, dp=4, devices=8)


def test_overlap_hides_communication():
    _, t = _step_with({"communication_bytes.dp": 25 * 10**9}, overlap=True)
    assert t["time.step_s"] == pytest.approx(max(t["time.compute_s"], 0.5))


def test_measured_throughput_gives_mfu():
    # a run at MFU 40% and the throughput it implies agree both ways
    a = estimate("gpt3-175b", hardware="tpu-v4", devices=6144, mfu=sympy.Rational(2, 5))
    tps = sympy.Rational(a["tokens"]["per_step"]) / sympy.Rational(a["time"]["step_s"])
    b = estimate("gpt3-175b", hardware="tpu-v4", devices=6144, tokens_per_s=tps)
    assert b["time"]["basis"] == "measured" and b["mfu"] == pytest.approx(0.4)
    # the definition: model FLOPs per token × tokens/s ÷ (N × 275 TFLOP/s)
    per_token = a["flops"]["training"] / a["tokens"]["per_step"]
    assert b["mfu"] == pytest.approx(per_token * float(tps) / (6144 * 275e12))


def test_inference_option_gives_ttft_and_decode():
    r = estimate("gpt3-6.7b", hardware="h100-sxm", inference=True, context=4096)
    t = r["time"]
    # decode at B = 1 reads the bf16 weights (13.30 GB) and the KV cache (2.15 GB) at 3.35 TB/s
    assert t["decode_bound"] == "memory" and 4.6e-3 < t["decode_step_s"] < 4.7e-3
    assert t["ttft_s"] > t["decode_step_s"] and "step_s" not in t


def test_flash_option_uses_the_fused_attention_graph():
    plain = estimate("gpt2-small", hardware="h100-sxm")
    flash = estimate("gpt2-small", hardware="h100-sxm", flash=True)
    assert flash["time"]["roofline_step_s"] < plain["time"]["roofline_step_s"]  # no T×T traffic
    assert flash["hfu"] > flash["mfu"]  # FlashAttention recomputes the scores in backward
    assert plain["hfu"] == plain["mfu"]
