"""Invariants over random valid configs (hypothesis), each named in its test id."""

from __future__ import annotations

import sympy
from hypothesis import given
from hypothesis import strategies as st

from costmodel import evaluate, totals
from costmodel.analysis import op_nodes
from costmodel.models import load
from costmodel.ops import op_cost
from costmodel.report import estimate
from costmodel.symbols import B, L, T, T_max, V, d, h


@st.composite
def gpt_configs(draw):
    heads = draw(st.integers(1, 16))
    return {
        "L": draw(st.integers(1, 48)), "h": heads, "d": heads * draw(st.integers(1, 128)),
        "V": draw(st.integers(2, 60000)), "T_max": draw(st.integers(1, 4096)),
        "B": draw(st.integers(1, 64)), "T": draw(st.integers(1, 4096)),
        "tied": draw(st.booleans()), "bias": draw(st.booleans()), "dropout_p": draw(st.booleans()),
    }


def run(cfg: dict, **changes: int) -> dict:
    cfg = {**cfg, **changes}
    settings = {k: v for k, v in cfg.items() if k not in ("B", "T")}
    return estimate("gpt", batch=cfg["B"], seq=cfg["T"], settings=settings)


@given(gpt_configs())
def test_symbolic_then_substitute_equals_substitute_then_count(cfg):
    opts = {k: cfg[k] for k in ("tied", "bias", "dropout_p")}
    g = load("gpt", opts).graph
    values = {B: cfg["B"], T: cfg["T"], L: cfg["L"], d: cfg["d"], h: cfg["h"], V: cfg["V"], T_max: cfg["T_max"]}
    t = totals(g)
    # substitute first: every op gets numbers for its axes, then its rule counts with numbers
    flops = matmul = params = sympy.Integer(0)
    for _, data in op_nodes(g):
        c = op_cost(data["op"].subs(values))
        n = data["count"].subs(values)
        flops += (c.forward.flops + c.backward.flops) * n
        matmul += c.forward.matmul_flops * n
        params += c.params * n
    assert flops == evaluate(t.training.flops, values)
    assert matmul == evaluate(t.forward.matmul_flops, values)
    assert params == evaluate(t.params, values)


@given(gpt_configs(), st.integers(2, 8))
def test_flops_linear_in_batch(cfg, k):
    one, many = run(cfg), run(cfg, B=k * cfg["B"])
    for key in ("forward", "backward", "training"):
        assert many["flops"][key] == k * one["flops"][key]
        assert many["flops"]["matmul"][key] == k * one["flops"]["matmul"][key]


@given(gpt_configs())
def test_flops_and_params_monotone_in_layers_width_and_sequence(cfg):
    base = run(cfg)
    for bigger in ({"L": cfg["L"] + 1}, {"d": cfg["d"] + cfg["h"]}, {"T": cfg["T"] + 1}):
        r = run(cfg, **bigger)
        assert r["flops"]["training"] > base["flops"]["training"]
        assert r["memory_bytes"]["total"] > base["memory_bytes"]["total"]


@given(gpt_configs())
def test_backward_is_twice_forward_for_matmuls(cfg):
    r = run(cfg)
    assert r["flops"]["matmul"]["backward"] == 2 * r["flops"]["matmul"]["forward"]
    assert r["flops"]["matmul"]["training"] == 3 * r["flops"]["matmul"]["forward"]


@given(gpt_configs())
def test_training_is_forward_plus_backward_and_params_split(cfg):
    r = run(cfg)
    assert r["flops"]["training"] == r["flops"]["forward"] + r["flops"]["backward"]
    p = r["params"]
    assert p["total"] == p["embedding"] + p["non_embedding"]
    assert r["flops"]["six_nd"] == 6 * p["non_embedding"] * cfg["B"] * cfg["T"]
