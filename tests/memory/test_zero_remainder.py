"""Issue 30, item 5: ZeRO over a dp that does not divide the byte counts shards with a remainder, each shard
rounded up to whole bytes (frameworks pad their flat buffers to a multiple of dp); it was refused with
"memory_bytes.parts.master is not a whole number: 16060522496/3"."""

import pytest

import costmodel
from costmodel.cli import main

N = 8_030_261_248  # llama3-8b's parameters (params.total)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def test_zero3_over_six_devices_rounds_each_shard_up():
    r = costmodel.estimate("llama3-8b", zero=3, dp=6, batch=6).to_dict()
    assert r["params"]["total"] == N
    m = r["memory_bytes"]
    # bf16 weights: 2 · 8,030,261,248 / 6 = 2,676,753,749.33 → 2,676,753,750
    assert m["params"] == m["grads"] == ceil_div(2 * N, 6) == 2_676_753_750
    # fp32 master, m and v: 4 · N / 6 = 5,353,507,498.67 → 5,353,507,499 each
    assert m["parts"]["master"] == m["parts"]["m"] == m["parts"]["v"] == ceil_div(4 * N, 6) == 5_353_507_499
    assert m["optimizer"] == ceil_div(12 * N, 6)  # 16,060,522,496: 6 divides 12 N


@pytest.mark.parametrize("zero, dp", [(1, 7), (2, 5), (3, 12), (1, 3)])
def test_every_zero_stage_over_a_dp_with_a_remainder(zero, dp):
    m = costmodel.estimate("llama3-8b", zero=zero, dp=dp, batch=dp).to_dict()["memory_bytes"]
    assert m["optimizer"] == ceil_div(12 * N, dp)  # ZeRO-1 and up shard the optimizer group
    assert m["parts"]["master"] == ceil_div(4 * N, dp)
    assert m["grads"] == (ceil_div(2 * N, dp) if zero >= 2 else 2 * N)
    assert m["params"] == (ceil_div(2 * N, dp) if zero >= 3 else 2 * N)


def test_the_cli_follows_its_own_hint(capsys):
    assert main(["estimate", "llama3-8b", "--zero", "3", "--dp", "5", "--batch", "5", "--json"]) == 0
