"""Shaped formulas equal the exact ones: every expression ``derive`` emits, for every built-in family, at random
positive-integer points in exact arithmetic (Integers and Rationals, never floats)."""

import random

import pytest
import sympy

import costmodel
from costmodel.families import families
from costmodel.formulas.quantities import maximum, roundup
from costmodel.formulas.shaped import Named, Peak, Scaled, Sum, integral, shape, shape_peak
from costmodel.memory.peak import maximal
from costmodel.render.paper import pieces
from costmodel.symbols import B, L, T, T_max, V, d


def _points(exprs, n=3, seed=0):
    """``n`` random configs of every symbol the expressions use, each a positive integer up to 97."""
    rng = random.Random(seed)
    used = sorted(set().union(*(sympy.sympify(e).free_symbols for e in exprs)), key=str)
    return [{s: sympy.Integer(rng.randint(1, 97)) for s in used} for _ in range(n)]


#: Options that make other kinds of expressions: a run's time on devices (choices, shares), ZeRO shards (ceilings of
#: fractions), a pipeline (a choice of the fuller stage)
OPTIONS = {
    "devices": ("gpt3-175b", {"tokens": 3 * 10**11, "hardware": "h100-sxm", "devices": 1024}),
    "zero": ("llama3-8b", {"zero": 1, "dp": 8, "recompute": "full", "optimizer": "adam-8bit"}),
    "pipeline": ("mixtral-8x7b", {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "batch": 8}),
}


@pytest.mark.parametrize("family", [*sorted(families()), *OPTIONS])
def test_every_shaped_expression_equals_the_exact_one(family):
    model, options = OPTIONS.get(family, (family, {}))
    r = costmodel.derive(model, **options)
    shaped = r.shaped()
    ops = r.ops_shaped()
    pairs = [(k, s, r["expressions"][k]) for k, s in shaped.items()]
    pairs += [
        (f"{n}.{what}", s, r["ops"][n][what]) for n, (f, b) in ops.items() for what, s in (("flops", f), ("bytes", b))
    ]
    points = _points([e for _, _, e in pairs])
    if r.at is not None:  # the config the terms were ordered by and the peak's point is named at
        points.append({s: sympy.Integer(v) for s, v in r.at[1].items()})
    for key, s, exact in pairs:
        got = s.value()
        for p in points:
            assert got.xreplace(p) == sympy.sympify(exact).xreplace(p), (family, key, p)
    if family not in OPTIONS:  # a peak is modelled without tp/pp
        assert isinstance(shaped["memory_bytes.peak"], Peak)


def test_ceilings_of_integers_are_dropped_and_others_kept():
    # 8·B·T is a whole number for whole B, T; B·T·d/3 need not be
    assert integral(roundup(8 * B * T) + roundup(B * T * d / 3)) == 8 * B * T + roundup(B * T * d / 3)


def test_training_flops_read_in_the_megatron_form():
    # Narayanan et al. 2021 eq. 3: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)), in our symbols (T = s, d = h)
    exact = 72 * B * L * T * d**2 + 12 * B * L * T**2 * d + 6 * B * T * V * d  # 72BLTd²·(1 + T/6d + V/12Ld)
    s = shape(exact, leading=True, at={B: 1, L: 96, T: 2048, V: 50257, d: 12288})
    assert isinstance(s, Scaled) and s.factor == 72 * B * L * T * d**2
    assert [t.value() for t in s.inner.parts] == [1, T / (6 * d), V / (12 * L * d)]


def test_gpt3_training_flops_lead_with_72BLTd2():
    r = costmodel.derive("gpt3-175b")
    s = r.shaped()["flops.matmul.training"]
    assert s.factor == 72 * B * L * T * d**2 and [t.value() for t in s.inner.parts] == [
        1,
        T / (6 * d),
        V / (12 * L * d),
    ]


def test_parameters_collect_by_layer_with_the_common_factor_out():
    # GPT-2's 12·L·d² + 13·L·d + (V + T_max + 2)·d: L·d·(12d + 13) first
    s = shape(costmodel.derive("gpt")["expressions"]["params.total"], counts=[L])
    assert isinstance(s, Sum) and s.parts[0].factor == L * d
    assert s.parts[0].value() == L * d * (12 * d + 13)


def test_a_peak_keeps_the_points_that_can_win_and_names_them():
    # max(3x, 2x, 3x) with x = B·T: 2x never wins; the two 3x points are one, named twice
    x = B * T
    labels = ["forward of a", "forward of b", "backward of a"]
    s = shape_peak(10 * d + maximum(3 * x, 2 * x, 3 * x), labels, maximal=maximal)
    assert isinstance(s, Peak)
    assert [names for names, _ in s.points] == [("forward of a", "backward of a")]
    assert s.value() == 10 * d + 3 * x
    assert s.winner({B: 2, T: 5}) == (0, ("forward of a", "backward of a"), 30)  # 3·2·5 = 30


@pytest.mark.parametrize("model", ["gpt3-175b", "llama3-8b"])
def test_the_named_peak_point_is_the_one_estimate_reports(model):
    r = costmodel.derive(model)
    e = costmodel.estimate(model)  # the peak's own walk, maximal points only, at B = 1 and the preset's T
    _, names, live = r.shaped()["memory_bytes.peak"].winner(r.at[1])
    states = int(r.shaped()["memory_bytes.peak"].states.value().xreplace(r.at[1]))
    assert e["memory"]["peak_at"] in names and e["memory_bytes"]["peak"] == live + states


def test_named_quantities_read_as_a_paper_writes_them():
    # mixed precision with AdamW: 2 bytes of weights, 2 of gradients, 12 of fp32 master, m and v per parameter
    r = costmodel.derive("gpt3-175b")
    shaped, names = r.shaped(), r.names()
    assert shaped["memory_bytes.optimizer"] == Scaled(12, Named("N", names["N"]))
    assert shaped["memory_bytes.params"] == Scaled(2, Named("N", names["N"]))
    assert shaped["flops.six_nd"] == Scaled(6, Named("N_{ne} D", names["N_{ne}"] * names["D"]))
    assert names["N_{layer}"] == 12 * d**2 + 13 * d  # GPT-2/3 with biases: 12d² weights + 13d biases and norms
    assert names["b_{kv}"] == 4 * L * d  # K and V, d each per layer, 2 bytes (bf16)


def test_the_part_a_peaks_points_share_is_the_layers_kept_activations():
    # the walk's points in the last layer's backward all hold what L layers saved: L × the per-layer activations
    # (GPT-3 without FlashAttention: 2·B·T²·h softmax bytes + 32·B·T·d + 16·B·T per layer)
    r = costmodel.derive("gpt3-175b")
    k = r.shaped()["memory_bytes.peak"].common
    assert k.name == "K" and sympy.expand(k.expr - L * r["expressions"]["memory_bytes.activations_per_layer"]) == 0


def test_a_named_quantity_is_written_with_the_names_defined_before_it():
    # GPT-2 small: N = L·N_layer + N_embed + 2d (the final norm), N_embed = V·d + T_max·d (wte and wpe);
    # 12·(12·768² + 13·768) + (50257 + 1024)·768 + 2·768 = 85,054,464 + 39,383,808 + 1,536 = 124,439,808,
    # the parameter count of Hugging Face's gpt2 (biases included)
    r = costmodel.derive("gpt2-small")
    names, defs = r.names(), r.definitions()
    n = defs["N"]
    assert " ".join(pieces(n)) == "L N_{layer} + N_{embed} + 2 d"
    assert Named("N_{embed}", names["N_{embed}"]) in n.parts
    assert sympy.expand(n.value() - names["N"]) == 0 and sympy.expand(names["N_{embed}"] - (V + T_max) * d) == 0
    at = {s: sympy.Integer(v) for s, v in r.at[1].items()}
    assert n.value().xreplace(at) == 124_439_808
