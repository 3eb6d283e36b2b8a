"""Bounded fuzzing of hostile values (issue 17): the CLI's flags with hostile texts, and GraphBuilder with
hostile sizes. Every example ends quickly with a result or one CostModelError line; nothing else escapes.

The CI profile runs a few dozen examples of each (well under a minute); ``COSTMODEL_FUZZ_EXAMPLES`` raises it.
"""

from __future__ import annotations

import contextlib
import io
import os
import time

import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.kit import GraphBuilder, evaluate, totals
from costmodel.symbols import SYMBOLS

EXAMPLES = int(os.environ.get("COSTMODEL_FUZZ_EXAMPLES", 40))
bounded = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

HOSTILE = [
    "",
    " ",
    "\n",
    "x\ny",
    "0",
    "-1",
    "1e30",
    "1e31",
    "1e99",
    "(10**30)**11",
    "((9**64)**64)**64",
    "(d+h+V+T+T_max+L+B)**64",
    "(d+L)**7",
    "d**64",
    "8*d/3",
    "d/0",
    "true",
    "nan",
    "inf",
    "\uff17\uff16\uff18",
    "\u0668",
    "1_000",
    "0x10",
    "1" * 60,
    "((((((((d))))))))",
    "-(-(-d))",
    "d^-64",
    "2**64",
    "3e11",
    "8k",
]
FLAGS = [
    "--batch",
    "--seq",
    "--tokens",
    "--tp",
    "--dp",
    "--pp",
    "--micro-batch",
    "--context",
    "--devices",
    "--mfu",
    "--achieved-tflops",
    "--tokens-per-s",
]
SET_NAMES = ["d", "L", "V", "h", "T_max", "d_ff", "tied", "dtype", "x"]


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(["estimate", "derive", "fit", "roofline", "compare", "report"]))
    argv = [command, draw(st.sampled_from(["gpt2-small", "gpt", "llama3-8b"]))]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            argv += ["--set", f"{draw(st.sampled_from(SET_NAMES))}={draw(st.sampled_from(HOSTILE))}"]
        elif command in ("estimate", "report"):
            argv += [draw(st.sampled_from(FLAGS)), draw(st.sampled_from(HOSTILE))]
    if command == "fit":
        argv += ["--memory", draw(st.sampled_from(["80GB", "0GB", "1e40GB", "x"]))]
    if command == "roofline":
        argv += ["--hardware", "h100-sxm"]
    if command == "report":
        argv += ["--json", "-"]
    return argv


@bounded
@given(command_lines())
def test_hostile_flag_values_end_in_seconds_with_0_or_one_line(argv):
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert time.monotonic() - start < 30, argv  # a hang guard (bounded work), not a speed test
    assert code in (0, 2), (argv, err.getvalue())
    if code == 2:
        assert err.getvalue().startswith("costmodel: error: ") and err.getvalue().count("\n") == 1, err.getvalue()
    else:
        assert err.getvalue() == "", err.getvalue()


S = SYMBOLS
VALID = {"b": S["B"], "t": S["T"], "d": S["d"], "f": S["d_ff"], "h": S["h"], "k": 64}
HOSTILE_SIZES = st.sampled_from(
    [
        1,
        2,
        64,
        10**30,
        10**31,
        2**200,
        0,
        -3,
        True,
        "d",
        1.5,
        None,
        S["d"],
        S["d"] / 2,
        8 * S["d"] / 3,
        S["d"] * S["h"],
        (S["d"] + S["T"]) ** 3,
        (S["d"] + S["T"] + S["L"]) ** 7,
        S["d"] ** 64,
        sympy.Integer(9) ** 200,
        sympy.nan,
        sympy.oo,
        -S["d"],
        sympy.Min(S["T"], 4096),
    ]
)
PATTERNS = [
    "b t d, d f -> b t f",
    "b t d, d h k -> b h t k",
    "b t d, d d -> b t d",
    "b t d, d -> b t",
    "b t d, f -> b t f",
    "x y -> z",
    "b t d",
    "",
    "b t d, d f -> b t f f",
]
ELEMENTWISE = ["b t d -> b t d", "b t d -> b d t", "b t d -> b t", "b t f -> b t f", "q -> q"]


@bounded
@given(
    st.dictionaries(st.sampled_from(sorted(VALID)), HOSTILE_SIZES, max_size=2),
    st.lists(
        st.tuples(st.sampled_from(["matmul", "elementwise", "repeat"]), st.integers(0, 8), HOSTILE_SIZES),
        min_size=1,
        max_size=4,
    ),
)
def test_graph_builder_with_hostile_sizes_raises_only_costmodel_errors(hostile, ops):
    """Mostly valid sizes and ops, with a hostile size or count here and there: an error is one CostModelError
    line, and a graph that builds has totals that evaluate to numbers within seconds."""
    start = time.monotonic()
    try:
        b = GraphBuilder("fuzz", **{**VALID, **hostile})
        x = b.input("x", "b t d", dtype="bf16")
        for i, (kind, which, size) in enumerate(ops):
            if kind == "elementwise":
                x = b.elementwise(f"e{i}", "gelu", x, ELEMENTWISE[which % len(ELEMENTWISE)])
                continue
            pattern = PATTERNS[which % len(PATTERNS)]
            if kind == "repeat":
                with b.repeat(f"r{i}", size):
                    x = b.matmul(f"m{i}", x, pattern)
            else:
                x = b.matmul(f"m{i}", x, pattern)
        t = totals(b.graph)
        numbers = {S[n]: 3 for n in ("B", "T", "d", "d_ff", "h", "L")}
        assert evaluate(t.forward.flops, numbers) >= 0
    except CostModelError as exc:
        assert "\n" not in str(exc), str(exc)
    assert time.monotonic() - start < 20  # a hang guard (bounded work), not a speed test
