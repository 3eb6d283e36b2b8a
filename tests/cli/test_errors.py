"""Bad input: one exception type, a message that says what, where, expected and received."""

from __future__ import annotations

import pytest
import sympy

from costmodel import CostModelError
from costmodel.expr import parse_expr, parse_setting
from costmodel.families import load
from costmodel.graph.pattern import parse
from costmodel.graph.registry import KINDS, rule
from costmodel.kit import GraphBuilder
from costmodel.symbols import B, T, d
from costmodel.verbs.estimate import estimate


@pytest.mark.parametrize(
    "pattern,message",
    [
        ("b t d, d f -> b t f -> x", "more than one '->'"),
        ("b (t d", "malformed"),
        ("b t t -> b t", "duplicate"),
        ("b ... d -> b d", "ellipsis"),
        ("", "expected an einops pattern"),
        (", d f -> b", "no axes"),
    ],
)
def test_malformed_patterns(pattern, message):
    with pytest.raises(CostModelError, match=message):
        parse(pattern)


def test_unsized_axis_names_the_axis_the_op_and_the_pattern():
    b = GraphBuilder("g", b=B, t=T, d=d)
    x = b.input("x", "b t d", dtype="bf16")
    with pytest.raises(CostModelError) as err:
        b.matmul("fc", x, "b t d, d f -> b t f")
    msg = str(err.value)
    assert "'f'" in msg and "'fc'" in msg and "b t d, d f -> b t f" in msg and "expected a size" in msg


def test_inconsistent_axis_sizes_between_producer_and_consumer():
    b = GraphBuilder("g", b=B, t=T, d=d, f=4 * d)
    u = b.matmul("up", b.input("x", "b t d", dtype="bf16"), "b t d, d f -> b t f")
    with pytest.raises(CostModelError, match="'down': input 0 from 'up' is sized inconsistently"):
        b.matmul("down", u, "b t d, d e -> b t e", e=d)  # u has f = 4d columns, not d


@pytest.mark.parametrize("size", [0, -3, sympy.Rational(1, 2), True, "d", 2.5])
def test_non_positive_or_non_integer_sizes(size):
    with pytest.raises(CostModelError, match="expected a positive"):
        GraphBuilder("g", d=size)


def test_heads_not_dividing_width():
    with pytest.raises(CostModelError, match=r"axis 'k' = d/h = 768/7 is not a positive whole number"):
        estimate("gpt2-small", settings={"h": 7})


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(CostModelError, match="unknown model 'gpt2-smal'.*did you mean 'gpt2-small'"):
        load("gpt2-smal")


def test_unknown_setting_lists_what_is_known():
    with pytest.raises(CostModelError, match="unknown setting 'dff'.*did you mean 'd_ff'"):
        load("gpt2-small", {"dff": 3})


def test_missing_symbol_values_are_an_error_not_a_symbolic_number():
    with pytest.raises(CostModelError, match="needs a value for L, d, h"):
        estimate("gpt")


def test_duplicate_rule_registration_raises():
    with pytest.raises(CostModelError, match="already registered"):
        rule("matmul")(lambda op, conventions: None)
    assert KINDS["matmul"].cost.__name__ == "_matmul"


def test_duplicate_node_name_raises():
    b = GraphBuilder("g", n=3)
    x = b.input("x", "n", dtype="bf16")
    b.elementwise("f", "gelu", x, "n")
    with pytest.raises(CostModelError, match="added twice"):
        b.elementwise("f", "gelu", x, "n")


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch /tmp/costmodel-pwned')",
        "d.__class__",
        "lambda: 1",
        "d; 1",
        "[d]",
        "d if 1 else 2",
        "exec('1')",
        "2**10000",
        "open('x')",
        "d @ d",
        "'d'",
        "1e999999",
    ],
)
def test_hostile_expressions_are_rejected_without_effect(text, tmp_path):
    with pytest.raises(CostModelError):
        parse_expr(text)
    import os

    assert not os.path.exists("/tmp/costmodel-pwned")


def test_restricted_parser_reads_arithmetic_exactly():
    assert parse_expr("8*d/3") == sympy.Rational(8, 3) * d
    assert parse_expr("2^10 + (3e2 - 1)/2") == 1024 + sympy.Rational(299, 2)
    assert parse_setting("d_ff=4*d") == ("d_ff", 4 * d)
    assert parse_setting("tied=false") == ("tied", False)
    with pytest.raises(CostModelError, match="unknown symbol 'dd'.*did you mean 'd'"):
        parse_expr("4*dd")
    with pytest.raises(CostModelError, match="division by zero"):
        parse_expr("d/0")


@pytest.mark.parametrize(
    "build,fragment",
    [
        (
            lambda b, x: b.op(
                "a", "attention", [x, x, x], "b d, b d, b d -> b d", attrs={"scores": "b", "epilogue": ["?"]}
            ),
            "attribute epilogue must be the element-wise ops",
        ),
        (lambda b, x: b.matmul("m", x, "b d, d e -> b e", bias="zz"), "invalid attributes {'bias': 'zz'}"),
        (lambda b, x: b.op("m", "matmul", [x], "b d, d e -> b e", dtype=5), "dtype: expected a name such as 'bf16'"),
        (lambda b, x: b.gather("g", x, "b d, e d -> b d", tied="nonexistent"), "no op named 'nonexistent'"),
        (lambda b, x: b.op("f", "elementwise", [x], "b d", attrs={"fn": ["gelu"]}), "unknown fn"),
    ],
)
def test_bad_attributes_at_the_builder_are_costmodel_errors(build, fragment):
    b = GraphBuilder("g", b=B, d=d, e=d)
    x = b.input("x", "b d", dtype="bf16")
    with pytest.raises(CostModelError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        build(b, x)
