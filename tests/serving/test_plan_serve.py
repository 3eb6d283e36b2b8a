"""``costmodel serve-plan`` and ``costmodel.serve_plan``: the planner's goodput is ``serve``'s at the chosen layout,
the per-GPU, per-user and cost arithmetic, the Pareto front's property, SLO monotonicity, exclusions counted by why,
disaggregated pools, chunking, and bad input (one line, exit 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import costmodel
from costmodel.cli import main
from costmodel.verbs.plan.serving import Job, front_of, instance, parse_devices

#: A small search of llama3-8b on H100s: 512-token prompts, 64 output tokens.
SMALL = {
    "devices": "1-4",
    "tp": (1, 2),
    "max_num_seqs": (8, 64),
    "max_num_batched_tokens": (4096,),
    "input_len": "512",
    "output_len": "64",
}
SLO = "ttft_mean=1s,tpot_mean=30ms"


@pytest.fixture(scope="module")
def small():
    return costmodel.serve_plan("llama3-8b", "h100-sxm", slo=SLO, **SMALL)


def test_the_best_layout_is_the_obvious_one_and_its_goodput_is_serves(small):
    rows = small["serving_plan"]["rows"]
    best = rows[0]
    # an 8B model fits one H100: tp 2 halves each GPU's weight reads but adds an all-reduce a layer, so one GPU a
    # replica serves more per GPU; and 64 sequences a step amortise the weights over 8x the tokens of 8
    assert (best["tp"], best["max_num_seqs"], best["replicas"], best["devices"]) == (1, 64, 1, 1)
    served = costmodel.serve(
        "llama3-8b",
        "h100-sxm",
        options=costmodel.Options.make(tp=best["tp"]),
        replicas=best["replicas"],
        engine_set=(("max_num_seqs", "64"), ("max_num_batched_tokens", "4096")),
        solver="analytic",
        slo=SLO,
        input_len="512",
        output_len="64",
        rate=1.0,
    )["serving"]
    assert served["max_rate_solver"] == "analytic"
    assert best["goodput_requests_per_s"] == served["max_rate_under_slo"]  # the same number, to the bit
    # every row is serve's at its layout: tp 2 (2 devices, 1 replica) too
    tp2 = next(r for r in rows if r["tp"] == 2 and r["max_num_seqs"] == 8)
    again = costmodel.serve(
        "llama3-8b",
        "h100-sxm",
        options=costmodel.Options.make(tp=2),
        engine_set=(("max_num_seqs", "8"), ("max_num_batched_tokens", "4096")),
        solver="analytic",
        slo=SLO,
        input_len="512",
        output_len="64",
    )["serving"]
    assert tp2["goodput_requests_per_s"] == again["max_rate_under_slo"]


def test_the_per_gpu_per_user_and_cost_arithmetic(small):
    for r in small["serving_plan"]["rows"]:
        # devices 1-4: the smallest deployment holds one replica of tp GPUs, the largest 4 // tp of them
        assert r["devices"] == r["tp"] and r["replicas"] == 1
        assert r["devices_max"] == 4 and r["replicas_max"] == 4 // r["tp"]
        assert r["goodput_requests_per_s_max"] == pytest.approx(r["goodput_requests_per_s"] * r["replicas_max"])
        # output tokens/s per GPU = requests/s × 64 output tokens / GPUs; input likewise with 512
        assert r["output_tokens_per_s_per_gpu"] == pytest.approx(r["goodput_requests_per_s"] * 64 / r["devices"])
        assert r["input_tokens_per_s_per_gpu"] == pytest.approx(r["goodput_requests_per_s"] * 512 / r["devices"])
        assert r["tokens_per_s_per_user"] == pytest.approx(1 / r["tpot_s"])
        assert r["tpot_s"] <= 0.030 and r["ttft_s"] <= 1.0 + 1e-9  # the SLOs the means meet
        # a device-hour's dollars over the output tokens a GPU makes in an hour, per million
        usd = r["usd_per_gpu_hour"]
        assert r["usd_per_million_output_tokens"] == pytest.approx(
            usd / (r["output_tokens_per_s_per_gpu"] * 3600) * 1e6
        )
    ranked = [r["output_tokens_per_s_per_gpu"] for r in small["serving_plan"]["rows"]]
    assert ranked == sorted(ranked, reverse=True)
    assert [r["rank"] for r in small["serving_plan"]["rows"]] == list(range(1, len(ranked) + 1))


def _dominates(a, b) -> bool:
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


points = st.lists(st.tuples(st.integers(0, 20).map(float), st.integers(0, 20).map(float)), min_size=1, max_size=30)


@settings(max_examples=40)
@given(points)
def test_the_front_is_undominated_and_dominates_the_rest(pts):
    gpu, user = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    front = front_of(gpu, user).tolist()
    assert len(set(front)) == len(front)
    for j in front:  # no point of the front is beaten on both
        assert not any(_dominates(pts[i], pts[j]) for i in range(len(pts)))
    for i in set(range(len(pts))) - set(front):  # every other point is matched or beaten by one on the front
        assert any(pts[j][0] >= pts[i][0] and pts[j][1] >= pts[i][1] for j in front)
    assert [user[j] for j in front] == sorted(user[j] for j in front)[::-1]  # fastest per user first


def test_the_plans_front_is_its_rows_front(small):
    s = small["serving_plan"]
    rows = s["rows"]
    front = s["pareto"]
    for f in front:
        assert not any(
            _dominates(
                (r["output_tokens_per_s_per_gpu"], r["tokens_per_s_per_user"]),
                (f["output_tokens_per_s_per_gpu"], f["tokens_per_s_per_user"]),
            )
            for r in rows
        )


def test_a_tighter_slo_never_raises_the_best_goodput():
    best = []
    for tpot in ("40ms", "20ms", "10ms", "8ms"):
        r = costmodel.serve_plan("llama3-8b", "h100-sxm", slo=f"ttft_mean=1s,tpot_mean={tpot}", **SMALL)
        rows = r["serving_plan"]["rows"]
        best.append(rows[0]["output_tokens_per_s_per_gpu"] if rows else 0.0)
    assert best == sorted(best, reverse=True) and best[0] > best[-1]


def test_layouts_that_cannot_serve_are_counted_by_why():
    r = costmodel.serve_plan(
        "llama3-8b",
        "h100-sxm",
        devices="2",
        tp=(1, 3, 4),  # 3 does not divide 32 heads; 4 GPUs do not fit in 2
        max_num_seqs=(8,),
        max_num_batched_tokens=(4096,),
        input_len="512",
        output_len="64",
        slo="tpot_mean=1ms",  # no rate decodes a token in 1 ms
    )["serving_plan"]
    assert r["excluded"] == {"heads": 1, "slo": 2}
    assert r["rows"] == [] and r["fitting"] == 0
    r = costmodel.serve_plan(
        "llama3-70b", "h100-sxm", devices="1-2", tp=(1, 4), max_num_seqs=(8,), max_num_batched_tokens=(4096,)
    )
    # 141 GB of weights on one 80 GB H100; tp 4 fits but no count of 1-2 devices holds it
    assert r["serving_plan"]["excluded"] == {"memory": 1, "devices": 1}
    long = costmodel.serve_plan(
        "llama3-8b",
        "h100-sxm",
        devices="1",
        tp=(1,),
        max_num_seqs=(8,),
        max_num_batched_tokens=(4096,),
        input_len="600000",
        output_len="64",
    )
    # about 410k tokens of KV on one H100 (docs/serving.md's kv-pool block): a 600k-token prompt does not fit
    assert long["serving_plan"]["excluded"] == {"request": 1}


def test_disaggregated_pools_serve_what_the_slower_pool_allows():
    kw = dict(SMALL, devices="2-4", tp=(1,), max_num_seqs=(64,))
    r = costmodel.serve_plan("llama3-8b", "h100-sxm", slo="ttft_mean=1s,tpot_mean=30ms", disaggregate=True, **kw)
    pools = [x for x in r["serving_plan"]["rows"] if x["disaggregated"]]
    assert pools and all(x["pp"] == 1 for x in pools)
    spec = costmodel.Serve(slo="ttft_mean=1s,tpot_mean=30ms", input_len="512", output_len="64")
    job = Job("llama3-8b", (), costmodel.Options.make(), spec, ())
    pre = instance(job, "prefill", "h100-sxm", 1, 1, 4096, 256)["rate"]
    dec = instance(job, "decode", "h100-sxm", 1, 1, 8192, 64)["rate"]
    for x in pools:
        p, d = x["prefill_instances"], x["decode_instances"]
        unit = p * x["prefill_tp"] + d * x["decode_tp"]
        assert math.gcd(p, d) == 1 and x["devices"] % unit == 0 and 2 <= x["devices"] <= 4
        k = x["devices"] // unit
        assert x["goodput_requests_per_s"] == pytest.approx(k * min(p * pre, d * dec))
        assert x["ttft_s"] <= 1 + 1e-9 and x["tpot_s"] <= 0.030
        assert x["e2e_s"] > x["ttft_s"] + x["kv_transfer_s"]
    with pytest.raises(costmodel.CostModelError, match="e2e SLO couples the pools"):
        costmodel.serve_plan("llama3-8b", "h100-sxm", slo="e2e_mean=5s", disaggregate=True, **kw)


def test_the_result_is_the_same_in_any_chunks(small):
    again = costmodel.serve_plan("llama3-8b", "h100-sxm", slo=SLO, chunk=1, **SMALL)
    strip = lambda r: [{k: v for k, v in x.items()} for x in r["serving_plan"]["rows"]]  # noqa: E731
    assert strip(again) == strip(small)


def test_devices_are_read_as_a_count_a_range_or_a_list():
    assert parse_devices("8-10") == (8, 9, 10) and parse_devices("16,8") == (8, 16) and parse_devices(4) == (4,)
    for bad in ("8-4", "0", "a", "8-", "-3", "", True):
        with pytest.raises(costmodel.CostModelError, match="--devices"):
            parse_devices(bad)


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


BASE = ("serve-plan", "llama3-8b", "--hardware", "h100-sxm", "--tp", "1", "--max-num-seqs", "8,64")
BASE += ("--max-num-batched-tokens", "4096", "--input-len", "512", "--output-len", "64")


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--devices", "8-4"), "--devices"),
        (("--devices", "4", "--ep", "2"), "routes no experts"),
        (("--devices", "4", "--slo", "ttft_p90=2"), "no unit"),
        (("--devices", "4", "--slo", "e2e_mean=2s", "--disaggregate"), "couples the pools"),
        (("--devices", "4", "--plot", "chart.txt"), "expected a name ending in"),
        (("--devices", "4", "--objective", "joy"), "invalid choice"),
        (("--devices", "4", "--engine", "vllm-v9"), "unknown serving engine"),
        (("--devices", "4", "--tp", "0"), "positive whole numbers"),
        (("--devices", "4", "--max-num-seqs", ",".join(map(str, range(1, 5001)))), "at most 4,000"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    code, out, err = _cli(capsys, *BASE, *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_json_keys_and_the_chart(capsys, tmp_path):
    chart = tmp_path / "front.png"
    code, out, err = _cli(capsys, *BASE, "--devices", "1-2", "--slo", SLO, "--json", "--plot", str(chart))
    assert code == 0 and "wrote the serving plan chart" in err
    assert chart.stat().st_size > 0
    s = json.loads(out)["serving_plan"]
    for key in ("rows", "pareto", "searched", "fitting", "excluded", "hardware", "devices", "slo", "objective"):
        assert key in s
    for key in (
        "tp",
        "pp",
        "ep",
        "replicas",
        "devices",
        "max_num_seqs",
        "max_num_batched_tokens",
        "disaggregated",
        "prefill_instances",
        "decode_instances",
        "goodput_requests_per_s",
        "output_tokens_per_s_per_gpu",
        "tokens_per_s_per_user",
        "usd_per_million_output_tokens",
        "ttft_s",
        "tpot_s",
        "rank",
    ):
        assert all(key in r for r in s["rows"] + s["pareto"]), key
    code, text, _ = _cli(capsys, *BASE, "--devices", "1-2", "--slo", SLO)
    assert code == 0 and "Pareto front" in text and "tok/s/GPU" in text
    code, table, _ = _cli(capsys, *BASE, "--devices", "1-2", "--csv")
    assert code == 0 and table.splitlines()[0].startswith("rank,hardware,devices")


def test_verify_runs_the_simulation_at_the_goodput_rate():
    r = costmodel.serve_plan(
        "llama3-8b", "h100-sxm", slo=SLO, top=1, verify=True, requests=150, **{**SMALL, "devices": "1"}
    )
    v = r["serving_plan"]["rows"][0]["verified"]
    assert v["solver"] == "simulate" and v["requests"] == 150
    assert set(v["tpot_s"]) == {"mean", "p50", "p90", "p99"} and isinstance(v["slo_met"], bool)


def test_several_devices_ranked_per_dollar():
    r = costmodel.serve_plan(
        "llama3-8b", "h100-sxm,h200", objective="usd", slo=SLO, **{**SMALL, "devices": "1", "tp": (1,)}
    )["serving_plan"]
    rows = r["rows"]
    assert {x["hardware"] for x in rows} == {"h100-sxm", "h200"} and r["objective"] == "output_tokens_per_usd"
    per_usd = [x["output_tokens_per_usd"] for x in rows]
    assert per_usd == sorted(per_usd, reverse=True)
    for x in rows:  # output tokens a GPU makes in an hour over what its hour costs
        assert x["output_tokens_per_usd"] == pytest.approx(
            x["output_tokens_per_s_per_gpu"] * 3600 / x["usd_per_gpu_hour"]
        )


def _served(model, options, **kw):
    return costmodel.serve(model, "h100-sxm", options=options, solver="analytic", slo=SLO, **kw)["serving"]


def test_pipeline_rows_are_serves_pp_and_count_every_stage():
    r = costmodel.serve_plan("llama3-8b", "h100-sxm", slo=SLO, **{**SMALL, "tp": (1,), "pp": (1, 2)})
    rows = r["serving_plan"]["rows"]
    assert r["serving_plan"]["pp"] == [1, 2]
    two = next(x for x in rows if x["pp"] == 2 and x["max_num_seqs"] == 64)
    # 1 tp × 2 stages = 2 GPUs a replica; 1-4 devices hold 1 to 2 of them
    assert (two["gpus_per_unit"], two["devices"], two["replicas"], two["replicas_max"]) == (2, 2, 1, 2)
    assert two["output_tokens_per_s_per_gpu"] == pytest.approx(two["goodput_requests_per_s"] * 64 / 2)
    lengths = dict(
        input_len="512", output_len="64", engine_set=(("max_num_seqs", "64"), ("max_num_batched_tokens", "4096"))
    )
    served = _served("llama3-8b", costmodel.Options.make(tp=1, pp=2), **lengths)
    assert two["goodput_requests_per_s"] == served["max_rate_under_slo"]  # the same number, to the bit


def test_moe_rows_search_ep_and_attention_dp_as_serve_runs_them():
    kw = dict(devices="8", max_num_seqs=(64,), max_num_batched_tokens=(4096,), input_len="512", output_len="64")
    r = costmodel.serve_plan("mixtral-8x7b", "h100-sxm", slo=SLO, tp=(4,), **kw)
    got = {(x["tp"], x["ep"], x["attention_dp"]) for x in r["serving_plan"]["rows"]}
    # tp 4: ep 1 or 4 at one rank; 2 ranks need ep 8 (4 × 2 within the 8-GPU node); 4 ranks would leave it
    assert got == {(4, 1, 1), (4, 4, 1), (4, 8, 2)}
    dp = next(x for x in r["serving_plan"]["rows"] if x["attention_dp"] == 2)
    assert dp["gpus_per_unit"] == 8 and dp["replicas"] == 1
    lengths = dict(
        input_len="512", output_len="64", engine_set=(("max_num_seqs", "64"), ("max_num_batched_tokens", "4096"))
    )
    served = _served("mixtral-8x7b", costmodel.Options.make(tp=4), ep=8, attention_dp=2, **lengths)
    assert dp["goodput_requests_per_s"] == served["max_rate_under_slo"]
    with pytest.raises(costmodel.CostModelError, match="no searched layout has ep 3"):
        costmodel.serve_plan("mixtral-8x7b", "h100-sxm", slo=SLO, tp=(4,), ep=(3,), **kw)


def test_settings_that_never_bind_are_one_row_each_checked_alone():
    # 512-token prompts: no chunk budget of 4096 or 8192 tokens cuts one, so the two budgets are one outcome, and
    # the list shows the deployment once with both budgets named
    kw = dict(devices="1", tp=(1,), max_num_seqs=(256,), input_len="512", output_len="64", slo=SLO)
    both = costmodel.serve_plan("llama3-8b", "h100-sxm", max_num_batched_tokens=(4096, 8192), **kw)
    (row,) = both["serving_plan"]["rows"]
    assert row["alike_engine_settings"] == [[256, 4096], [256, 8192]]
    for seqs, tokens in row["alike_engine_settings"]:  # each budget planned alone gives the row's outcome
        (alone,) = costmodel.serve_plan("llama3-8b", "h100-sxm", max_num_batched_tokens=(tokens,), **kw)[
            "serving_plan"
        ]["rows"]
        assert alone["alike_engine_settings"] == [[seqs, tokens]]
        for key in ("goodput_requests_per_s", "ttft_s", "tpot_s"):
            assert alone[key] == pytest.approx(row[key], rel=1e-4)
    assert "+: the same outcome at other max_num_seqs or max_num_batched_tokens" in both.to_text()
