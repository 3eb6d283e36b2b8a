"""fp8 precisions time the layers' weight GEMMs at the device's fp8 dense peak, on its fp8 GEMM curve.

The peaks are the datasheets' (costmodel/devices/data/hardware.json): B200 dense BF16 2.25 PFLOP/s, dense FP8
4.5 PFLOP/s (NVIDIA DGX B200 datasheet, per GPU); the fp8 curve is the table's B200 entry (fitted to the OpenXLA
matmul table: η 0.9011, m₀ 127.9, n₀ 133.1, k₀ 505.6, t₀ 5.823 µs). The expected times below are that arithmetic.
"""

from __future__ import annotations

import sympy

from costmodel import estimate
from costmodel.devices.table import device
from costmodel.kit import GraphBuilder
from costmodel.options import Counting, Options
from costmodel.timing.kernels import gemm_dtype, op_time
from costmodel.timing.roofline import op_bounds

R = sympy.Rational
BF16, FP8 = 2_250 * 10**12, 4_500 * 10**12
M, K, N, L = 8192, 4096, 4096, 2


def _graph():
    """Two layers of one matmul (x·W, M×K by K×N), then a head matmul outside the layers."""
    b = GraphBuilder("one-gemm", m=M, k=K)
    x = b.input("x", "m k", dtype="bf16")
    with b.repeat("layers", L):
        x = b.matmul("w", x, "m k, k n -> m n", n=N)
    b.matmul("head", x, "m n, n v -> m v", v=N)
    return b.graph


def test_the_precision_names_the_gemm_dtype():
    assert gemm_dtype(Options.make(precision="fp8-mixed"), "bf16") == "fp8"
    assert gemm_dtype(Options.make(precision="fp8-bf16-states"), "bf16") == "fp8"
    assert gemm_dtype(Options.make(precision="bf16-mixed"), "bf16") == "bf16"
    assert gemm_dtype(Options.make(precision="fp8-mixed", dtype="bf16"), "bf16") == "bf16"  # --dtype: every op


def test_roofline_times_the_layers_matmuls_at_the_fp8_peak():
    rows = {r.name: r for r in op_bounds(_graph(), device("b200"), phase="training", gemm="fp8")}
    # training FLOPs of one matmul: 2MKN forward + 4MKN backward (input and weight gradients), L runs a step
    assert rows["layers.w"].compute_s == R(L * 6 * M * K * N, FP8)
    assert rows["layers.w"].peak == FP8
    # the head is outside Transformer Engine's fp8 scope (Megatron's output layer): the bf16 peak
    assert rows["head"].compute_s == R(6 * M * N * N, BF16)
    bf16 = {r.name: r for r in op_bounds(_graph(), device("b200"), phase="training")}
    assert bf16["layers.w"].compute_s == R(L * 6 * M * K * N, BF16)  # without a compute copy: as before


def test_calibrated_gemm_runs_on_the_fp8_curve():
    dev = device("b200")
    eff = dev.attained
    op = _graph().nodes["layers.w"]["op"]
    t = op_time(op, dev, eff, "bf16", Counting(), gemm="fp8")
    eta, m0, n0, k0, t0 = R("0.9011"), R("127.9"), R("133.1"), R("505.6"), R("5.823e-6")
    X, W, Y = M * K, K * N, M * N  # operand elements: input, weight, output
    # (F + 2(m₀|W| + n₀|X| + k₀|Y|)) / (P·η) + t₀, the GEMM curve of costmodel.devices.efficiency
    forward = (2 * M * K * N + 2 * (m0 * W + n0 * X + k0 * Y)) / (FP8 * eta) + t0
    assert eff.sustained == 1  # no B200 step has fitted a sustained factor: the kernel rates as measured
    assert t.forward == forward


def test_estimate_under_fp8_mixed_reports_the_fp8_peak_and_dtype():
    r = estimate("llama3-8b", batch=1, seq=4096, hardware="b200", precision="fp8-mixed", flash=True)
    t = r["time"]
    assert t["gemm_dtype"] == "fp8" and t["dtype"] == "bf16"
    assert t["peak_flops"] == FP8  # MFU: a share of the peak the model's matmuls run at
    bf16 = estimate("llama3-8b", batch=1, seq=4096, hardware="b200", flash=True)
    assert "gemm_dtype" not in bf16["time"] and bf16["time"]["peak_flops"] == BF16
    assert t["step_s"] < bf16["time"]["step_s"]
