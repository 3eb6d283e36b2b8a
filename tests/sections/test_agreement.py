"""Every door gives the same numbers: ``estimate`` = ``sweep`` at that point = ``derive``'s printed formulas
substituted = the JSON, Markdown and LaTeX reports — every key, for random presets, option combinations
(precision, optimizer incl. Adafactor, recompute, FlashAttention, ZeRO/dp/tp/pp/sp/ep, inference, time) and
sizes.

The formulas are read back from ``costmodel derive --format json`` as text (sympy's parser on *our* output,
the user's side of the contract), so a printing bug would show here; ``sweep`` evaluates the compiled
formulas; ``estimate`` the exact ones.
"""

from __future__ import annotations

import functools
import json
import os
from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from sympy.printing.pycode import PythonCodePrinter

import costmodel
from costmodel.cli import main
from costmodel.render import latex as tex
from costmodel.render.results import flatten

#: (preset, options): every option value the issue names appears at least once. Without a rate the time keys are
#: on the roofline basis here: the calibrated step's formulas in the model's symbols are too large to derive and
#: sweep in a test (the planner compiles them with the sizes substituted; tests/verbs/test_plan.py).
COMBOS = [
    ("gpt2-small", {}),
    ("gpt2-small", {"recompute": "full", "flash": True, "dropout_p": True}),
    ("gpt2-small", {"precision": "fp32", "optimizer": "adafactor", "dp": 4, "zero": 2}),
    ("gpt2-medium", {"precision": "bf16-pure", "optimizer": "adam-8bit", "recompute": "selective"}),
    (
        "llama2-7b",
        {
            "tp": 2,
            "pp": 2,
            "dp": 2,
            "megatron_sp": True,
            "micro_batch": 1,
            "hardware": "h100-sxm",
            "time_model": "roofline",
        },
    ),
    ("llama3-8b", {"inference": True, "context": 4096, "weights_dtype": "int4", "hardware": "h100-sxm"}),
    ("mixtral-8x7b", {"ep": 2, "dp": 2, "zero": 1, "precision": "fp8-mixed"}),
    ("mistral-7b-swa", {"sp": 2, "flash": True, "hardware": "h100-sxm", "time_model": "roofline"}),
    ("qwen2-7b", {"hardware": "a100-80gb", "mfu": "0.4", "tokens": 10**12, "causal": "half"}),
    (
        "gpt3-xl",
        {
            "hardware": "h100-sxm",
            "dp": 8,
            "zero": 3,
            "optimizer": "sgd-momentum",
            "tokens": 3 * 10**11,
            "time_model": "roofline",
        },
    ),
    ("deepseek-v3", {"recompute": "full", "precision": "fp8-bf16-states"}),
    (
        "gpt2-small",
        {
            "attention": "eager",
            "precision": "bf16-autocast",
            "hardware": "h100-sxm",
            "time_model": "roofline",
            "tokens": 10**9,
            "price_per_hour": "list",
        },
    ),
]
BUILDER = {"dropout_p"}  # builder options among the keys above (settings of the model, not Options)


def _split(opts: dict) -> tuple[dict, dict]:
    return {k: v for k, v in opts.items() if k in BUILDER}, {k: v for k, v in opts.items() if k not in BUILDER}


def _numeric(flat: dict) -> dict:
    return {k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


#: The functions a formula may use, read as plain (undefined) functions and evaluated by the test's own code.
FUNCTIONS = {name: sympy.Function(name) for name in ("maximum", "roundup", "choose")}


@functools.cache
def _derived(i: int) -> dict:
    """The formulas of combo ``i`` read back from ``costmodel derive --format json`` (once per combo)."""
    preset, opts = COMBOS[i]
    settings_, options = _split(opts)
    r = costmodel.derive(preset, settings=settings_, **options)
    data = json.loads(r.to_json())
    local = {name: sympy.Symbol(name, positive=True, integer=True) for name in data["symbols"]}
    local.update(FUNCTIONS)
    exprs = {k: sympy.parse_expr(str(v), local_dict=local) for k, v in data["expressions"].items()}
    # evaluated by sympy's own lambdify with exact Python numbers (mpmath-free: fractions), independent of
    # costmodel's code generator
    symbols = sorted({s for e in exprs.values() for s in e.free_symbols}, key=str)
    exact = {
        "maximum": max,
        "roundup": lambda x: -(-x // 1),
        "choose": lambda x, y, a, b: a if x >= y else b,
        "Min": min,
        "Max": max,
        "ceiling": lambda x: -(-x // 1),
        "floor": lambda x: x // 1,
    }
    fn = sympy.lambdify(
        symbols,
        list(exprs.values()),
        modules=[exact, {"Fraction": Fraction}],
        printer=_ExactPrinter({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True}),
    )
    return {"keys": list(exprs), "symbols": [str(s) for s in symbols], "fn": fn}


class _ExactPrinter(PythonCodePrinter):
    """Rationals as ``Fraction(p, q)`` so lambdify's code stays exact."""

    def _print_Rational(self, e):
        return f"Fraction({e.p}, {e.q})"

    def _print_Integer(self, e):
        return str(e.p)

    def _print_Pow(self, e, rational=False):
        if e.exp.is_Integer and e.exp < 0:  # 1/x with ints would be a float division
            return f"Fraction(1, ({self._print(e.base)})**{-int(e.exp)})"
        return super()._print_Pow(e, rational)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return float(a) == float(b)  # the same exact number, rounded once
    return a == b


def _values(i: int, k: int, t: int):
    preset, opts = COMBOS[i]
    _, options = _split(opts)
    step = options.get("dp", 1) * options.get("micro_batch", 1)
    batch = k * step
    seq = t * options.get("sp", 1)
    return batch, seq


#: Sizes tried per combination (each combination is derived once; ``AGREEMENT_EXAMPLES=200`` for a long run).
EXAMPLES = int(os.environ.get("AGREEMENT_EXAMPLES", 8))


@pytest.mark.parametrize("i", range(len(COMBOS)), ids=[f"{p}-{i}" for i, (p, _) in enumerate(COMBOS)])
@settings(max_examples=EXAMPLES, deadline=None)
@given(k=st.integers(1, 8), t=st.integers(1, 512))
def test_estimate_sweep_and_derive_agree_on_every_key(i, k, t):
    preset, opts = COMBOS[i]
    settings_, options = _split(opts)
    batch, seq = _values(i, k, t)
    r = costmodel.estimate(preset, settings=settings_, batch=batch, seq=seq, **options)
    numbers = _numeric(flatten(r))
    derived = _derived(i)
    keys = [key for key in numbers if key in derived["keys"]]
    assert len(keys) >= 25, sorted(numbers)
    # sweep at this one point, every key, exact
    s = costmodel.sweep(preset, {"B": [batch], "T": [seq]}, keys, settings=settings_, exact=True, **options)
    assert bool(s["valid"][0])
    for key in keys:
        assert _same(s[key][0], numbers[key]), (key, s[key][0], numbers[key])
    # derive's printed formulas, substituted
    at = {**{name: 1 for name in derived["symbols"]}, **r["config"]}  # C: only the what-ifs use it
    # every value a Fraction, so each division in the generated code stays exact
    got = dict(zip(derived["keys"], derived["fn"](*(Fraction(at[name]) for name in derived["symbols"]))))
    for key in keys:
        assert _same(got[key], numbers[key]), (key, got[key], numbers[key])


@pytest.mark.parametrize("i", range(len(COMBOS)), ids=[f"{p}-{i}" for i, (p, _) in enumerate(COMBOS)])
def test_the_json_markdown_and_latex_reports_show_the_estimate(i, tmp_path):
    preset, opts = COMBOS[i]
    settings_, options = _split(opts)
    batch, seq = _values(i, 2, 64)
    r = costmodel.estimate(preset, settings=settings_, batch=batch, seq=seq, **options)
    doc = costmodel.report(preset, settings=settings_, batch=batch, seq=seq, **options)
    assert json.loads(doc.to_json())["estimate"] == json.loads(r.to_json())
    latex, markdown = doc.to_latex(), doc.to_markdown()
    shown = _numeric(flatten({k: r[k] for k in ("params", "flops", "bytes", "memory_bytes") if k in r}))
    for key, v in shown.items():
        if isinstance(v, int):
            assert tex.number(v) in latex and f"${tex.number(v)}$" in markdown, key
    # the CLI's JSON is the same document
    argv = ["estimate", preset, "--batch", str(batch), "--seq", str(seq), "--json"]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif name == "mfu" or name not in ("tokens",):
            argv += [flag, str(value)]
        else:
            argv += [flag, str(value)]
    for name, value in settings_.items():
        argv += ["--set", f"{name}={str(value).lower()}"]
    out = tmp_path / "r.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    out.write_text(buf.getvalue())
    assert json.loads(out.read_text()) == json.loads(r.to_json())
