"""The cosmetic items of issue 30, each as a user met it."""

from __future__ import annotations

import re

import costmodel
from costmodel.cli import main
from costmodel.cli.estimate import _gb3
from costmodel.graph.printing import escape, latex


def _err(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_no_doubled_prefix(capsys):
    assert _err(["estimte", "gpt2-small"], capsys).startswith("costmodel: error: argument COMMAND: invalid choice")
    err = _err(["estimate", "gpt2-small", "--bogus"], capsys)
    assert err.startswith("costmodel: error: unrecognized arguments: --bogus"), err
    err = _err(["estimate", "gpt2-small", "--zero", "9"], capsys)
    assert err.startswith("costmodel: error: estimate: argument --zero: invalid choice"), err


def test_a_batch_of_7b_is_refused(capsys):
    assert "would be 7,000,000,000 sequences" in _err(["estimate", "gpt2-small", "--batch", "7B"], capsys)
    assert main(["estimate", "gpt2-small", "--batch", "1k", "--json"]) == 0  # 1,000 sequences: a batch
    capsys.readouterr()


def test_models_columns_line_up(capsys):
    assert main(["models"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines()[1:] if r.startswith("  ")]
    ends = {m.end() for m in (re.search(r"\d{1,3}(,\d{3})+", r) for r in rows) if m}
    assert len(ends) == 1, ends  # every parameter count ends in one column (vit-base-patch16-224-in21k pushed it)


def test_latex_keeps_flags_and_writes_big_round_numbers_as_powers():
    assert escape("--hardware h100-sxm") == "-{}-hardware h100-sxm"  # not "–hardware"
    # 6 × 15T tokens = 9e13, printed exactly, not as 14 digits
    assert latex(costmodel.Options.make(tokens="15T").tokens * 6 * costmodel.symbols.d) == r"9 \cdot 10^{13} \cdot d"


def test_short_repr_and_words_for_conventions():
    r = costmodel.estimate("gpt2-small")
    assert len(repr(r)) < 200 and repr(r).startswith("<Estimate of 'gpt2-small': params, flops")
    text = costmodel.report("gpt2-small").to_markdown()
    counting = next(line for line in text.splitlines() if line.startswith("Counting:"))
    assert "None" not in counting and "True" not in counting and "norm stats: yes" in counting


def test_gigabytes_never_in_exponent_form():
    assert [_gb3(x) for x in (2.04e12, 34.9e9, 0.249e9)] == ["2,040 GB", "34.9 GB", "0.249 GB"]


def test_every_chart_says_where_it_went(tmp_path, capsys):
    out = tmp_path / "r.svg"
    assert main(["roofline", "gpt2-small", "--hardware", "h100-sxm", "--plot", str(out), "--json"]) == 0
    assert f"wrote the roofline chart to {out}" in capsys.readouterr().err and out.exists()
