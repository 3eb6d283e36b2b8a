"""Issue 29, item 3: a kernel cannot start before the host has launched it — each op takes at least its kernels'
launches, t = max(kernel, kernels × launch), and CUDA graphs remove the floor. Hand arithmetic on the H100's
entry: memory bandwidth 3.35e12 B/s at η_w 0.9345, sustained 0.72, t₀ = 5.683 µs per kernel."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy

import costmodel
from costmodel.devices.table import device
from costmodel.kit import GraphBuilder
from costmodel.kit import symbols as s
from costmodel.options import Counting
from costmodel.timing.host import host_of
from costmodel.timing.kernels import op_time

H100 = device("h100-sxm")
US = sympy.Rational(1, 10**6)


def ops():
    b = GraphBuilder("mlp", b=s.B, d=s.d, f=s.d_ff)
    u = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    b.elementwise("act", "gelu", u, "b f")
    sizes = {s.B: 1, s.d: 8, s.d_ff: 8}
    return {n: d["op"] for n, d in b.graph.nodes(data=True) if "op" in d}, sizes


def test_a_small_op_lasts_its_launches():
    op, sizes = ops()
    act = op["act"]
    act = type(act)(act.kind, act.pattern, tuple((a, v.xreplace(sizes)) for a, v in act.sizes), act.dtype, act.attrs)
    eff = H100.attained
    plain = op_time(act, H100, eff, "bf16", Counting())
    # 8 bf16 elements in and out: 32 bytes / (3.35e12 · 0.9345) / 0.72 + 5.683 µs, a hair above t₀
    kernel = sympy.Rational(32) / (sympy.Rational("3.35e12") * sympy.Rational("0.9345")) / sympy.Rational("0.72")
    assert plain.forward == kernel + sympy.Rational("5.683e-6")
    floored = op_time(act, H100, eff, "bf16", Counting(), 20 * US)
    assert floored.forward == 20 * US  # max(5.683 µs, 1 launch × 20 µs)
    assert floored.backward == 20 * US  # gelu's backward: one kernel
    # the default launch (5 µs) is below every kernel's own t₀: it never binds, the expression is unchanged
    assert op_time(act, H100, eff, "bf16", Counting(), host_of().launch_s) == plain


def test_a_matmuls_backward_waits_for_two_launches():
    op, sizes = ops()
    fc = op["fc"]
    fc = type(fc)(fc.kind, fc.pattern, tuple((a, v.xreplace(sizes)) for a, v in fc.sizes), fc.dtype, fc.attrs)
    t = op_time(fc, H100, H100.attained, "bf16", Counting(), 20 * US)
    assert (t.forward, t.backward) == (20 * US, 40 * US)  # input and weight gradients: two kernels


def test_cuda_graphs_remove_the_floor_and_the_default_keeps_todays_step():
    run = lambda **o: costmodel.estimate("gpt2-small", batch=1, hardware="h100-sxm", **o).to_dict()["time"]  # noqa: E731
    today = run()["step_s"]
    assert run(cuda_graphs=True)["step_s"] == today  # the 5 µs default never binds (t₀ ≥ 5.683 µs)
    slow = run(launch_us=Fraction(20))["step_s"]
    assert slow > 1.3 * today  # gpt2-small at micro-batch 1: most of its kernels are shorter than 20 µs
    assert run(launch_us=Fraction(20), cuda_graphs=True)["step_s"] == pytest.approx(today, rel=1e-12)


def test_the_host_data_names_its_sources():
    h = host_of("nemo")
    assert h.launch_s == 5 * US and "Holistic Trace Analysis" in host_of().source
    assert host_of("nemo", cuda_graphs=True).launch_s == 0 and "CUDA graphs" in host_of(cuda_graphs=True).source
