"""``costmodel serve`` and ``costmodel.serve``: the JSON contract of issue 32, bad input, the KV pool against hand
arithmetic, replicas, cost, speculative decoding, and the two solvers against each other."""

from __future__ import annotations

import json
import math

import pytest

import costmodel
from costmodel.cli import main
from costmodel.devices.table import device
from costmodel.serving.memory import kv_pool
from costmodel.serving.profiles import profile
from costmodel.serving.spec import tokens_per_step

SMALL = {"requests": 120, "input_len": "512", "output_len": "64"}


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_issue_command_gives_every_key(capsys):
    code, out, err = _cli(
        capsys,
        *("serve", "llama3-70b", "--hardware", "h100-sxm", "--tp", "4", "--rate", "4"),
        *("--input-len", "2048", "--output-len", "256", "--requests", "200", "--slo", "ttft_p90=2s,tpot_p99=50ms"),
        *("--json", "--no-max-rate"),
    )
    assert code == 0 and err == ""
    s = json.loads(out)["serving"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "tpot_incl_first_s"):
        assert set(s[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < s[key]["p50"] <= s[key]["p90"] <= s[key]["p99"]
    for key in (
        "input_tokens_per_s",
        "output_tokens_per_s",
        "input_tokens_per_s_per_gpu",
        "output_tokens_per_s_per_gpu",
    ):
        assert s["throughput"][key] > 0
    # 4 GPUs: per GPU is a quarter
    assert s["throughput"]["output_tokens_per_s_per_gpu"] * 4 == pytest.approx(s["throughput"]["output_tokens_per_s"])
    assert set(s["goodput"]) == {"requests_per_s", "fraction"} and 0 <= s["goodput"]["fraction"] <= 1
    assert "max_rate_under_slo" in s
    assert s["cost_usd_per_million_output_tokens"] > s["cost_usd_per_million_input_tokens"] > 0
    assert s["step_breakdown"]["decode"]["binds"] in (
        "weights",
        "kv",
        "compute",
        "communication",
        "overhead",
        "activations",
    )
    assert s["step_breakdown"]["prefill"]["binds"] == "compute"
    assert s["calibrated_for"].startswith("uncalibrated")
    code, text, _ = _cli(capsys, "serve", "llama3-8b", "--hardware", "h100-sxm", "--rate", "2", "--requests", "50")
    assert code == 0 and "TTFT" in text and "p99" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (("--rate", "0"), "rate"),
        (("--rate", "-3"), "rate"),
        (("--slo", "ttft_p90=2"), "unit"),
        (("--engine", "vllm"), "did you mean"),
        (("--engine-set", "max_num_seqz=4"), "did you mean"),
        (("--engine-set", "max_num_seqs=0"), "max_num_seqs"),
        (("--pp", "2", "--formulas"), "--pp"),
        (("--pp", "2", "--disaggregate", "1:1"), "--pp"),
        (("--input-len", "normal:10"), "input"),
        (("--speculative", "4"), "k,alpha"),
        (("--speculative", "4,1.5"), "alpha"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = _cli(capsys, "serve", "llama3-8b", "--hardware", "h100-sxm", "--requests", "20", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err.lower()


def test_a_layout_that_does_not_fit_and_a_bad_trace(capsys, tmp_path):
    code, _, err = _cli(capsys, "serve", "llama3-70b", "--hardware", "h100-sxm", "--requests", "10")
    assert code == 2 and "does not fit" in err and err.count("\n") == 1
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "input_length": -4, "output_length": 5}\n'
    )
    code, _, err = _cli(capsys, "serve", "llama3-8b", "--hardware", "h100-sxm", "--trace", str(trace))
    assert code == 2 and "line 2" in err and err.count("\n") == 1


def test_kv_pool_of_llama3_8b_by_hand():
    # weights: 8,030,261,248 parameters × 2 bytes (bf16) = 16,060,522,496 B;
    # KV per token: 2 (K and V) × 32 layers × 8 kv heads × 128 head dim × 2 bytes = 131,072 B;
    # blocks = ⌊(0.9 × 80e9 − weights − activations − 1.5e9 reserve) / (16 × 131,072)⌋
    m = costmodel.load("llama3-8b")
    p = kv_pool(m.graph, m.values, device("h100-sxm"), profile("vllm-v1"))
    assert p.weights_bytes == 8_030_261_248 * 2
    assert p.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    free = 72_000_000_000 - 16_060_522_496 - p.activation_bytes - 1_500_000_000
    assert p.num_blocks == free // (16 * 131_072)
    assert 49 < p.tokens / 8192 < 52  # the issue: "an engine with chunked prefill at 0.9 utilisation holds about 51"
    # tp 2: half the weights and half the kv heads on each rank, so about twice the tokens
    p2 = kv_pool(m.graph, m.values, device("h100-sxm"), profile("vllm-v1"), tp=2)
    assert p2.kv_bytes_per_token == 131_072 // 2 and p2.tokens > 2 * p.tokens


def test_tensorrt_llms_kv_share_is_of_the_free_memory_by_hand():
    # TensorRT-LLM's free_gpu_memory_fraction 0.9 is of what the weights, activations and 1.5e9 reserve leave:
    # blocks = ⌊0.9 × (80e9 − weights − activations − 1.5e9) / (32 × 131,072)⌋ (llama3-8b in bf16, blocks of 32)
    m = costmodel.load("llama3-8b")
    p = kv_pool(m.graph, m.values, device("h100-sxm"), profile("trtllm"))
    assert profile("trtllm").memory_share_of == "free" and p.as_dict()["utilization_of"] == "free"
    rest = 16_060_522_496 + p.activation_bytes + 1_500_000_000
    assert p.num_blocks == (80_000_000_000 - rest) * 9 // 10 // (32 * 131_072)
    # the same numbers read as vLLM reads its share (of the whole device) hold fewer blocks
    whole = kv_pool(m.graph, m.values, device("h100-sxm"), profile("trtllm", {"memory_share_of": "device"}))
    assert whole.num_blocks == (72_000_000_000 - rest) // (32 * 131_072) < p.num_blocks


def test_pipeline_stages_split_weights_and_kv_and_send_hidden_states():
    from costmodel.serving.predictor import replica_step

    m = costmodel.load("llama3-8b")
    dev, prof = device("h100-sxm"), profile("vllm-v1")
    one = kv_pool(m.graph, m.values, dev, prof)
    two = kv_pool(m.graph, m.values, dev, prof, pp=2)
    # the busier (last) stage: 16 × 218,112,000 per layer + 128,256 × 4,096 unembedding + 4,096 final norm
    # = 4,015,132,672 parameters in bf16; one token's KV over 16 of the 32 layers: 2 × 16 × 8 × 128 × 2 bytes
    assert two.weights_bytes == 4_015_132_672 * 2 and two.kv_bytes_per_token == 65_536
    free = 72_000_000_000 - 4_015_132_672 * 2 - two.activation_bytes - 1_500_000_000
    assert two.num_blocks == free // (16 * 65_536) and two.tokens > 2 * one.tokens
    s = costmodel.serve("llama3-8b", "h100-sxm", options=costmodel.Options.make(pp=2), rate=2, **SMALL)["serving"]
    assert s["gpus"] == 2 and s["layout"]["pp"] == 2 and s["layout"]["replicas"] == 1
    assert s["memory"]["num_blocks"] == two.num_blocks
    assert s["limits"]["max_num_seqs"] <= two.num_blocks // 2 * 16  # each in-flight batch holds half the blocks
    # a step passes both stages: the tp group's step plus one send of 512 × 4,096 bf16 hidden states on NVLink
    step = replica_step(m, dev, costmodel.Options.make(hardware="h100-sxm"), prof)
    eff = dev.attained
    send = float(eff.scale_up.latency_s) + 512 * 4096 * 2 / float(dev.scale_up_bandwidth * eff.scale_up.efficiency)
    b = s["step_breakdown"]["prefill"]
    assert b["step_s"] == pytest.approx(step([(512, 0)]) + send, rel=1e-9)
    # unsaturated, every request is served: the tokens out are the rate's, as with one stage
    assert s["throughput"]["requests_per_s"] == pytest.approx(2, rel=0.25)
    assert s["analytic"]["tpot_s"]["mean"] == pytest.approx(s["tpot_s"]["mean"], rel=0.15)


def test_replicas_share_the_load():
    one = costmodel.serve("llama3-8b", "h100-sxm", rate=2, **SMALL)["serving"]
    two = costmodel.serve("llama3-8b", "h100-sxm", rate=4, replicas=2, **SMALL)["serving"]
    # each of two replicas sees the same stream as one replica at half the rate: same latencies, twice the tokens
    assert two["ttft_s"] == one["ttft_s"] and two["e2e_s"] == one["e2e_s"]
    assert two["throughput"]["output_tokens_per_s"] == pytest.approx(2 * one["throughput"]["output_tokens_per_s"])
    assert two["gpus"] == 2


def test_cost_splits_the_device_hours_exactly():
    s = costmodel.serve(
        "llama3-8b", "h100-sxm", options=costmodel.Options.make(price_per_hour=2, hardware="h100-sxm"), rate=3, **SMALL
    )["serving"]
    thr = s["throughput"]
    spent = (
        s["cost_usd_per_million_input_tokens"] * thr["input_tokens_per_s"]
        + s["cost_usd_per_million_output_tokens"] * thr["output_tokens_per_s"]
    ) / 1e6
    assert spent == pytest.approx(2 / 3600, rel=1e-12)  # $2 per device-hour, one device, per second


def test_speculative_decoding_per_real_token():
    assert tokens_per_step(4, 0.0) == 1 and tokens_per_step(3, 0.5) == pytest.approx(1.875)  # 1 + .5 + .25 + .125
    base = costmodel.serve("llama3-8b", "h100-sxm", concurrency=4, **SMALL)["serving"]
    good = costmodel.serve("llama3-8b", "h100-sxm", concurrency=4, speculative=(4, 0.8), **SMALL)["serving"]
    none = costmodel.serve("llama3-8b", "h100-sxm", concurrency=4, speculative=(4, 0.0), **SMALL)["serving"]
    assert good["tpot_s"]["mean"] < base["tpot_s"]["mean"] < none["tpot_s"]["mean"]
    assert good["speculative"]["tokens_per_step"] == pytest.approx(tokens_per_step(4, 0.8))


@pytest.mark.parametrize("load", [{"concurrency": 16}, {"rate": 3.0}])
def test_simulation_and_analytic_agree_on_the_means(load):
    s = costmodel.serve("llama3-8b", "h100-sxm", requests=400, input_len="1024", output_len="128", seed=1, **load)[
        "serving"
    ]
    a = s["analytic"]
    assert not s["saturated"] and not a["saturated"]
    assert a["tpot_s"]["mean"] == pytest.approx(s["tpot_s"]["mean"], rel=0.12)
    assert a["e2e_s"]["mean"] == pytest.approx(s["e2e_s"]["mean"], rel=0.12)
    x, y = a["throughput"]["output_tokens_per_s"], s["throughput"]["output_tokens_per_s"]
    assert x == pytest.approx(y, rel=0.12)


def test_rate_inf_is_the_offline_maximum():
    s = costmodel.serve("llama3-8b", "h100-sxm", rate=math.inf, **SMALL)["serving"]
    slow = costmodel.serve("llama3-8b", "h100-sxm", rate=1, **SMALL)["serving"]
    assert s["throughput"]["output_tokens_per_s"] > 3 * slow["throughput"]["output_tokens_per_s"]
    assert s["load"].startswith("every request at once")


def test_served_renders_in_a_notebook():
    r = costmodel.serve("llama3-8b", "h100-sxm", rate=1, requests=30, input_len="256", output_len="16")
    assert "TTFT" in r._repr_html_() and "TTFT" in r.to_text()


def test_fit_inference_counts_what_the_engine_holds(capsys):
    # issue 32 item 3: 25,622 blocks of 16 tokens (test_kv_pool_of_llama3_8b_by_hand) / 512 blocks a sequence
    # of 8192 tokens = 50 sequences; the earlier reading prefills all 35 prompts at once
    engine = costmodel.fit("llama3-8b", hardware="h100-sxm", inference=True, context=8192)
    assert engine["largest"] == 25_622 // (8192 // 16) == 50
    old = costmodel.fit("llama3-8b", hardware="h100-sxm", inference=True, context=8192, inference_memory="prefill")
    assert old["largest"] == 35
    code, out, _ = _cli(capsys, "fit", "llama3-8b", "--hardware", "h100-sxm", "--inference", "--context", "8192")
    assert code == 0 and "engine: vllm-v1" in out and ": 50" in out
    assert costmodel.fit("llama3-70b", hardware="h100-sxm", inference=True, context=8192)["fits"] is False
