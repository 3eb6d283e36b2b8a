"""The README runs as written: its set-up commands, every command of "Use", its Python snippet."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest

from costmodel.cli import main
from tests.docs.readme import python_snippets, setup_commands, use_commands

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_starts_with_the_two_setup_commands():
    first, second = setup_commands()
    assert first.startswith("python -m pip install -e . && costmodel estimate ")
    assert second == "python -m pip install -e '.[test]' && python -m pytest -q -n auto"
    ci = (ROOT / ".ci" / "run").read_text()
    assert (
        "python -m pip install -e '.[test]' && python -m pytest -q -n auto" in ci
    )  # CI runs the README's test command


@pytest.mark.parametrize("argv", use_commands(), ids=lambda a: " ".join(a)[:60])
def test_every_use_command_runs(argv, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 0, err.getvalue()
    assert out.getvalue() or os.listdir(tmp_path)  # it printed or wrote something


def test_the_python_snippet_runs_as_written():
    for snippet in python_snippets():
        namespace: dict = {}
        exec(compile(snippet, "README.md", "exec"), namespace)
        if "totals" in namespace and "b" in namespace:
            from costmodel.symbols import B, L, T, d, d_ff

            assert namespace["t"].training.matmul_flops == 12 * B * L * T * d * d_ff
