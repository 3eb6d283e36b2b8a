"""The property suite: every invariant in one place, named by its test (hypothesis over random valid configs, or exact symbolic identities that hold for all sizes at once)."""

from __future__ import annotations

import sympy
from hypothesis import given
from hypothesis import strategies as st

from costmodel.families import load
from costmodel.graph.analysis import op_nodes
from costmodel.graph.registry import op_cost
from costmodel.kit import evaluate, totals
from costmodel.memory import activations as memory
from costmodel.memory import parallel
from costmodel.memory import states as training
from costmodel.symbols import B, L, T, T_max, V, d, h
from costmodel.verbs.estimate import estimate


@st.composite
def gpt_configs(draw):
    heads = draw(st.integers(1, 16))
    seq = draw(st.integers(1, 4095))
    return {
        "L": draw(st.integers(1, 48)),
        "h": heads,
        "d": heads * draw(st.integers(1, 128)),
        "V": draw(st.integers(2, 60000)),
        "B": draw(st.integers(1, 64)),
        "T": seq,
        # learned positions: T ≤ T_max (and T + 1 too, for the monotonicity test)
        "T_max": draw(st.integers(seq + 1, 4096)),
        "tied": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "dropout_p": draw(st.booleans()),
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


# -- architecture invariants: exact symbolic identities (hold for every size at once) --------------


def _attention_graph(block, **sizes):
    from costmodel.kit import GraphBuilder

    b = GraphBuilder("attention", b=B, t=T, s=T, d=d, **sizes)
    block(b, b.input("x", "b t d", dtype="bf16"))
    return b.graph


def test_gqa_with_as_many_kv_heads_as_heads_equals_mha():
    from costmodel.symbols import n_kv
    from costmodel_graphs.blocks import causal_self_attention, grouped_query_attention

    gqa = totals(_attention_graph(lambda b, x: grouped_query_attention(b, x, rope=False), g=n_kv, m=h / n_kv, k=d / h))
    mha = totals(_attention_graph(lambda b, x: causal_self_attention(b, x, bias=False, dropout_p=False), h=h, k=d / h))
    same = lambda e: sympy.expand(e.subs(n_kv, h))  # noqa: E731
    assert gqa.map(same) == mha.map(sympy.expand)
    assert gqa.forward.matmul_flops != mha.forward.matmul_flops  # ...and only then


def test_moe_with_one_expert_routed_to_equals_the_dense_mlp_plus_its_router():
    from costmodel.graph.analysis import node_cost
    from costmodel_graphs.blocks import gated_mlp, mixture_of_experts

    f = sympy.Symbol("f", positive=True, integer=True)
    moe_g = _attention_graph(lambda b, x: mixture_of_experts(b, x), e=1, r=1, i=f)
    dense = totals(_attention_graph(lambda b, x: gated_mlp(b, x), f=f))
    moe = totals(moe_g)
    router = node_cost(moe_g, "router")
    assert sympy.expand(moe.params - router.params) == dense.params
    assert sympy.expand(moe.forward.matmul_flops - router.forward.matmul_flops) == dense.forward.matmul_flops
    assert sympy.expand(moe.backward.matmul_flops - router.backward.matmul_flops) == dense.backward.matmul_flops
    assert sympy.expand(moe.params_active - router.params) == dense.params


# -- memory invariants ----------------------------------------------------------------------------

GPT3 = load("gpt", {"dropout_p": True}).graph  # the GPT-3 recipe: bf16 activations, dropout on


@given(
    dp=st.integers(1, 512),
    policy=st.sampled_from(["fp32", "bf16-mixed", "fp8-mixed"]),
    opt=st.sampled_from(["adamw", "sgd-momentum", "lion", "adafactor"]),
)
def test_zero3_per_device_times_devices_is_unsharded(dp, policy, opt):
    states = training.model_state(GPT3, policy, opt)
    groups = {k: states[k] for k in ("params", "grads", "optimizer")}
    sharded = parallel.zero_shard(groups, parallel.Layout(dp=dp, zero=3))
    assert sympy.expand(sum(sharded.values()) * dp - sum(groups.values())) == 0


@given(
    b=st.integers(1, 64),
    t=st.integers(1, 4096),
    dm=st.integers(1, 64),
    heads=st.integers(1, 64),
    layers=st.integers(1, 96),
)
def test_recompute_orders_activation_memory(b, t, dm, heads, layers):
    values = {B: b, T: t, d: dm * heads, h: heads, L: layers, V: 50257, T_max: 4096}
    a = {r: evaluate(memory.activations(GPT3, r).bytes, values) for r in ("none", "selective", "full")}
    assert a["full"] <= a["selective"] <= a["none"]
