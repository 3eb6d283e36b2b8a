"""costmodel.testing, tested by what it tests: every family passes its properties, the drawn sizes are valid,
and a deliberately wrong model fails each assertion with the smallest failing sizes and the differing term.

Hypothesis runs inside the kit with a fixed seed and few examples (5): each property is a handful of exact
evaluations, so a family takes about a second.
"""

from __future__ import annotations

import re

import pytest
import sympy
from hypothesis import given, settings

import costmodel
from costmodel.families import graph_symbols
from costmodel.graph.analysis import check_values
from costmodel.graph.registry import KINDS
from costmodel.kit import Cost, GraphBuilder, OpCost, elements_of, rule
from costmodel.kit import symbols as s
from costmodel.testing import assert_invariants, assert_matches_numeric, check, sizes
from costmodel.testing.results import Difference, Property
from costmodel.testing.strategies import BEYOND, DEFAULT_RANGE, RANGES

FAMILIES = sorted(costmodel.models()["families"])


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_matches_its_numeric_evaluation_and_keeps_the_invariants(family):
    assert_matches_numeric(family, examples=5)
    assert_invariants(family, examples=5)


@pytest.mark.parametrize("family", ["llama", "mixtral", "deepseek_v3", "vit", "jamba", "gpt"])
def test_drawn_sizes_satisfy_every_relation_of_the_graph(family):
    G = costmodel.load(family).graph
    symbols = {str(x): x for x in graph_symbols(G)}

    @settings(max_examples=15, database=None, deadline=None)
    @given(sizes(family))
    def each(values):
        assert set(values) == set(symbols)  # every free symbol gets a size, no other
        check_values(G, {symbols[k]: v for k, v in values.items()})  # raises on a broken relation
        for name, v in values.items():
            lo, hi = RANGES.get(name, DEFAULT_RANGE)
            assert lo <= v <= hi + BEYOND

    each()


def test_sizes_respect_divisibility_pins_and_ranges():
    @settings(max_examples=20, database=None, deadline=None)
    @given(sizes("llama", fixed={"h": 4}, ranges={"d": (8, 40)}))
    def each(v):
        assert v["h"] == 4 and v["d"] % 4 == 0 and 4 % v["n_kv"] == 0 and 8 <= v["d"] <= 40 + BEYOND

    each()


def test_a_pin_that_breaks_a_relation_is_bad_input():
    with pytest.raises(costmodel.CostModelError, match="break"):
        sizes("gpt", fixed={"d": 6, "h": 4})


# -- deliberately wrong models: each assertion fails with the shrunk sizes and the term --------------------

if "test_kit_size_one_free" not in KINDS:

    @rule("test_kit_size_one_free", pointwise=True)
    def _size_one_free(op, counting):
        # the planted bug: "a single head costs nothing", decided on the value of h, so only at numbers
        n = sympy.Integer(0) if op.size["h"] == 1 else elements_of(op, op.parsed.output)
        return OpCost(Cost(flops=n), Cost(flops=n))


def _graph(kind: str = "elementwise", weight: str = "h k d"):
    b = GraphBuilder("planted", b=s.B, t=s.T, h=s.h, k=s.d / s.h, d=s.d)
    x = b.input("x", "b t d", dtype="bf16")
    with b.repeat("layers", s.L):
        q = b.matmul("q", x, "b t d, d h k -> b h t k")
        q = b.op("act", "test_kit_size_one_free", [q], "b h t k") if kind == "planted" else q
        x = b.matmul("o", q, f"b h t k, {weight} -> b t d")
    return b.graph


def test_assert_matches_numeric_names_the_op_and_the_smallest_sizes():
    assert_matches_numeric(_graph(), examples=5)  # the same graph without the planted op passes
    with pytest.raises(AssertionError) as err:
        assert_matches_numeric(_graph("planted"), examples=10)
    text = str(err.value)
    # h = 1 is where the planted rule differs: hypothesis shrinks every size to its smallest, 1
    assert "FAIL at B=1, L=1, T=1, d=1, h=1" in text
    # at those sizes the op has B·h·T·k = 1 element: derived 1 FLOP per run, counted 0
    assert "flops.forward: costmodel" in text and "layers.act (1 vs 0)" in text


def test_assert_invariants_catches_a_weight_sized_by_the_batch():
    with pytest.raises(AssertionError) as err:
        assert_invariants(_graph(weight="b h k d"), examples=10)  # the output weight names the batch axis
    text = str(err.value)
    # every size shrunk to 1 (C, the context, is drawn too where a memory expression names it)
    assert re.search(r"params independent of B and T: FAIL at B=1, (C=1, )?L=1, T=1, d=1, h=1", text), text
    # the weight b·h·k·d = B·d: at B = 2 it has 2 elements where B = 1 gave 1 (q's d·d = 1 besides): 3 vs 2
    assert "params.total: costmodel 3, its value at B=1 2" in text


def test_a_report_is_exact_json_and_text():
    r = check("gpt", examples=2)
    assert r.passed and r.to_dict()["properties"][0]["name"] == "matches numeric evaluation (op by op)"
    assert all(isinstance(v, int) for p in r.to_dict()["properties"] for t in p["tried"] for v in t.values())
    p = Property("x", tried=[{"B": 1}], counterexample={"B": 1}, differences=[Difference("t", 10, 7, "torch")])
    assert (
        p.text()
        == "x: FAIL at B=1 (the smallest failing sizes found; 1 sizes tried)\n  t: costmodel 10, torch 7 (costmodel - torch = 3)"
    )


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_bad_examples_and_seeds_are_bad_input(bad):
    with pytest.raises(costmodel.CostModelError):
        check("gpt", examples=bad)
    if bad != 0:
        with pytest.raises(costmodel.CostModelError):
            check("gpt", examples=1, seed=bad)
