"""Hostile input, round two (issue 17): every case ends within seconds, in bounded memory, with exit 2 and
one line (or the right answer); special files, interrupts, full disks and file-size limits are handled.

The corpus ``tests/corpus/hostile_inputs.json`` is replayed by ``replay_worker.py``: one process imports the
CLI once, then forks a child per case under a time cap (SIGALRM) and an address-space cap (RLIMIT_AS: what
the parent holds plus 200 MB, 1 GB for the few cases that compute an answer). A case that hangs is killed by
the alarm, one that allocates past the cap fails with MemoryError (exit 3): both fail here.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from costmodel.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "hostile_inputs.json"
CASES = json.loads(CORPUS.read_text())
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs, /dev/zero, /proc and RLIMIT_AS: Linux")


def _env(tmp: pathlib.Path) -> dict[str, str]:
    return {**os.environ, "COSTMODEL_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("hostile")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "cli" / "replay_worker.py"), str(CORPUS), str(tmp)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(tmp),
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["id"]: r for r in json.loads(done.stdout)}


def test_corpus_covers_the_issue():
    ids = {c["id"] for c in CASES}
    assert len(ids) == len(CASES) >= 50
    for needed in (
        "expr-power-of-unknown-sum",
        "expr-tower",
        "config-fifo",
        "config-dev-zero",
        "hardware-fifo",
        "hardware-sparse-2GB",
        "config-5000-digit-int",
        "builder-generator-exit",
        "builder-system-exit",
        "fit-solve-seq",
        "latex-empty-name",
        "config-duplicate-key",
    ):
        assert needed in ids


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_replayed_case(case, replayed):
    r = replayed[case["id"]]
    assert r["code"] == case["code"], r
    if case["code"] == 2:
        assert r["stdout"] == "", r
        assert r["stderr"].startswith("costmodel: error: ") and r["stderr"].count("\n") == 1, r
        assert case["expect"] in r["stderr"], r
    else:
        assert r["stderr"] == "", r  # no warnings, no notes on a successful run
        assert case.get("stdout", "") in r["stdout"], r
    if case.get("json"):  # strict JSON: no NaN, no Infinity
        json.loads(r["stdout"], parse_constant=lambda name: pytest.fail(f"{name} in --json output"))


# -- the world around the command: a full disk, an ASCII terminal, a file-size limit, Ctrl-C -------------------


def _costmodel(args: list[str], tmp: pathlib.Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "costmodel", *args],
        capture_output=True,
        timeout=120,
        env={**_env(tmp), **kw.pop("env", {})},
        cwd=ROOT,
        **kw,
    )


def test_a_full_disk_on_stdout_is_exit_2_in_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "costmodel", "estimate", "gpt2-small"],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
            env=_env(tmp_path),
            cwd=ROOT,
        )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.startswith("costmodel: error: cannot write the output") and err.count("\n") == 1, err


def test_an_ascii_terminal_gets_escapes_not_a_crash(tmp_path):
    done = _costmodel(["roofline", "gpt2-small", "--hardware", "h100-sxm"], tmp_path, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert b"\\xb5s" in done.stdout  # µs, escaped


def test_a_file_size_limit_leaves_the_old_report_whole(tmp_path):
    import resource

    old = tmp_path / "old.tex"
    old.write_text("the old report\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    done = _costmodel(["report", "gpt2-small", "--latex", str(old)], tmp_path, preexec_fn=limit)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and "cannot write" in err, err
    assert old.read_text() == "the old report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".old.tex")] == []  # no temporary left


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4, 1.0])
def test_ctrl_c_at_any_moment_is_exit_130_without_a_traceback(delay, tmp_path):
    """The entry module is imported first (it installs the handler), then the command runs: SIGINT lands in the
    imports of costmodel, sympy and networkx, or in the estimate itself."""
    code = (
        "import sys, costmodel_entry; sys.stdout.write('ready\\n'); sys.stdout.flush(); "
        "sys.exit(costmodel_entry.main(['estimate', 'llama3-8b', '--set', 'L=3', '--seq', '64']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path), cwd=ROOT
    )
    assert proc.stdout.readline() == b"ready\n"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 0), err  # 0: it had finished before the signal
    assert b"Traceback" not in err and b"Exception ignored" not in err, err
    if proc.returncode == 130:
        assert err == b"", err


def test_python_dash_m_installs_the_handler_before_the_imports():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import signal, sys; sys.argv[0] = '-m'; "
            "sys.orig_argv[1:3] = ['-m', 'costmodel']; import costmodel; "
            "print(signal.getsignal(signal.SIGINT).__name__)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.stdout.strip() == "_leave", done.stderr


def test_roofline_dtype_reaches_the_fused_and_flash_rows():
    """With --dtype fp8 the unfused variant is the table's own total (same graph, same peak): before the fix the
    variants used each op's own dtype (bf16) and disagreed with the rows."""
    import costmodel

    for dtype in ("fp8", "bf16"):
        r = costmodel.roofline("gpt2-small", "h100-sxm", options=costmodel.Options.make(dtype=dtype))
        assert r["variants"]["unfused"]["time_s"] == pytest.approx(r["total"]["time_s"], rel=1e-12)
    fp8 = costmodel.roofline("gpt2-small", "h100-sxm", options=costmodel.Options.make(dtype="fp8"))
    bf16 = costmodel.roofline("gpt2-small", "h100-sxm", options=costmodel.Options.make(dtype="bf16"))
    assert fp8["variants"]["fused"]["time_s"] < bf16["variants"]["fused"]["time_s"]  # 2x the peak: faster matmuls


def test_warnings_are_captured_not_printed(capsys):
    import warnings

    from costmodel.cli import estimate as estimate_cmd

    real, called = estimate_cmd.run, []

    def noisy(args):
        called.append(True)
        warnings.warn("overflow encountered in multiply", RuntimeWarning, stacklevel=1)
        return real(args)

    estimate_cmd.run = noisy  # the parser is built per call and binds the module's run then
    try:
        code = main(["estimate", "gpt2-small"])
    finally:
        estimate_cmd.run = real
    out, err = capsys.readouterr()
    assert called and code == 0 and out and err == ""
