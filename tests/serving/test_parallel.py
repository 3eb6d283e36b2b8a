"""Serving's expert parallelism and attention data parallelism (costmodel.serving.parallel, issue 32 item 8):
the mapping's rules, one device's weights under it by hand, the all-to-all's bytes by hand, and the step and the
serve verb under it."""

from __future__ import annotations

import pytest

import costmodel
from costmodel.devices.network import collective_seconds
from costmodel.devices.table import device
from costmodel.families import load
from costmodel.graph.composite import experts_touched
from costmodel.memory.device import prepared
from costmodel.options import Options
from costmodel.serving.memory import kv_pool
from costmodel.serving.parallel import Replica
from costmodel.serving.profiles import profile
from costmodel.serving.step import step_model
from costmodel.symbols import B, C, T


def _step(m, **kw):
    return step_model(prepared(m.graph, Options(inference=True)), m.values, device("h100-sxm"), **kw)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(tp=2, ep=4), "--ep 1 or --ep 2"),  # ep spans tp × attention-dp, not a part of it
        (dict(tp=4, ep=2), "--ep 1 or --ep 4"),
        (dict(tp=4, attention_dp=2), "add --ep 8"),  # the ranks meet only in expert layers
        (dict(tp=4, ep=8, attention_dp=2, pp=2), "not modelled"),
        (dict(tp=0), "tp must be"),
    ],
)
def test_the_mapping_refuses_what_engines_do_not_run(kw, message):
    with pytest.raises(costmodel.CostModelError, match=message):
        Replica(**kw)


def test_a_replica_counts_its_devices_and_checks_the_model():
    r = Replica(tp=4, ep=8, attention_dp=2)
    assert (r.devices, r.ranks) == (8, 2)
    with pytest.raises(costmodel.CostModelError, match="routes no experts"):
        r.check(None, "llama3-8b")
    with pytest.raises(costmodel.CostModelError, match="does not divide"):
        Replica(tp=4, ep=12, attention_dp=3).check(8, "mixtral-8x7b")
    Replica(tp=8, ep=8).check(8, "mixtral-8x7b")


def test_a_device_holds_a_tp_share_of_the_dense_weights_and_an_ep_share_of_the_experts():
    m = load("qwen3-30b-a3b")
    values = {k: v for k, v in m.values.items() if k not in (B, C, T)}
    pool = kv_pool(
        m.graph,
        values,
        device("h100-sxm"),
        profile("vllm-v1"),
        tp=2,
        layout=Replica(tp=2, ep=8, attention_dp=4).memory_layout(),
    )
    # experts: 48 layers × 128 experts × 3 matrices × 2048 × 768 = 28,991,029,248 parameters; the model's
    # 30,532,122,624 (Qwen3-30B-A3B's published 30.5B) less them: 1,541,093,376 dense. In bf16 one device holds
    # 1,541,093,376 × 2 / 2 (tp) + 28,991,029,248 × 2 / 8 (ep) = 1,541,093,376 + 7,247,757,312 = 8,788,850,688 bytes
    assert pool.weights_bytes == 8_788_850_688
    tp_only = kv_pool(m.graph, values, device("h100-sxm"), profile("vllm-v1"), tp=2)
    assert tp_only.weights_bytes == 30_532_122_624  # 30,532,122,624 × 2 / 2
    assert pool.kv_bytes_per_token == tp_only.kv_bytes_per_token  # a rank's KV is its tp group's


def test_the_all_to_all_carries_every_ranks_routed_copies_over_the_expert_group():
    m = load("qwen3-30b-a3b")
    dev = device("h100-sxm")
    batch = [(1, 1024)] * 16
    dense = _step(m, tp=4)
    dp = _step(m, tp=4, ep=8, attention_dp=2)
    # dispatch and combine each move 2 ranks × 16 tokens × 8 copies × 2048 × 2 bytes / 8 devices = 131,072 bytes
    # a device, (8 − 1)/8 of it sent, in each of the 48 layers; the tp all-reduces of the dense layers are alike
    a2a = 2 * collective_seconds("all_to_all", 131_072, dev, dev.efficiency, 8, 1, 48)
    got = dp.breakdown(batch)["communication"] - dense.breakdown(batch)["communication"]
    assert got == pytest.approx(float(a2a), rel=1e-12)
    # the expert layers see 32 tokens: E·(1 − (1 − k/E)^32) experts touched
    assert dp.sizes(batch)[next(s for s in dp.symbols if str(s) == "E_touched")] == experts_touched(128, 8, 32)


def test_two_attention_ranks_of_tp_4_run_what_one_tp_8_group_runs_for_twice_the_batch():
    # per device: the matmuls 1/4 of B tokens' work = 1/8 of 2B's, the experts' 2B·k/8 copies in both; the
    # element-wise ops tp does not split (norms, the router's softmax) run on a rank's B tokens here, all 2B there
    m = load("mixtral-8x7b")
    dp = _step(m, tp=4, ep=8, attention_dp=2)
    wide = _step(m, tp=8, ep=8)
    batch = [(1, 2048)] * 24 + [(512, 0)]
    assert dp.step_flops(batch, matmul=True) == wide.step_flops(batch + batch, matmul=True)
    assert dp.step_flops(batch) < wide.step_flops(batch + batch)
    with pytest.raises(costmodel.CostModelError, match="ep 8"):
        _step(m, tp=4, ep=4, attention_dp=2)


def test_serve_takes_ep_over_the_tp_group_and_attention_dp_ranks():
    kw = dict(concurrency=32, requests=64, input_len="512", output_len="32", solver="analytic")
    ep = costmodel.serve("mixtral-8x7b", "h100-sxm", options=Options.make(tp=8), ep=8, **kw)["serving"]
    assert ep["layout"] == {"tp": 8, "ep": 8, "pp": 1, "replicas": 1, "attention_dp": 1} and ep["gpus"] == 8
    dp = costmodel.serve("mixtral-8x7b", "h100-sxm", options=Options.make(tp=4), ep=8, attention_dp=2, **kw)
    s = dp["serving"]
    assert s["layout"]["attention_dp"] == 2 and s["gpus"] == 8 and s["gpus_per_replica"] == 8
    # each rank holds the KV of its own sequences: its tp 4 group's memory, the experts 1/8 each
    assert s["memory"]["kv_bytes_per_token"] == 2 * ep["memory"]["kv_bytes_per_token"]
    thr = s["throughput"]
    assert thr["output_tokens_per_s_per_gpu"] == pytest.approx(thr["output_tokens_per_s"] / 8)
    with pytest.raises(costmodel.CostModelError, match="routes no experts"):
        costmodel.serve("llama3-8b", "h100-sxm", options=Options.make(tp=2), ep=2, **kw)


def test_the_cli_takes_ep_and_attention_dp(capsys):
    from costmodel.cli import main

    args = ["serve", "mixtral-8x7b", "--hardware", "h100-sxm", "--tp", "4", "--rate", "2", "--requests", "40"]
    assert main([*args, "--ep", "8", "--attention-dp", "2", "--input-len", "256", "--output-len", "16"]) == 0
    assert "tp 4, ep 8, attention-dp 2" in capsys.readouterr().out
    assert main([*args, "--ep", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ep 1 or --ep 4" in err[0]
