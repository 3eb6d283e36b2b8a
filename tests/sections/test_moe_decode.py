"""Issue 30, item 3: a mixture of experts' decode step reads the experts its B tokens touch, not all of them.

``roofline qwen3-30b-a3b --hardware h100-sxm --decode --context 4096 --flash`` read 60.44 GB per step at B = 1
(every one of 128 experts) and gave 55 tokens/s; a token touches 8. The expected distinct experts of B tokens,
E·(1 − (1 − k/E)^B), is derived once (``costmodel.graph.composite.experts_touched``) and used by the decode
roofline and the serving step alike.

Qwen3-30B-A3B (L = 48, d = 2048, d_expert = 768, E = 128, k = 8, bf16): one expert matrix is 2048 · 768 · 2 B =
3,145,728 B; gate, up and down over 128 experts and 48 layers, 3 · 48 · 128 · 3,145,728 = 57,982,058,496 B of
expert weights; every weight, 60,441,493,504 B (the old reading), so 2,459,435,008 B are not experts'.
"""

import contextlib
import io
import json

import pytest
import sympy

import costmodel
from costmodel.cli import main
from costmodel.devices.table import device
from costmodel.graph.composite import experts_touched
from costmodel.graph.decode import prefill_graph
from costmodel.graph.passes import attention_pass
from costmodel.sections.decode import decode_cost, summary
from costmodel.symbols import B, C

EXPERT_MATRIX = 2048 * 768 * 2  # 3,145,728 B
EXPERTS = 3 * 48 * 128 * EXPERT_MATRIX  # 57,982,058,496 B
ALL = 60_441_493_504
OTHER = ALL - EXPERTS  # 2,459,435,008 B


def roofline_json(*extra: str) -> dict:
    out = io.StringIO()
    argv = ["roofline", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--decode", "--context", "4096", "--flash"]
    with contextlib.redirect_stdout(out):
        assert main([*argv, *extra, "--json"]) == 0
    return json.loads(out.getvalue())["decode"]


def test_experts_touched_by_hand():
    assert experts_touched(128, 8, 1) == 8  # 128 · (1 − 120/128)
    assert experts_touched(sympy.Integer(128), 8, 3) == sympy.Rational(721, 32)  # 128 · (1 − 3375/4096)
    assert experts_touched(8, 2, 2) == 3.5  # Mixtral, 2 tokens: 8 · (1 − (3/4)²) = 8 · 7/16
    assert experts_touched(128, 8, 10_000) == pytest.approx(128)  # a training step's tokens touch every expert


def test_roofline_decode_reads_the_touched_experts():
    d = roofline_json()
    # B = 1: 8 of the 128 experts, 2,459,435,008 + 57,982,058,496 · 8/128 = 6,083,313,664 B (was 60.44 GB)
    assert d["weights_bytes"] == OTHER + EXPERTS * 8 // 128 == 6_083_313_664
    assert d["experts_touched"] == 8 and d["experts"] == 128 and d["top_k"] == 8
    assert d["tokens_per_s"] > 9 * 55  # the step reads ~6.5 GB, not ~61 GB: about 515 tokens/s on 3.35 TB/s
    # B = 3: 721/32 experts a layer, each matrix's share 721/32 · 3,145,728 = 721 · 98,304 = 70,877,184 B (whole)
    d3 = roofline_json("--batch", "3")
    assert d3["weights_bytes"] == OTHER + 3 * 48 * 721 * 98_304 == 12_665_749_504


def test_the_touched_experts_tend_to_all_of_them_and_agree_with_the_serving_step():
    m = costmodel.load("qwen3-30b-a3b")
    G = attention_pass(prefill_graph(m.graph), "flash")
    cost = decode_cost(G, m.values, expected_experts=True)
    every = decode_cost(G, m.values)
    at = {C: 4096}
    # B = 1024: (15/16)^1024 < 10^-28, so ceiling(128 · 3,145,728 · (1 − (15/16)^1024)) is every expert's bytes
    assert cost.bytes.xreplace({**at, B: 1024}) == every.bytes.xreplace({**at, B: 1024})
    assert cost.flops == every.flops  # the FLOPs are the routed tokens', whichever experts they meet
    from costmodel.memory.device import prepared
    from costmodel.options import Options
    from costmodel.serving.step import TOUCHED, step_model

    step = step_model(prepared(m.graph, Options(inference=True)), m.values, device("h100-sxm"))
    out = summary(G, {**m.values, B: 5, C: 4096}, device("h100-sxm"), batches=(1,))
    assert step.sizes([(1, 4096)] * 5)[TOUCHED] == pytest.approx(out["experts_touched"])  # one derivation


def test_a_routed_critical_batch_solves_the_intensity_with_the_touched_experts():
    m = costmodel.load("mixtral-8x7b")
    G = attention_pass(prefill_graph(m.graph), "flash")
    dev = device("h100-sxm")
    out = summary(G, {**m.values, B: 1, C: 64}, dev, batches=(1,))
    b = out["critical_batch"]
    cost = decode_cost(G, m.values, expected_experts=True)
    f, q = (float(e.xreplace({C: 64, B: sympy.Float(b, 30)})) for e in (cost.flops, cost.bytes))
    assert f / q == pytest.approx(out["ridge"], rel=1e-6)  # FLOPs / bytes reach the ridge at B*
    # every expert read, the closed form: 19,199,082,102,784 / (12,643,920,039 − 26,646,304 · 64) ≈ 1,755.2; at
    # that batch (3/4)^1755 ≈ 0, the two readings meet: Mixtral's B* touches all 8 experts, and bounds it
    closed = 19_199_082_102_784 / (12_643_920_039 - 26_646_304 * 64)
    assert b <= closed and b == pytest.approx(closed, rel=1e-9)
