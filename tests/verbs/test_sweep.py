"""Sweeps: compiled formulas evaluated over grids equal estimate() at every sampled point."""

import functools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.verbs.estimate import estimate
from costmodel.verbs.sweep.derive import chinchilla_optimal, compile_metrics, parse_grid
from costmodel.verbs.sweep.stream import sweep

METRICS = ["flops.training", "memory_bytes.total", "params.total", "bytes.forward"]


def _estimate(d, L, h=96, seq=2048):
    r = estimate("gpt3-175b", seq=seq, settings={"d": d, "L": L, "h": h})
    return {
        "flops.training": r["flops"]["training"],
        "memory_bytes.total": r["memory_bytes"]["total"],
        "params.total": r["params"]["total"],
        "bytes.forward": r["bytes"]["forward"],
    }


def test_exact_sweep_equals_estimate():
    s = sweep("gpt3-175b", {"d": [6144, 12288], "L": [2, 96]}, METRICS, exact=True)
    assert list(s["d"]) == [6144, 6144, 12288, 12288] and list(s["L"]) == [2, 96, 2, 96]  # row order: product
    for i in range(4):
        want = _estimate(int(s["d"][i]), int(s["L"][i]))
        assert {k: s[k][i] for k in METRICS} == want  # the same Python ints


@functools.lru_cache(maxsize=1)
def _compiled():
    return compile_metrics("gpt3-175b", METRICS)


@given(d=st.integers(1, 400).map(lambda n: 96 * n), L=st.integers(1, 200), seq=st.integers(1, 2048))  # T ≤ T_max
def test_float_sweep_within_rounding(d, L, seq):
    # float64 holds integers exactly only to 2**53: values agree to float rounding (relative 1e-12)
    got = _compiled()({"d": d, "L": L, "T": seq})
    want = _estimate(d, L, seq=seq)
    for k in METRICS:
        assert float(got[k]) == pytest.approx(want[k], rel=1e-12)


def test_valid_flags_sizes_that_do_not_divide():
    s = sweep("gpt3-175b", {"d": [12288, 1000]}, ["params.total"])
    assert list(s["valid"]) == [True, False]  # 1000 / 96 heads is no head dim


def test_chinchilla_rule():
    # Hoffmann et al. 2022: Chinchilla, 70B parameters on 1.4T tokens = 20 tokens/param, C = 6·N·D = 5.88e23
    opt = chinchilla_optimal("5.88e23")
    assert opt["params"] == 70 * 10**9 and opt["tokens"] == 1_400 * 10**9
    assert chinchilla_optimal(6 * 10**6, 1)["params"] == 1000  # N = sqrt(C / 6r)


@pytest.mark.parametrize("text", ["d", "d=", "d=1:", "d=8:2", "d=1:2:3:4", "d=x", "d=1.5", "1d=4", "d=0"])
def test_bad_grids_are_one_line_exit_2(text, capsys):
    assert main(["sweep", "gpt3-175b", "--grid", text]) == 2
    err = capsys.readouterr().err
    assert err.startswith("costmodel: error: --grid") and err.count("\n") == 1


def test_grid_parsing():
    assert parse_grid("L=12,24,48") == ("L", [12, 24, 48])
    assert parse_grid("d=1024:8192:1024")[1][-1] == 8192  # STOP included
    with pytest.raises(CostModelError, match="not a symbol"):
        sweep("gpt3-175b", {"q": [1]}, ["params.total"])


def test_cli_sweep_csv_and_json(capsys):
    args = ["sweep", "gpt3-175b", "--grid", "d=6144:12288:6144", "--grid", "L=12,24", "--metric", "params.total"]
    assert main([*args, "--csv", "--exact"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "d,L,params.total,valid" and len(lines) == 5
    assert lines[-1].split(",")[2] == str(_estimate(12288, 24)["params.total"])
    assert main([*args, "--json", "--budget", "1e21"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["columns"]["L"] == [12, 24, 12, 24] and r["optimal"]["tokens_per_param"] == 20


ARGS = [
    "sweep",
    "compare",
    "report",
    "gpt2-small",
    "gpt",
    "--grid",
    "d=64:256:64",
    "L=1,2",
    "h=0",
    "d=1:1e99",
    "T=3:1",
    "--metric",
    "flops.training",
    "params.x",
    "--csv",
    "--json",
    "--exact",
    "--budget",
    "1e20",
    "--ratio",
    "0",
    "--conventions",
    "6nd,palm",
    "nope",
    "--set",
    "d=64",
    "h=3",
    "--tokens",
    "3e11",
    "--batch",
    "x",
    "--",
]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(ARGS), max_size=7))
def test_cli_sweep_compare_report_exit_0_or_2(argv):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 2) and "Traceback" not in err.getvalue()
    if code == 2 and argv:
        assert err.getvalue().count("\n") <= 1 or err.getvalue().startswith("usage")
