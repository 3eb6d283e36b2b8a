"""The sweep's text writer (reports/writers.py) against a plain Python writer, row by row: every kind of column
(int64 to its ends, whole and other floats, non-finite floats, truth values, exact integers past 2^63, Python
ints and fractions) in CSV and JSON lines, over blocks of any size (rows split across blocks)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.formulas.wide import Exact
from costmodel.verbs.sweep import writers

INT64 = st.one_of(
    st.sampled_from([0, 1, -1, 9, 10, 9999, 10000, -10000, 2**53, 2**63 - 1, -(2**63)]),
    st.integers(-(2**63), 2**63 - 1),
)
FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**53), 2**53).map(float),
    st.sampled_from([0.5, -0.0, 1e22, 2.0**53, 2.0**53 + 2, -(2.0**60)]),
)
WIDE = st.one_of(st.integers(-(10**34), 10**34), st.sampled_from([0, 10**16, -(10**16) + 1, 10**34 - 1]))
EXACT = st.one_of(st.integers(-(10**30), 10**30), st.fractions(max_denominator=50), st.none())


def _python(v: object, fmt: str) -> str:
    """How a value is written, in plain Python (the module notes' rules)."""
    if isinstance(v, bool | np.bool_):
        return ("True" if v else "False") if fmt == "csv" else ("true" if v else "false")
    if v is None:
        return "" if fmt == "csv" else "null"
    if isinstance(v, Fraction):
        return str(v) if fmt == "csv" else json.dumps(str(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            return "" if fmt == "csv" else "null"
        return str(int(v)) if v == int(v) and abs(v) < 2.0**53 else repr(v)
    return str(v)


def _exact(values: list[int]) -> Exact:
    a = np.array([abs(v) for v in values], dtype=object)
    return Exact(
        np.array((a // 10**16).tolist(), np.int64),
        np.array((a % 10**16).tolist(), np.int64),
        np.array([v < 0 for v in values]),
    )


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(INT64, FLOAT, st.booleans(), WIDE, EXACT), min_size=1, max_size=30),
    st.integers(1, 8),
)
def test_text_equals_a_plain_python_writer(fmt, rows, block):
    ints, floats, truth, wide, exact = zip(*rows)
    obj = np.empty(len(rows), dtype=object)
    obj[:] = list(exact)
    cols = {
        "a": np.array(ints, np.int64),
        "f": np.array(floats, np.float64),
        "valid": np.array(truth),
        "w": _exact(list(wide)),
        "x": obj,
    }
    names = list(cols)
    values = [ints, floats, truth, wide, exact]
    if fmt == "csv":
        want = "".join(",".join(_python(v[i], fmt) for v in values) + "\n" for i in range(len(rows)))
    else:
        want = "".join(
            "{" + ",".join(f"{json.dumps(k)}:{_python(v[i], fmt)}" for k, v in zip(names, values)) + "}\n"
            for i in range(len(rows))
        )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writers, "BLOCK", block)  # rows split across blocks of every size
        assert writers.text(cols, names, fmt).tobytes().decode() == want
