"""Generated source for thousands of formulas (the liveness points of unrolled layers): shared subtrees named by
hash-consing instead of sympy's ``cse``. Checked against sympy's own arithmetic (``xreplace`` with numbers), not
against the generated code of the other path."""

import random

import pytest
import sympy

from costmodel import load
from costmodel.formulas import python as codegen
from costmodel.formulas.compiled import EXACT, run_source
from costmodel.formulas.quantities import choose, maximum, roundup
from costmodel.options import Options
from costmodel.sections.quantities import quantities
from costmodel.symbols import B, T, V, d, h

SHARED = 2 * B * T * d + B * T * V  # a term many points repeat
EXPRS = [
    SHARED + 3 * B * T**2 * h,
    SHARED + sympy.Rational(1, 2) * B * d / h,  # a fraction and a negative power
    (SHARED + d) ** 2,
    maximum(SHARED, 4 * B * T * d, B * h * T**2),
    roundup(SHARED / 3 + d / h),
    choose(SHARED, d * V, SHARED + 1, d * V),
    sympy.Piecewise((SHARED, sympy.Eq(sympy.Mod(d, h), 0)), (d, True)),
    sympy.Eq(sympy.Mod(B * d, 2 * h), 0),
    sympy.Integer(7),
]
SYMBOLS = (B, T, V, d, h)


@pytest.fixture
def hash_consed(monkeypatch):
    monkeypatch.setattr(codegen, "SYMPY_CSE_LIMIT", 0)  # every expression set takes the large-set path


def _sympy_values(exprs, values):
    out = []
    for e in exprs:
        v = e.xreplace(values)
        out.append(bool(v) if isinstance(v, sympy.logic.boolalg.Boolean) else v)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_hash_consed_source_equals_sympy(hash_consed, seed):
    rng = random.Random(seed)
    values = {s: rng.choice([1, 2, 3, 8, 12, 64, 1000]) for s in SYMBOLS}
    src = codegen.source(EXPRS, SYMBOLS)
    got = run_source(src)(EXACT, *(values[s] for s in SYMBOLS))
    assert got == _sympy_values(EXPRS, values)


def test_a_shared_subtree_is_written_once(hash_consed):
    src = codegen.source(EXPRS, SYMBOLS)
    # sympy flattens each point into one sum: the terms of 2·B·T·d + B·T·V are what the points share, each
    # defined once and referred to by name
    defined = dict(line.strip().split(" = ", 1) for line in src.splitlines() if line.startswith("    _x"))
    shared = {v: k for k, v in defined.items()}
    x, y = shared["(v_B)*(v_T)*(v_V)"], shared["(2)*(v_B)*(v_T)*(v_d)"]
    assert src.split("return", 1)[1].count(f"{x} + {y}") >= 3


def test_small_sets_keep_sympy_cse():
    src = codegen.source(EXPRS, SYMBOLS)
    replacements, reduced = sympy.cse(EXPRS, symbols=sympy.numbered_symbols("_x"), optimizations=None)
    assert src.count("\n    v__x") == len(replacements)


def test_free_symbols_equal_sympy():
    exprs = [*EXPRS, 3, sympy.Dummy("micro_batch") * d, sympy.Lambda(T, T + h), maximum(B, sympy.ceiling(V / 2))]
    want = set().union(*(e.free_symbols for e in exprs if hasattr(e, "free_symbols")))
    assert codegen.free_symbols(exprs) == want


def test_a_model_through_the_large_set_path(hash_consed):
    """Every key and liveness point of GPT-2 small through the hash-consed source equals sympy's value."""
    q = quantities(load("gpt2-small"), Options.make(None))
    exprs = [*q.exprs.values(), *(c for cands, _ in q.choices.values() for c in cands)]
    symbols = tuple(sorted(codegen.free_symbols(exprs), key=str))
    values = {s: {"B": 2, "T": 1024, "V": 50257, "d": 768, "h": 12, "L": 12}.get(str(s), 4) for s in symbols}
    got = run_source(codegen.source(exprs, symbols))(EXACT, *(values[s] for s in symbols))
    assert got == _sympy_values(exprs, values)


def test_exact_only_sources_are_hash_consed_unless_a_float_is_there():
    """``exact=True`` (the estimate's formulas, run in exact mode only): hash-consing whatever the number of
    expressions, the same numbers as sympy's; with a float in them, sympy's ``cse`` as before."""
    src = codegen.source(EXPRS, SYMBOLS, exact=True)
    assert "v__x" not in src and "    _x0 = " in src  # named by hash-consing, not by cse's numbered symbols
    values = dict(zip(SYMBOLS, (2, 1024, 50257, 768, 12)))
    assert run_source(src)(EXACT, *(values[s] for s in SYMBOLS)) == _sympy_values(EXPRS, values)
    with_float = [*EXPRS, sympy.Float(0.5) * SHARED]
    assert "v__x" in codegen.source(with_float, SYMBOLS, exact=True)
