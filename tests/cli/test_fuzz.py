"""Fuzzing the input layers: no exception escapes but CostModelError.

Each fuzzer runs ``FUZZ_EXAMPLES`` examples in CI (thousands in all); set
``HYPOTHESIS_PROFILE=fuzz`` (or ``COSTMODEL_FUZZ_EXAMPLES``) for longer runs.
"""

from __future__ import annotations

import json
import os
import string
import tempfile

import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.expr import parse_expr
from costmodel.graph.pattern import parse
from costmodel.kit import GraphBuilder
from costmodel.verbs.estimate import estimate

FUZZ_EXAMPLES = int(
    os.environ.get("COSTMODEL_FUZZ_EXAMPLES", 5000 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 1000)
)
fuzz = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
GPT2_KEYS = ["n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner", "tie_word_embeddings"]


@st.composite
def gpt2_configs(draw):
    cfg = {"model_type": draw(st.sampled_from(["gpt2", "gpt2", "gpt2", "llama", "", "GPT2"]))}
    for key in GPT2_KEYS:
        choice = draw(st.integers(0, 3))
        if choice == 0:
            continue  # missing
        cfg[key] = draw(st.integers(1, 64)) if choice < 3 else draw(json_values)
    if draw(st.booleans()):
        cfg[draw(st.text(max_size=5))] = draw(json_values)
    return cfg


@fuzz
@given(gpt2_configs())
def test_config_loader_raises_only_costmodel_errors(cfg):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        fh.write(json.dumps(cfg, allow_nan=True))
    try:
        r = estimate(fh.name, batch=1, seq=4)
        assert isinstance(r["flops"]["training"], int) and r["flops"]["training"] > 0
    except CostModelError as exc:
        assert "\n" not in str(exc)
    finally:
        os.unlink(fh.name)


@fuzz
@given(st.text(alphabet="bdtfhk ()->,.123_" + string.ascii_letters[:4], max_size=30))
def test_pattern_parser_raises_only_costmodel_errors(text):
    try:
        p = parse(text)
    except CostModelError:
        return
    sizes = {a: 2 for a in p.named_axes}
    try:
        b = GraphBuilder("fuzz", **sizes)
        x = b.input("x", " ".join(p.inputs[0]) or "a", dtype="bf16", a=1)
        b.contract("c", x, x, text) if len(p.inputs) == 2 else b.reshape("r", x, text)
    except CostModelError:
        pass


@fuzz
@given(st.text(alphabet="dLThV0123456789.eE+-*/^() _x", max_size=40))
def test_expression_parser_raises_only_costmodel_errors(text):
    try:
        assert isinstance(parse_expr(text), sympy.Expr)
    except CostModelError:
        pass


ARGS = [
    "estimate",
    "derive",
    "models",
    "roofline",
    "fit",
    "compare",
    "sweep",
    "hardware",
    "gpt2-small",
    "gpt",
    "gpt3-xl",
    "mixtral-8x7b",
    "deepseek-v3",
    "mistral-7b-swa",
    "llama3-8b",
    "--batch",
    "--seq",
    "--tokens",
    "--set",
    "--json",
    "--format",
    "latex",
    "json",
    "markdown",
    "--standalone",
    "--explain",
    "--leading",
    "--per-token",
    "--per-layer",
    "--keys",
    "flops.*",
    "--rename",
    "d=h,T=s",
    "--causal",
    "half",
    "--precision",
    "fp32",
    "--optimizer",
    "sgd",
    "--hardware",
    "h100-sxm",
    "--fuse",
    "--decode",
    "--context",
    "--flash",
    "--recompute",
    "full",
    "--inference",
    "--tp",
    "--pp",
    "--dp",
    "--zero",
    "--memory",
    "80GB",
    "--grid",
    "L=1,2",
    "--metric",
    "flops.training",
    "--mfu",
    "0.5",
    "--achieved-tflops",
    "0",
    "1",
    "-1",
    "2",
    "8",
    "3e11",
    "1e99",
    "x",
    "d=64",
    "L=2",
    "h=3",
    "d_ff=4*d",
    "tied=false",
    "dtype=true",
    "top_k=9",
    "=",
    "--",
]


@settings(max_examples=max(FUZZ_EXAMPLES // 5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(ARGS), max_size=6))
def test_cli_arguments_exit_0_or_2(argv):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 2)
    if code == 2:
        assert "Traceback" not in err.getvalue()
