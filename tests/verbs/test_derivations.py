"""The lecture's headline results, derived by the engine from graphs — never typed in.

Golden numbers are written as arithmetic with their reason.
"""

from __future__ import annotations

import json

import sympy

from costmodel import derive
from costmodel.cli import main
from costmodel.families import load
from costmodel.graph.rules import ELEMENTWISE
from costmodel.kit import GraphBuilder, Totals, leading_term, limit, totals
from costmodel.memory.states import bytes_per_param, model_state_bytes
from costmodel.symbols import B, L, T, V, d, h
from costmodel.verbs.estimate import estimate


def gpt_totals() -> Totals:
    return totals(load("gpt").graph)


def test_training_flops_are_six_nd_plus_attention_plus_unembedding():
    t = gpt_totals()
    n = t.params_non_embedding  # 12·L·d² + 13·L·d + 2·d
    assert sympy.expand(n - (12 * L * d**2 + 13 * L * d + 2 * d)) == 0
    # matmuls: 6 per parameter per token, plus the T² attention scores (12·L·T²·d per sequence:
    # 2 contractions × 2·T²·d forward × 3 for training) and the tied unembedding (6·d·V per token)
    matmul = t.training.matmul_flops
    weights_only = 6 * B * T * (12 * L * d**2)
    assert sympy.expand(matmul - weights_only - 12 * B * L * T**2 * d - 6 * B * T * V * d) == 0


def test_training_over_six_nd_tends_to_one_as_d_grows():
    t = gpt_totals()
    ratio = t.training.flops / (6 * t.params_non_embedding * B * T)
    assert limit(ratio, d) == 1
    assert limit(t.training.matmul_flops / (6 * t.params_non_embedding * B * T), d) == 1


def test_backward_is_twice_forward_for_matmuls_symbolically():
    t = gpt_totals()
    assert sympy.expand(t.backward.matmul_flops - 2 * t.forward.matmul_flops) == 0


def test_derive_json_lets_a_script_check_the_six_nd_limit(capsys):
    assert main(["derive", "gpt", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    local = {name: sympy.Symbol(name, positive=True, integer=True) for name in out["symbols"]}
    parse = lambda s: sympy.parse_expr(str(s), local_dict=local)  # noqa: E731 - the user's side of the contract
    training = parse(out["expressions"]["flops.training"])
    n = parse(out["expressions"]["params.non_embedding"])
    assert sympy.limit(training / (6 * n * local["B"] * local["T"]), local["d"], sympy.oo) == 1
    # the strings read back exactly
    q = derive("gpt")["expressions"]
    plain = {k: v for k, v in q.items() if not v.atoms(sympy.Function)}  # sums of terms (not a peak's maximum)
    assert len(plain) > 20 and all(sympy.expand(parse(out["expressions"][k]) - v) == 0 for k, v in plain.items())


def test_gpt3_175b_compute():
    r = estimate("gpt3-175b", tokens=300_000_000_000)
    # N (non-embedding) = 12·L·d² + 13·L·d + 2·d with L = 96, d = 12288
    n = 12 * 96 * 12288**2 + 13 * 96 * 12288 + 2 * 12288
    assert r["params"]["non_embedding"] == n == 173_961_535_488
    assert r["flops"]["six_nd"] == 6 * n * 300_000_000_000  # ≈ 3.13e23: the lecture's "≈ 3.1e23"
    assert 3.1e23 <= r["flops"]["six_nd"] < 3.15e23
    total = r["flops"]["training_total"]
    # exact training FLOPs exceed 6ND by the attention and unembedding terms, a few percent at T = 2048
    assert r["flops"]["six_nd"] < total < 1.05 * r["flops"]["six_nd"]
    # one H100 at an achieved 400 TFLOP/s: 6ND / 4e14 ≈ 7.8e8 s ≈ 25 years (the lecture's numbers)
    seconds = sympy.Rational(r["flops"]["six_nd"], 400 * 10**12)
    assert 7.8e8 <= seconds < 7.9e8
    assert round(seconds / (365.25 * 86400)) == 25


def test_bytes_per_param_from_components():
    assert bytes_per_param("bf16-mixed", "adamw") == {"weights": 2, "grads": 2, "master": 4, "m": 4, "v": 4}
    assert sum(bytes_per_param("bf16-mixed", "adamw").values()) == 16  # 2 + 2 + 4 + 4 + 4
    # the lecture's table (2 + 2 + 4 + 4): bf16 weights and gradients with fp32 moments, a policy of its own name;
    # torch.optim's AdamW on bf16 parameters keeps its moments in bf16 (2 + 2 + 2 + 2; issue 28, item 3)
    assert sum(bytes_per_param("bf16-pure-fp32-moments", "adamw").values()) == 12
    assert bytes_per_param("bf16-pure", "adamw") == {"weights": 2, "grads": 2, "m": 2, "v": 2}
    assert sum(bytes_per_param("bf16-mixed-fp32-grads", "adamw").values()) == 18  # 2 + 4 + 4 + 4 + 4
    assert sum(bytes_per_param("fp32", "adamw").values()) == 16  # 4 + 4 + 4 + 4, no separate master


def test_seven_billion_params_need_112_gb_before_activations():
    n = 7 * 10**9
    states = model_state_bytes(sympy.Integer(n))
    assert sum(states.values()) == 112 * 10**9  # 7e9 × 16 bytes = 112 GB (decimal)


def test_matmul_intensity_is_order_d_for_large_batch_and_proportional_to_b_for_small():
    g = GraphBuilder("matmul", b=B, d=d, e=d)
    g.matmul("w", g.input("x", "b d", dtype="bf16"), "b d, d e -> b e")
    cost = totals(g.graph).forward
    # FLOPs 2·B·d², bytes (B·d + d² + B·d)·2 (read x and W, write y, bf16)
    assert cost.flops == 2 * B * d**2
    assert sympy.expand(cost.bytes - 2 * (2 * B * d + d**2)) == 0
    assert leading_term(cost.intensity, B) == d / 2  # O(d) as B → ∞
    assert leading_term(cost.intensity, B, 0) == B  # ∝ B as B → 0
    assert limit(cost.intensity, d) == B  # and bounded by B when the weight dominates


def test_elementwise_intensity_is_order_one():
    x = sympy.Symbol("n", positive=True, integer=True)
    for fn, spec in ELEMENTWISE.items():
        g = GraphBuilder("ew", n=x)
        a = g.input("a", "n", dtype="bf16")
        inputs = [a, g.input("b", "n", dtype="bf16")] if fn in ("add", "mul") else [a]
        g.elementwise("f", fn, inputs, ", ".join(["n"] * len(inputs)) + " -> n")
        intensity = totals(g.graph).forward.intensity
        assert intensity == sympy.Rational(spec.forward, 2 * (len(inputs) + 1))  # no dependence on n
        assert intensity <= 2  # far below any GPU's ridge point (~300 FLOP/byte)
    assert intensity.free_symbols == set()


def test_gpt_attention_terms_do_not_depend_on_head_count_for_matmuls():
    # scores and context: 2 × 2·B·h·T²·(d/h) = 4·B·T²·d per layer: h cancels out of the matmul FLOPs
    assert h not in gpt_totals().forward.matmul_flops.free_symbols
