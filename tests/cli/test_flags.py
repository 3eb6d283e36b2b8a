"""Each option is declared once (costmodel/options/flags.py) and every door reads that declaration: the CLI's
flag, Python's ``Options`` name, the JSON's ``options`` and docs/options.md (issue 24)."""

from __future__ import annotations

import pathlib

import pytest

from costmodel import CostModelError, Options
from costmodel.cli import parser

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = Options.flags()


def _estimate_parser():
    sub = next(a for a in parser()._actions if a.dest == "command")
    return sub.choices["estimate"]


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.name)
def test_every_declared_option_has_its_flag_python_name_json_key_and_docs_row(flag):
    known = {s for a in _estimate_parser()._actions for s in a.option_strings}
    assert flag.option in known, f"{flag.option} is declared but estimate has no such flag"
    assert flag.name in Options.names(), f"{flag.name} is declared but Options.make does not take it"
    described = Options().describe()
    key = Options.ALIASES.get(flag.name, flag.name)
    assert key in described or f"layout.{key}" in described or f"counting.{key}" in described
    assert f"| `{flag.option}` | `{flag.name}` |" in (ROOT / "docs" / "options.md").read_text()


def test_the_parsers_are_the_declarations():
    assert Options.PARSERS == {f.name: f.read for f in FLAGS if f.read}
    assert len({f.name for f in FLAGS}) == len(FLAGS), "an option declared twice"


@pytest.mark.parametrize(
    ("argv", "python"),
    [
        (["--tp", "2", "--dp", "4", "--zero", "1"], {"tp": 2, "dp": 4, "zero": 1}),
        (["--seq", "8k", "--batch", "1k"], {"seq": 8192, "batch": 1000}),
        (
            ["--hardware", "h100-sxm", "--achieved-tflops", "400"],
            {"hardware": "h100-sxm", "achieved_flops": 4 * 10**14},
        ),
        (["--no-norm-stats", "--flash"], {"norm_stats": False, "flash": True}),
        (
            ["--inference", "--context", "128k", "--kv-dtype", "fp8"],
            {"inference": True, "context": 131072, "kv_dtype": "fp8"},
        ),
    ],
)
def test_a_flag_gives_the_option_python_gives(argv, python):
    from costmodel.cli._common import options

    args = _estimate_parser().parse_args(["gpt2-small", *argv])
    assert options(args) == Options.make(**python)


def test_the_rate_flags_exclude_each_other():
    exclusive = [f.option for f in FLAGS if f.exclusive == "rate"]
    assert len(exclusive) == 4
    with pytest.raises(CostModelError, match="not allowed with"):
        _estimate_parser().parse_args(["gpt2-small", "--hardware", "h100-sxm", "--mfu", "0.5", "--tokens-per-s", "10"])
