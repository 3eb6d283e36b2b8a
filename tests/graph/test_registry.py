"""The op registry holds every per-kind fact; passes find attention by data flow and say what they did."""

from __future__ import annotations

import pathlib
import re

import pytest
import sympy

from costmodel import CostModelError
from costmodel.graph.passes import attention_chains, flash_attention
from costmodel.graph.registry import KINDS, Kind, kind_of, rule
from costmodel.kit import GraphBuilder, Op, OpCost, op_cost, totals
from costmodel.symbols import B, T, d, h

ROOT = pathlib.Path(__file__).resolve().parents[2] / "costmodel"
#: Where a kind may be named: the registry and the rules themselves, and an implementation's own rules per kind
#: (what transformers' modules keep beyond the op rules: the implementation as data, issue 28).
RULE_MODULES = {"graph/registry.py", "graph/rules.py", "graph/composite.py", "memory/implementation.py"}
KIND_TEST = re.compile(r"\.kind\s*(==|!=|\bin\b|\bnot in\b)|\bkind\s*(==|!=)\s*[\"']")


def test_no_kind_tests_outside_the_registry():
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in RULE_MODULES:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if KIND_TEST.search(line.split("#")[0]):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "a fact about an op kind belongs to its Kind:\n" + "\n".join(found)


def test_every_kind_is_one_record_and_unknown_facts_are_refused():
    assert all(isinstance(k, Kind) and k.name == name for name, k in KINDS.items())
    assert {
        "matmul",
        "contraction",
        "elementwise",
        "softmax",
        "norm",
        "gather",
        "loss",
        "reshape",
        "attention",
        "routed_matmul",
        "fused",
    } <= set(KINDS)
    with pytest.raises(CostModelError, match="unknown fact 'pointwize'.*did you mean 'pointwise'"):
        rule("never_registered", pointwize=True)
    with pytest.raises(CostModelError, match="weight_use"):
        rule("never_registered", weight_use="dence")
    with pytest.raises(CostModelError, match="no op rule for kind 'matmull'.*did you mean 'matmul'"):
        kind_of("matmull")


def test_a_users_pointwise_kind_joins_an_attention_chain():
    """A kind registered outside the core with ``pointwise=True`` (a soft-cap) sits between scores and the
    softmax: attention is found by data flow, not by names, and FlashAttention fuses it."""
    if "test_capped" not in KINDS:
        from costmodel.graph.rules import elementwise_cost

        @rule("test_capped", pointwise=True)
        def _capped(op, counting):
            c = elementwise_cost(op, sympy.Integer(3))
            return OpCost(c, c)

    b = GraphBuilder("capped", b=B, t=T, s=T, h=h, k=d / h, d=d)
    x = b.input("x", "b t d", dtype="bf16")
    q = b.matmul("q", x, "b t d, d h k -> b h t k")
    k = b.matmul("k", x, "b t d, d h k -> b h t k")
    v = b.matmul("v", x, "b t d, d h k -> b h t k")
    s = b.contract("scores", q, k, "b h t k, b h s k -> b h t s")
    s = b.op("cap", "test_capped", [s], "b h t s")
    p = b.softmax("probs", s, "b h t s", axis="s")
    b.contract("context", p, v, "b h t s, b h s k -> b h t k")
    chains = list(attention_chains(b.graph))
    assert len(chains) == 1 and chains[0][1] == ["cap"]
    H = flash_attention(b.graph)
    assert H.graph["rewritten"]["flash_attention"] == ("context",)
    assert sympy.expand(totals(H).forward.flops - totals(b.graph).forward.flops) == 0


def test_flash_attention_on_attention_it_cannot_fuse_is_an_error():
    """A step with a second input between the scores and the softmax (an additive bias the pass does not
    fuse) would leave the T×T scores: an error naming where, never a silent "no T×T"."""
    b = GraphBuilder("biased", b=B, t=T, s=T, h=h, k=d / h, d=d)
    x = b.input("x", "b t d", dtype="bf16")
    q = b.matmul("q", x, "b t d, d h k -> b h t k")
    k = b.matmul("k", x, "b t d, d h k -> b h t k")
    v = b.matmul("v", x, "b t d, d h k -> b h t k")
    s = b.contract("scores", q, k, "b h t k, b h s k -> b h t s")
    s2 = b.contract("other", q, k, "b h t k, b h s k -> b h t s")
    s = b.elementwise("mix", "mul", [s, s2], "b h t s, b h t s -> b h t s")
    s = b.elementwise("scale", "scale", s, "b h t s")
    p = b.softmax("probs", s, "b h t s", axis="s")
    b.contract("context", p, v, "b h t s, b h s k -> b h t k")
    b.elementwise("reuse", "gelu", s2, "b h t s")  # the second scores are read twice: no chain
    with pytest.raises(CostModelError, match="cannot be fused"):
        flash_attention(b.graph)


def test_a_graph_without_attention_is_left_as_it_is():
    b = GraphBuilder("mlp", b=B, d=d, f=4 * d)
    b.matmul("up", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    H = flash_attention(b.graph)
    assert H.graph["rewritten"]["flash_attention"] == () and H.graph["passes"] == ("flash_attention",)


def test_repeated_literal_axes_are_distinct_axes():
    # "3 3 d, d f -> 3 3 f": nine rows of d, each times a d×f weight: 2·9·d·f FLOPs (not 2·3·d·f)
    op = Op(
        "matmul", "3 3 d, d f -> 3 3 f", (("3", sympy.Integer(3)), ("3#2", sympy.Integer(3)), ("d", d), ("f", 4 * d))
    )
    assert op_cost(op).forward.matmul_flops == 2 * 3 * 3 * d * 4 * d
    b = GraphBuilder("lit", d=d, f=4 * d)
    y = b.matmul("fc", b.input("x", "3 3 d", dtype="bf16"), "3 3 d, d f -> 3 3 f")
    assert y.axes == ("3", "3#2", "f")
    assert totals(b.graph).forward.matmul_flops == 18 * d * 4 * d
