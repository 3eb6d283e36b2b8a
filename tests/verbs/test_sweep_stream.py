"""Streamed sweeps: exact validity equal to estimate's, every format the same numbers, the same bytes however
the chunks are spread (one process, local processes, a Dask cluster), memory flat in the grid's size."""

import csv
import io
import json
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.formulas.checked import Int64OverflowError, Q, checked_mode, exact_values
from costmodel.formulas.python import compile_exprs
from costmodel.symbols import d, h
from costmodel.verbs.estimate import estimate
from costmodel.verbs.sweep import stream
from costmodel.verbs.sweep.derive import derive_plan as plan
from costmodel.verbs.sweep.stream import sweep

# -- exact arithmetic: int64 with checked overflow equals Python ints, or says it cannot ----------------------

EXPRS = [
    d * h + 3,
    d / h,
    sympy.Eq(sympy.Mod(d / h, 1), 0),
    sympy.ceiling(d / h),
    sympy.floor(8 * d / 3),
    sympy.Max(d, 2 * h),
    d**3 - h,
    8 * d / 3 - h / 7,
    sympy.Mod(d, h),
    d <= 4 * h,
    (d + h) ** 2 / (d * h),
]
_F = compile_exprs(EXPRS, (d, h))
SIZES = st.one_of(st.integers(1, 100), st.integers(1, 2**31), st.integers(2**60, 2**63 - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(SIZES, SIZES), min_size=1, max_size=5))
def test_checked_int64_is_exact_or_refuses(pairs):
    from costmodel.formulas.compiled import EXACT

    ds, hs = (np.array(v, dtype=np.int64) for v in zip(*pairs))
    want = [_F(EXACT, int(a), int(b)) for a, b in pairs]  # Python ints and Fractions, one config at a time
    for j in range(len(EXPRS)):
        try:
            got = _F(checked_mode(), Q(ds), Q(hs))[j]
        except Int64OverflowError:
            continue  # the chunk is evaluated with Python ints instead: never a wrapped value
        got = exact_values(got) if isinstance(got, Q) else np.broadcast_to(got, ds.shape).tolist()
        assert [Fraction(g) for g in got] == [Fraction(w[j]) for w in want], EXPRS[j]


def test_overflow_is_refused_not_wrapped():
    with pytest.raises(Int64OverflowError):
        _F(checked_mode(), Q(np.array([2**62])), Q(np.array([3])))


# -- validity: exactly what estimate accepts ----------------------------------------------------------------


def _accepted(dv: int) -> bool:
    try:
        estimate("gpt2-small", settings={"d_ff": "8*d/3", "d": dv})
    except CostModelError:
        return False
    return True


@pytest.mark.parametrize("exact", [True, False])
def test_validity_equals_estimate_beyond_int64(exact):
    # issue 17: d = 1729382256910270464 = 2^60 · 1.5 is a multiple of 12, so d/h (h = 12) and 8d/3 are whole;
    # 8·d = 1.4e19 overflows int64 (9.2e18), which must not wrap
    big = 1729382256910270464
    grid = [big, big + 1, big + 12, 768, 770, 2**62 + 12, 10**20]
    s = sweep("gpt2-small", {"d": grid}, ["params.total"], settings={"d_ff": "8*d/3"}, exact=exact)
    assert s["valid"].tolist() == [_accepted(v) for v in grid]
    assert s["valid"].tolist()[:1] == [True]


def test_exact_metrics_equal_estimate_on_both_sides_of_int64():
    grid = [768, 1729382256910270464]
    s = sweep("gpt2-small", {"d": grid}, ["params.total", "flops.training"], exact=True)
    for i, dv in enumerate(grid):
        r = estimate("gpt2-small", settings={"d": dv})
        assert (s["params.total"][i], s["flops.training"][i]) == (r["params"]["total"], r["flops"]["training"])


# -- formats and spreading ----------------------------------------------------------------------------------

ARGS = [
    "sweep",
    "gpt2-small",
    "--grid",
    "d=64:1280:64",
    "--grid",
    "L=1:12",
    "--metric",
    "params.total",
    "--metric",
    "flops.training",
    "--chunk",
    "37",
]


def _run(args, capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_csv_jsonl_npy_parquet_agree_with_estimate(tmp_path, capsys):
    rows = list(csv.DictReader(io.StringIO(_run([*ARGS, "--csv"], capsys))))
    assert len(rows) == 20 * 12
    lines = [json.loads(x) for x in _run([*ARGS, "--format", "jsonl"], capsys).splitlines()]
    assert [str(r["flops.training"]) for r in lines] == [r["flops.training"] for r in rows]
    assert _run([*ARGS, "--format", "npy", "-o", str(tmp_path / "s.npy")], capsys) == ""
    a = np.load(tmp_path / "s.npy")
    assert a["flops.training"].tolist() == [float(r["flops.training"]) for r in rows]
    assert a["valid"].tolist() == [r["valid"] == "True" for r in rows]
    for i in (0, 5, 24, 35, 127, 239):  # each against estimate (d and L as the row says)
        config = {"d": int(rows[i]["d"]), "L": int(rows[i]["L"])}
        assert lines[i]["valid"] == (config["d"] % 12 == 0)  # 12 heads must divide d
        if not lines[i]["valid"]:
            with pytest.raises(CostModelError, match="whole number"):
                estimate("gpt2-small", settings=config)
            continue
        r = estimate("gpt2-small", settings=config)
        assert int(rows[i]["params.total"]) == r["params"]["total"]
        assert lines[i]["flops.training"] == r["flops"]["training"]  # < 2^53: exact in float64
    pytest.importorskip("pyarrow", reason="--format parquet needs the parquet extra (pyarrow)")
    import pyarrow.parquet as pq

    _run([*ARGS, "--format", "parquet", "-o", str(tmp_path / "s.parquet")], capsys)
    t = pq.read_table(tmp_path / "s.parquet")
    assert t.column("flops.training").to_pylist() == a["flops.training"].tolist()


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main([*ARGS, "--format", "parquet", "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "costmodel[parquet]" in err
    assert not (tmp_path / "x.parquet").exists() and list(tmp_path.iterdir()) == []  # no temporary left


def test_workers_give_identical_bytes(tmp_path, capsys):
    for w in (1, 2):
        _run([*ARGS, "--csv", "--workers", str(w), "-o", str(tmp_path / f"w{w}.csv")], capsys)
    assert (tmp_path / "w1.csv").read_bytes() == (tmp_path / "w2.csv").read_bytes()


def test_dask_local_cluster_gives_identical_bytes():
    pytest.importorskip("distributed", reason="--dask needs the dask extra (dask[distributed])")
    from distributed import LocalCluster

    p, _ = plan("gpt2-small", ["d=64:1280:64", "L=1:12"], ["flops.training"])
    shown = [*p.names, "flops.training", "valid"]
    local = io.BytesIO()
    stream.write(p, shown, "jsonl", stream=local, chunk=50)
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = io.BytesIO()
        stream.write(p, shown, "jsonl", stream=remote, chunk=50, dask=cluster.scheduler_address)
    assert remote.getvalue() == local.getvalue() and local.getvalue().count(b"\n") == 240


# -- bounded work: validated before allocating, memory flat ---------------------------------------------------


def test_unknown_names_and_budgets_are_refused_before_any_work(capsys):
    tracemalloc.start()
    try:
        code = main(["sweep", "gpt2-small", *[a for i in range(25) for a in ("--grid", f"z{i}=1:1e7")]])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2 and peak < 20e6  # no grid expanded (25 ranges of 1e7 are 8 GB as lists)
    assert "configs" in capsys.readouterr().err
    many = [
        a
        for k in ("params.total", "flops.training", "flops.forward", "flops.backward", "bytes.forward")
        for a in ("--metric", k)
    ]
    assert main(["sweep", "gpt2-small", "--grid", "d=1:1e7", *many]) == 2
    assert "values" in capsys.readouterr().err  # 1e7 configs × 5 metrics: points × metrics is budgeted
    assert main(["sweep", "gpt2-small", "--grid", "q=1:4"]) == 2
    assert "not a symbol" in capsys.readouterr().err


class _Discard:
    def write(self, data: bytes) -> None:
        pass


def test_memory_is_flat_in_the_grid_size():
    p, _ = plan("gpt2-small", ["d=64:64000:64", "L=1:1000"], ["params.total", "flops.training"])  # 1e6 configs
    shown = [*p.names, "params.total", "flops.training", "valid"]
    tracemalloc.start()
    try:
        stream.write(p, shown, "csv", stream=_Discard(), chunk=1 << 15)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40e6  # the columns alone would be 1e6 × 5 × 8 B = 40 MB, their text 50 MB


def test_json_is_strict_and_stderr_empty(capsys):
    assert main(["sweep", "gpt2-small", "--grid", "d=768,1e30", "--json", "--budget", "1e30"]) == 0
    out, err = capsys.readouterr()
    r = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert r["columns"]["valid"] == [True, False] and err == ""  # 1e30 = 2^30 · 5^30: no multiple of 12 heads
    assert main(["sweep", "gpt2-small", "--grid", "d=768,1e30", "--format", "jsonl"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(x, parse_constant=lambda c: pytest.fail(c))["d"] for x in out.splitlines()] == [768, 10**30]
    assert err == ""


def test_non_finite_values_are_null_or_a_reason():
    from costmodel.render.results import Sweep
    from costmodel.verbs.sweep.derive import _float
    from costmodel.verbs.sweep.writers import text

    cols = {"d": np.array([1, 2, 3]), "m": np.array([np.inf, np.nan, 2.5]), "valid": np.ones(3, bool)}
    s = Sweep(cols, grid=["d"], metrics=["m"])
    assert json.loads(s.to_json())["columns"]["m"] == [None, None, 2.5]
    assert text(cols, ["d", "m", "valid"], "jsonl").tobytes().count(b"null") == 2
    assert text(cols, ["d", "m", "valid"], "csv").tobytes() == b"1,,True\n2,,True\n3,2.5,True\n"
    assert _float(sympy.Integer(10) ** 400) == "1.00000E+400 (beyond float64)"


# -- the plan cache: a warm sweep is the derived one, without sympy ------------------------------------------


def test_cached_plan_equals_the_derived_one_and_needs_no_sympy(tmp_path, monkeypatch, capsys):
    import os
    import subprocess
    import sys

    from costmodel.verbs.sweep import plans

    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(tmp_path))
    grid, metrics = ["d=64:640:64", "L=2,4"], ["params.total", "flops.training"]
    cold, name = plans.cached_plan("gpt2-small", grid, metrics, options=None)
    warm, name2 = plans.cached_plan("gpt2-small", grid, metrics, options=None)
    derived, m = plan("gpt2-small", grid, metrics)
    assert cold == warm == derived and name == name2 == m.name
    code = (
        "import sys; from costmodel.cli import main; rc = main(['sweep', 'gpt2-small', '--grid', 'd=64:640:64', "
        "'--grid', 'L=2,4', '--metric', 'params.total', '--metric', 'flops.training', '--csv']); "
        "assert rc == 0; print(sorted(k for k in ('sympy', 'networkx') if k in sys.modules))"
    )
    env = {**os.environ, "COSTMODEL_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines()[-1] == "[]"
    # a base config the checks refuse goes to the derivation, which says why (T = 4096 > T_max = 1024)
    args = ["sweep", "gpt2-small", "--grid", "L=2,4", "--metric", "params.total", "--metric", "flops.training"]
    assert main([*args, "--csv"]) == 0
    capsys.readouterr()
    assert main([*args, "--csv", "--seq", "4096"]) == 2
    assert "T_max" in capsys.readouterr().err
