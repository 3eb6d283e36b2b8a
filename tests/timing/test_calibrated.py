"""The calibrated time model: collectives and tiers, schedules, efficiency curves, calibration, the estimate.

Golden numbers are the published formulas (ring collectives: Patarasuk & Yuan 2009 / nccl-tests' busbw;
bubbles: Narayanan et al. 2021, Qi et al. 2024, DeepSeek-AI 2024) written as arithmetic."""

from __future__ import annotations

import math

import pytest
import sympy

from costmodel import CostModelError, estimate
from costmodel.devices.efficiency import GENERIC, GemmCurve, gemm_seconds, parse_efficiency
from costmodel.devices.network import FACTORS, bus_bandwidth, collective_seconds, per_node
from costmodel.devices.table import device
from costmodel.memory.schedules import bubble_share, in_flight, stage_layers
from costmodel.options import Options
from costmodel.verbs.calibrate import calibrate, fit_gemm

R = sympy.Rational


def test_collective_factors_are_the_ring_algorithms():
    assert FACTORS["all_reduce"](sympy.Integer(8)) == R(7, 4)  # 2(n − 1)/n
    assert FACTORS["reduce_scatter"](sympy.Integer(8)) == R(7, 8) == FACTORS["all_gather"](sympy.Integer(8))
    assert FACTORS["all_to_all"](sympy.Integer(4)) == R(3, 4) and FACTORS["p2p"](sympy.Integer(2)) == 1


def test_each_group_lands_on_the_tier_it_spans():
    h100 = device("h100-sxm")
    up, out = 450 * 10**9 * GENERIC.scale_up.efficiency, 50 * 10**9 * GENERIC.scale_out.efficiency
    assert bus_bandwidth(h100, GENERIC, 8, 1) == up  # TP 8 stays inside a node of 8
    assert bus_bandwidth(h100, GENERIC, 64, 8) == out  # DP over TP 8: one member per node, one NIC each
    assert bus_bandwidth(h100, GENERIC, 16, 1) == min(up, 8 * out)  # TP 16 crosses a node boundary on 8 NICs
    assert per_node(4, 4, 8) == 2
    # 1 GB all-reduced by 8 GPUs in a node: latency + 2·7/8 GB at the attained NVLink bus bandwidth
    t = collective_seconds("all_reduce", 10**9, h100, GENERIC, 8, 1)
    assert t == GENERIC.scale_up.latency_s + R(7, 4) * 10**9 / up
    assert collective_seconds("all_reduce", 10**9, h100, GENERIC, 1, 1) == 0
    with pytest.raises(CostModelError, match="collective 'broadcast'"):
        collective_seconds("broadcast", 1, h100, GENERIC, 2, 1)


def test_schedule_bubbles_and_in_flight_activations():
    tf, tb = sympy.symbols("t_f t_b", positive=True)
    assert bubble_share("1f1b", 8, 1, tf, tb) == 1 and bubble_share("gpipe", 8, 1, tf, tb) == 1
    assert bubble_share("interleaved", 8, 3, tf, tb) == R(1, 3)  # (p − 1)(t_f + t_b)/v
    assert bubble_share("zb-h1", 8, 1, tf, tb) == tf / (tf + tb)  # (p − 1)·t_f with t_B = t_W = t_b/2
    # DualPipe: (p/2 − 1)(t_F&B + t_B − 3t_W) = (p/2 − 1)·t_f, as a share of (p − 1)(t_f + t_b)
    assert sympy.simplify(bubble_share("dualpipe", 8, 1, tf, tb) * 7 * (tf + tb) - 3 * tf) == 0
    assert in_flight("1f1b", "first", 8, 64) == 8 and in_flight("1f1b", "last", 8, 64) == 1
    assert in_flight("gpipe", "first", 8, 64) == 64 and in_flight("dualpipe", "first", 8, 64) == 9
    # Korthikanti et al. 2022, Sec. 4.2.3: p·(1 + (p − 1)/(p·v)) with p = 8, v = 3
    assert in_flight("interleaved", "first", 8, 64, 3) == 8 * (1 + R(7, 24))
    assert stage_layers(126, 16, 7, 7) == (7,) + (8,) * 14 + (7,)  # Llama 3 405B
    with pytest.raises(CostModelError, match="do not split evenly.*e.g. --stage-layers 7,7"):
        stage_layers(126, 16)  # the hint: Llama 3 405B's split, the first and last stages one layer fewer


def test_gemm_curve_rises_to_its_plateau():
    g = GemmCurve(R(4, 5), R(16), R(16), R(128), R(0))
    peak = 10**15

    def eff(m, n, k):
        return 2 * m * n * k / (gemm_seconds(2 * m * n * k, m * k, k * n, m * n, peak, g) * peak)

    small, large = eff(256, 256, 256), eff(16384, 16384, 16384)
    assert small < large < R(4, 5) and large > R(4, 5) * R(99, 100)
    # exact: η·MNK/(MNK + m₀NK + n₀MK + k₀MN) at M = N = K = 256: 0.8 × 256/(256 + 16 + 16 + 128)
    assert small == R(4, 5) * 256 / (256 + 16 + 16 + 128)


def test_efficiency_table_errors_name_the_field():
    with pytest.raises(CostModelError, match="efficiency: unknown field 'gem'"):
        parse_efficiency({"gem": {}}, None, "dev")
    with pytest.raises(CostModelError, match="out of range"):
        parse_efficiency({"memory": "1.5"}, None, "dev")
    with pytest.raises(CostModelError, match="missing"):
        parse_efficiency({"gemm": {"bf16": {"efficiency": "0.8"}}}, None, "dev")


def test_calibrate_recovers_a_known_curve():
    # measurements made by a known curve: the fit gives it back (relative least squares)
    true = {"efficiency": 0.82, "m0": 20.0, "n0": 24.0, "k0": 160.0, "overhead_s": 6e-6}
    peak, bw = 989.4e12, 3.35e12
    rows = []
    for m in (256, 1024, 4096):
        for n in (256, 2048, 8192):
            for k in (128, 1024, 8192):
                F = 2 * m * n * k
                c = (F + 2 * (true["m0"] * k * n + true["n0"] * m * k + true["k0"] * m * n)) / (
                    peak * true["efficiency"]
                )
                rows.append(
                    {
                        "kind": "gemm",
                        "dtype": "bf16",
                        "batch": 1.0,
                        "m": m,
                        "n": n,
                        "k": k,
                        "seconds": max(c, 2 * (m * k + k * n + m * n) / (bw * 0.9)) + true["overhead_s"],
                    }
                )
    fit = fit_gemm(rows, peak, bw)
    assert fit["efficiency"] == pytest.approx(true["efficiency"], rel=1e-3)
    assert fit["k0"] == pytest.approx(true["k0"], rel=1e-2)
    table = calibrate(rows, device("h100-sxm"), name="mine")
    assert table["devices"]["mine"]["efficiency"]["gemm"]["bf16"]["efficiency"] == "0.82"


def test_layout_options_schedule_and_cp_alias():
    o = Options.make(pp=4, vpp=2, tp=2)
    assert o.layout.schedule == "interleaved"
    assert Options.make(cp=4).layout.sp == 4
    with pytest.raises(CostModelError, match="even --pp"):
        Options.make(pp=3, schedule="dualpipe")
    with pytest.raises(CostModelError, match="expected --pp > 1"):
        Options.make(schedule="gpipe")
    with pytest.raises(CostModelError, match="time_model"):
        Options.make(hardware="h100-sxm", mfu=R(1, 2), time_model="calibrated")


def test_calibrated_estimate_is_the_sum_of_its_parts():
    r = estimate("gpt2-small", batch=16, seq=1024, hardware="a100-80gb", tp=2, pp=2, dp=2, micro_batch=2, devices=8)
    t = r["time"]
    assert t["basis"] == "calibrated"
    b = t["breakdown"]
    parts = b["compute_s"] + b["exposed_communication_s"] + b["bubble_s"] + b["optimizer_s"]
    assert t["step_s"] == pytest.approx(parts, rel=1e-12)
    assert t["step_s"] > t["roofline_step_s"]  # attained rates are below peak: slower than the bound
    assert 0 < r["mfu"] < 1 and r["hfu"] >= r["mfu"]
    roof = estimate(
        "gpt2-small",
        batch=16,
        seq=1024,
        hardware="a100-80gb",
        tp=2,
        pp=2,
        dp=2,
        micro_batch=2,
        devices=8,
        time_model="roofline",
    )["time"]
    assert roof["basis"] == "roofline" and roof["roofline_step_s"] == pytest.approx(t["roofline_step_s"])


def test_interleaving_shrinks_the_bubble_and_grows_the_first_stage():
    common = dict(batch=16, seq=512, hardware="h100-sxm", tp=1, pp=2, micro_batch=1, devices=2)
    plain = estimate("gpt2-small", **common)
    inter = estimate("gpt2-small", vpp=2, **common)
    assert inter["time"]["breakdown"]["bubble_s"] < plain["time"]["breakdown"]["bubble_s"]
    assert inter["memory_bytes"]["activations"] > plain["memory_bytes"]["activations"]
    assert math.isfinite(inter["time"]["step_s"])


def test_calibrate_cli_writes_a_hardware_file_estimate_reads(tmp_path):
    from costmodel.cli import main

    csv = tmp_path / "kernels.csv"
    lines = ["kind,dtype,batch,m,n,k,bytes,group,tier,seconds"]
    for m, n, k in (
        (4096, 4096, 4096),
        (1024, 1024, 1024),
        (8192, 8192, 8192),
        (256, 256, 256),
        (2048, 8192, 1024),
        (512, 4096, 4096),
        (1024, 2048, 128),
    ):
        lines.append(f"gemm,bf16,1,{m},{n},{k},,,,{2 * m * n * k / 7e14 + 6e-6:.6g}")  # 700 TFLOP/s + 6 µs
    lines += ["all_reduce,,,,,,268435456,8,scale_up,1.4e-3", "all_reduce,,,,,,1048576,8,scale_up,6.0e-5"]
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "mine.json"
    assert main(["calibrate", str(csv), "--hardware", "h100-sxm", "--name", "mine", "-o", str(out)]) == 0
    r = estimate("gpt2-small", batch=8, seq=256, hardware=str(out), tp=2, devices=2)
    assert r["time"]["basis"] == "calibrated" and r["time"]["hardware"] == "mine"
    assert main(["calibrate", str(tmp_path / "missing.csv")]) == 2
