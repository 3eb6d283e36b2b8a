"""Exact integers over int64 limbs (reports/wide.py) against Python ints: random values up to int64's ends,
products and sums far beyond 2^63, and the sweep's text of such metrics against ``estimate``'s formulas."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.formulas.wide import INEXACT, MODE, W, digits

EDGE = st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**62 - 1, 2**62, 2**63 - 1, -(2**63) + 1, 10**18, -(10**18)])
INT64 = st.one_of(EDGE, st.integers(-(2**63) + 1, 2**63 - 1))
FORMS = [
    lambda a, b, c: a * b + c,
    lambda a, b, c: (a * b - c) * 3 - a,
    lambda a, b, c: a**2 * 72 + b * c * 13 - 5,
    lambda a, b, c: 7 - (a + b + c) * (a - c),
    lambda a, b, c: a * b * c,
    lambda a, b, c: (a * b) * (b * c) + (10**30) * c,
]


def _ints(x, n):
    got = digits(x, n)
    if got is None:
        return None
    hi, lo, neg = got
    return [(-1 if s else 1) * (h * 10**16 + v) for h, v, s in zip(hi.tolist(), lo.tolist(), neg.tolist())]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(INT64, INT64, INT64), min_size=1, max_size=6), st.sampled_from(range(len(FORMS))))
def test_limbs_equal_python_ints(rows, form):
    f = FORMS[form]
    a, b, c = (np.array(col, dtype=np.int64) for col in zip(*rows))
    got = _ints(f(W.of(a), W.of(b), W.of(c)), len(rows))
    want = [f(*r) for r in rows]
    if got is None:  # refused only at 9·10^34 and beyond (then Python ints write it)
        assert max(abs(v) for v in want) >= 9 * 10**34
    else:
        assert got == want


def test_scalars_broadcast_and_division_is_inexact():
    x = W.of(np.array([3, 4]))
    assert _ints(x * (2**70) + 1, 2) == [3 * 2**70 + 1, 4 * 2**70 + 1]
    assert _ints(W.of(5) * 2, 3) == [10, 10, 10]
    assert x / 2 is INEXACT and (x / 2) * 3 + x is INEXACT and (x < 3) is INEXACT
    assert all(h(x, 2) is INEXACT for h in MODE)
    assert W.of(np.array([1.5])) is INEXACT and digits(INEXACT, 1) is None


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.integers(1, 2**31), st.sampled_from([2**31, 3_037_000_499, 10**9])), min_size=1, max_size=4),
    st.lists(st.integers(1, 2**20), min_size=1, max_size=3),
    st.booleans(),
)
def test_sweep_text_beyond_2_53_and_2_63_equals_python_ints(ds, ls, exact):
    """A sweep's CSV of metrics past 2^53 and 2^63 (gpt2-small's FLOPs grow as L·d²) against the generated
    formulas evaluated in Python ints (``formulas.EXACT``), point by point."""
    from costmodel.formulas import compiled as formulas
    from costmodel.formulas.chunks import Plan, evaluate, widen
    from costmodel.verbs.sweep import writers
    from costmodel.verbs.sweep.plans import cached_plan as plan

    p, _ = plan("gpt2-small", ["d=768", "L=12"], ["flops.training", "params.total"], exact=exact)
    q = Plan(p.source, p.symbols, p.metrics, p.base, ("d", "L"), (tuple(ds), tuple(ls)), exact)
    cols = evaluate(q, 0, q.size, wide=True)
    cols = cols if exact else widen(q, cols)
    fn = formulas.run_source(p.source[0])
    want = []
    for d in ds:
        for L in ls:
            flops, params = fn(formulas.EXACT, *({**p.base, "d": d, "L": L}[s] for s in p.symbols))
            want.append(f"{flops},{params}\n")
    assert writers.text(cols, ["flops.training", "params.total"], "csv").tobytes().decode() == "".join(want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(EDGE, st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=40))
def test_int64_columns_are_written_as_python_writes_them(values):
    """The CSV and JSON-lines text of int64 columns (four digits at a time, by unsigned division) against
    ``str`` of each value, int64's least value included."""
    from costmodel.verbs.sweep import writers

    a = np.array(values, dtype=np.int64)
    cols = {"a": a, "b": a[::-1].copy()}
    want = "".join(f"{x},{y}\n" for x, y in zip(values, values[::-1]))
    assert writers.text(cols, ["a", "b"], "csv").tobytes().decode() == want
    lines = "".join(f'{{"a":{x},"b":{y}}}\n' for x, y in zip(values, values[::-1]))
    assert writers.text(cols, ["a", "b"], "jsonl").tobytes().decode() == lines
