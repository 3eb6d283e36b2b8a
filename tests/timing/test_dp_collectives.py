"""Issue 29, item 1: ZeRO's data-parallel traffic as the stacks run it — a reduce-scatter of the gradients and an
all-gather of the parameters, each shard padded to a multiple of dp, each collective in its own overlap window,
and the optimizer stepping only its 1/dp shard. Expected values are worked by hand from the H100's table entry
(costmodel/devices/data/hardware.json): scale-out 50 GB/s per GPU at bus efficiency 0.9, 8 GPUs a node, 20 µs
per collective across nodes; scale-up 450 GB/s at 0.8378, 51.48 µs."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy

import costmodel
from costmodel.memory.parallel import dp_collectives
from costmodel.options import Layout

N = 8_030_261_248  # llama3-8b's parameters
W = 2 * N  # bf16 weights and gradients: 16,060,522,496 bytes
# dp 48 over 8-GPU nodes crosses scale-out: bus bandwidth min(450e9 · 0.8378, 8 · 50e9 · 0.9) = 360e9 B/s
BW_OUT, LAT_OUT = Fraction(360 * 10**9), Fraction(20, 10**6)
BW_UP, LAT_UP = Fraction(450 * 10**9) * Fraction("0.8378"), Fraction("51.48e-6")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def run(**options):
    return costmodel.estimate("llama3-8b", hardware="h100-sxm", **options).to_dict()


def test_zero_traffic_is_a_padded_reduce_scatter_and_all_gather():
    # 16,060,522,496 / 48 = 334,594,218.67 → a 334,594,219-byte shard; a ring sends 47 shards
    shard = ceil_div(W, 48)
    assert shard == 334_594_219
    c = dp_collectives(Layout(dp=48, zero=1), sympy.Integer(W), sympy.Integer(W), 1)
    assert c == {"all_reduce": 0, "reduce_scatter": 47 * shard, "all_gather": 47 * shard}
    assert 47 * shard == 15_725_928_293
    r = run(zero=1, dp=48, batch=48)
    assert r["communication"]["dp"] == {"reduce_scatter_bytes": 15_725_928_293, "all_gather_bytes": 15_725_928_293}
    # the padding counted: 2 · 15,725,928,293 = 31,451,856,586 against the all-reduce's 2·47/48·W = 31,451,856,554.67
    assert r["communication_bytes"]["dp"] == 31_451_856_586
    # where dp divides the buffer, RS + AG is the all-reduce's volume (Megatron's distributed optimizer sends no more)
    c = dp_collectives(Layout(dp=8, zero=2), sympy.Integer(W), sympy.Integer(W), 1)
    assert c["reduce_scatter"] + c["all_gather"] == dp_collectives(Layout(dp=8), sympy.Integer(W), 0, 1)["all_reduce"]


def test_gradients_and_parameters_each_in_their_dtype():
    # fp32 gradients (bf16-mixed-fp32-grads): the reduce-scatter moves 4 bytes a parameter, the gather 2
    r = run(zero=1, dp=8, batch=8, precision="bf16-mixed-fp32-grads")
    assert r["communication"]["dp"] == {"reduce_scatter_bytes": 7 * 4 * N // 8, "all_gather_bytes": 7 * 2 * N // 8}


def test_each_collective_in_its_window():
    t_one = LAT_OUT + Fraction(15_725_928_293) / BW_OUT  # 43.703 ms: one of the two collectives
    r = run(zero=1, dp=48, batch=48, overlap_comm=())  # nothing hidden: both exposed
    assert r["time"]["comm_by_kind"]["dp"] == pytest.approx(float(2 * t_one), rel=1e-12)
    assert r["time"]["breakdown"]["exposed_communication_s"] == pytest.approx(float(2 * t_one), rel=1e-12)
    # --overlap-grad-reduce alone: the reduce-scatter hides behind the last backward (~1.2 s), the gather does not
    r = run(zero=1, dp=48, batch=48, overlap_param_gather=False)
    assert r["time"]["breakdown"]["exposed_communication_s"] == pytest.approx(float(t_one), rel=1e-12)
    assert r["time"]["overlap_comm"] == "dp,sp"  # param_gather named only where it parts from dp
    r = run(zero=1, dp=48, batch=48, overlap_comm=(), overlap_param_gather=True)
    assert r["time"]["breakdown"]["exposed_communication_s"] == pytest.approx(float(t_one), rel=1e-12)
    assert r["time"]["overlap_comm"] == "param_gather"
    r = run(zero=1, dp=48, batch=48)  # the default: both hidden
    assert r["time"]["breakdown"]["exposed_communication_s"] == 0


def test_fsdp_pays_every_unit_every_micro_batch_unhidden():
    # ZeRO-3 over dp 8 (one node, scale-up), 2 micro-batches, 32 layers = 32 units, nothing hidden: per micro-batch
    # and unit a gather forward, a gather backward and a reduce-scatter, each with its latency:
    # 3 · 2 · 32 latencies + (RS + AG bytes) / bus bandwidth
    r = run(zero=3, dp=8, batch=16, micro_batch=1, overlap_comm=())
    shard = ceil_div(W, 8)  # 2,007,565,312: 8 divides W
    rs, ag = 7 * shard * 2, 2 * 7 * shard * 2
    assert r["communication"]["dp"] == {"reduce_scatter_bytes": rs, "all_gather_bytes": ag}
    expected = 3 * 2 * 32 * LAT_UP + Fraction(rs + ag) / BW_UP
    assert r["time"]["comm_by_kind"]["dp"] == pytest.approx(float(expected), rel=1e-12)
    assert r["time"]["breakdown"]["exposed_communication_s"] == pytest.approx(float(expected), rel=1e-12)
    # with prefetch only the first gathers and the last reduce-scatter of each micro-batch stay exposed (the
    # layers' compute hides the rest): 2 micro-batches × (2 gathers + 1 reduce-scatter) of one unit
    r = run(zero=3, dp=8, batch=16, micro_batch=1)
    unit = 2 * (2 * (LAT_UP + Fraction(ag) / (2 * 2 * 32 * BW_UP)) + LAT_UP + Fraction(rs) / (2 * 32 * BW_UP))
    assert r["time"]["breakdown"]["exposed_communication_s"] == pytest.approx(float(unit), rel=1e-12)


def test_the_optimizer_steps_its_shard():
    # ZeRO-1 over 48: ⌈W/48⌉ weights and gradients, ⌈12N/48⌉ = 2,007,565,312 states, read and written:
    # 2 · (334,594,219 + 2,007,565,312) + 2 · 334,594,219 = 5,353,507,500 bytes at 3.35e12 · 0.9345 · 0.72
    nbytes = 2 * (334_594_219 + 2_007_565_312) + 2 * 334_594_219
    assert nbytes == 5_353_507_500
    expected = Fraction(nbytes) / (Fraction("3.35e12") * Fraction("0.9345") * Fraction("0.72")) + Fraction("5.683e-6")
    r = run(zero=1, dp=48, batch=48)
    assert r["time"]["breakdown"]["optimizer_s"] == pytest.approx(float(expected), rel=1e-12)


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    # Megatron keeps the experts in their own buffers, reduced over the dp/ep devices holding the same experts
    # (megatron/core/parallel_state.py's expert data-parallel group). Mixtral 8x7B (32 layers, 8 experts of
    # three 4096 x 14336 matrices; 46,702,792,704 parameters) at dp 16, ep 8 on 8-GPU H100 nodes:
    experts = 32 * 8 * 3 * 4096 * 14336
    assert experts == 45_097_156_608
    dense = 46_702_792_704 - experts  # attention, router, norms, embeddings: 1,605,636,096
    g_e, g_d = 2 * experts // 8, 2 * dense  # bf16 gradients one device holds (experts ÷ ep)
    r = costmodel.estimate("mixtral-8x7b", hardware="h100-sxm", zero=1, dp=16, ep=8, batch=16, overlap_comm=())
    r = r.to_dict()
    assert r["params"]["total"] == 46_702_792_704
    # the experts' group: 16 / 8 = 2 members, 8 ranks apart (one a node): (2 − 1)·⌈G_e/2⌉ each way
    assert r["communication"]["dp"]["expert_reduce_scatter_bytes"] == ceil_div(g_e, 2) == 5_637_144_576
    # the dense weights over all 16: 15·⌈G_d/16⌉; the totals hold both
    assert r["communication"]["dp"]["reduce_scatter_bytes"] == 15 * ceil_div(g_d, 16) + ceil_div(g_e, 2)
    # seconds: the dense part at 8 NICs a node (360 GB/s), the experts' at one (50 GB/s · 0.9), both exposed
    dense_s = LAT_OUT + Fraction(15 * ceil_div(g_d, 16)) / BW_OUT
    expert_s = LAT_OUT + Fraction(ceil_div(g_e, 2)) / Fraction(45 * 10**9)
    assert r["time"]["comm_by_kind"]["dp"] == pytest.approx(float(2 * (dense_s + expert_s)), rel=1e-12)
