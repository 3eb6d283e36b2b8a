"""docs/tutorial.md works as written: its code blocks are run here, unchanged."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from costmodel.cli import main

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", TUTORIAL.read_text(), re.S)


@pytest.fixture
def my_palm(tmp_path):
    path = tmp_path / "my_palm.py"
    path.write_text(code_blocks("python")[0])  # "Save this as my_palm.py"
    return path


def cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


def test_the_new_block_is_under_50_lines():
    assert len(code_blocks("python")[0].splitlines()) < 50


def test_python_api_block_runs_as_written(my_palm, capsys):
    namespace: dict = {}
    exec(compile(my_palm.read_text(), str(my_palm), "exec"), namespace)
    exec(compile(code_blocks("python")[1], "tutorial-step-2", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    # the comments in the tutorial show what is printed
    assert printed[0] == "12*L*d**2 + 2*L*d*d_head*h + 2*L*d*d_head + L*d + V*d + d"
    assert printed[1] == "2*B*L*T*d*d_head"
    assert r"d_{head}" in printed[2]


def test_command_line_block_runs_as_written(my_palm, monkeypatch):
    monkeypatch.chdir(my_palm.parent)
    derive_cmd, estimate_cmd = [line.split()[1:] for line in code_blocks("bash")[0].strip().splitlines()]
    latex = cli(*derive_cmd)
    assert r"\begin{align*}" in latex and r"d_{head}" in latex
    text = cli(*estimate_cmd, "--json")
    # by hand, per layer: q and o h·d_head·d each, k and v one head (d·d_head each), SwiGLU 3·d·4d,
    # one RMSNorm gain d; plus the tied table V·d and the final norm d
    L, d, h, k, V = 2, 256, 4, 64, 1000
    assert f'"total": {L * (2 * h * k * d + 2 * d * k + 3 * d * 4 * d + d) + V * d + d}' in text
