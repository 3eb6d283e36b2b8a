"""Issue 29, item 2: the cluster as an input, apart from the device (--gpus-per-node, --scale-out GBPS[/node],
--cluster FILE), every parallel group priced on the tiers it crosses. Hand arithmetic from the H100's table entry:
NVLink 450 GB/s per direction at bus efficiency 0.8378, scale-out at 0.9, 20 µs per collective across nodes."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import sympy

import costmodel
from costmodel import CostModelError
from costmodel.cli import main
from costmodel.devices.cluster import Cluster, on_cluster, read_cluster
from costmodel.devices.network import bus_bandwidth, latency
from costmodel.devices.table import device

UP = sympy.Rational(450 * 10**9) * sympy.Rational("0.8378")  # 377.01 GB/s


def bw(dev, n, stride):
    return bus_bandwidth(dev, dev.attained, n, stride)


def test_one_nic_per_gpu_and_four_per_node_are_told_apart():
    h100 = device("h100-sxm")
    per_gpu = on_cluster(h100, Cluster(scale_out_gbps=Fraction(25)))  # one 200 Gb/s NIC per GPU
    per_node = on_cluster(h100, Cluster(scale_out_gbps=Fraction(100), per="node"))  # four 200 Gb/s NICs per node
    assert per_gpu.scale_out_bandwidth == 25 * 10**9 and per_node.scale_out_bandwidth == 100 * 10**9 // 8
    # TP 16 over two 8-GPU nodes: 8 members a node reach the other node on 8 NICs: min(377.01, 8 × s × 0.9) GB/s
    assert bw(per_gpu, 16, 1) == 8 * 25 * 10**9 * sympy.Rational("0.9")  # 180 GB/s
    assert bw(per_node, 16, 1) == 8 * sympy.Rational(100 * 10**9, 8) * sympy.Rational("0.9")  # 90 GB/s
    assert latency(per_node.attained, 16, 1) == sympy.Rational("20e-6")
    # DP with one member per node (tp 8 below it): one device's share of the network, 12.5 GB/s × 0.9
    assert bw(per_node, 4, 8) == sympy.Rational(100 * 10**9, 8) * sympy.Rational("0.9")
    # a 16-GPU NVLink domain keeps TP 16 on NVLink
    big = on_cluster(h100, Cluster(gpus_per_node=16))
    assert bw(big, 16, 1) == UP and latency(big.attained, 16, 1) == sympy.Rational("51.48e-6")
    assert on_cluster(h100, Cluster()) is h100  # nothing given: the device as the table has it


def test_the_estimate_prices_tp16_on_the_tier_it_crosses():
    opts = dict(tp=16, dp=2, batch=32, hardware="h100-sxm", overlap_comm=())

    def tp_seconds(**cluster):
        r = costmodel.estimate("llama3-70b", **opts, **cluster).to_dict()
        return r["time"]["comm_by_kind"]["tp"], r["communication_bytes"]["tp"], r["time"]

    # each collective costs latency + its bytes / bus bandwidth, and communication_bytes.tp is the bytes each
    # device sends: two networks with the same latency differ by bytes × (1/bw_a − 1/bw_b)
    a, nbytes, ta = tp_seconds(scale_out="100/node")  # 90 GB/s
    b, _, _ = tp_seconds(scale_out="400/node")  # 8 × 50 × 0.9 = 360 GB/s
    assert a - b == pytest.approx(nbytes * (1 / 90e9 - 1 / 360e9), rel=1e-9)
    assert ta["gpus_per_node"] == 8 and ta["scale_out_bandwidth"] == 12_500_000_000
    c, _, tc = tp_seconds(gpus_per_node=16)  # inside one node: NVLink, its own latency
    assert tc["gpus_per_node"] == 16
    # the report names the tier each group crosses: TP 16 has 8 members in each 8-GPU node, DP one
    assert ta["tier"] == {"tp": "scale-out, 8 of 16 a node", "dp": "scale-out, one a node"}
    assert tc["tier"]["tp"] == "scale-up"
    assert c < b < a


def test_a_cluster_file_and_the_flags_over_it(tmp_path):
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps({"gpus_per_node": 8, "scale_out_gbps": "100", "scale_out_per": "node", "source": "ours"}))
    c = read_cluster(f)
    assert c == Cluster(8, Fraction(100), "node", "ours")
    r = costmodel.estimate("llama3-8b", dp=16, batch=16, hardware="h100-sxm", cluster=str(f)).to_dict()
    assert r["time"]["scale_out_bandwidth"] == 12_500_000_000
    r = costmodel.estimate("llama3-8b", dp=16, batch=16, hardware="h100-sxm", cluster=str(f), scale_out="50")
    assert r.to_dict()["time"]["scale_out_bandwidth"] == 50_000_000_000  # the flag wins


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--scale-out", "fast"], "--scale-out: expected GB/s"),
        (["--scale-out", "50/rack"], "--scale-out: expected GB/s"),
        (["--gpus-per-node", "0"], "--gpus-per-node: expected a whole number"),
    ],
)
def test_bad_cluster_input_is_one_line(argv, says, capsys):
    assert main(["estimate", "llama3-8b", "--hardware", "h100-sxm", *argv]) == 2
    assert says in capsys.readouterr().err


def test_a_cluster_needs_a_device():
    with pytest.raises(CostModelError, match="give --hardware"):
        costmodel.Options.make(scale_out="50")
