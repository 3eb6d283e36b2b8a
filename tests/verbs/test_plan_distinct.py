"""``plan --tokens`` shows the training days in its text table, and its top rows are distinct layouts (issue 30,
item 13): before, the days were in ``--json`` only and rows 1 and 2 were one layout twice over (recompute none
and selective under FlashAttention: the same step and the same bytes per device)."""

from __future__ import annotations

import json

from costmodel.cli import main
from costmodel.verbs.plan.plan import distinct

ARGV = ["plan", "gpt", "--set", "L=4", "--set", "d=64", "--set", "h=4", "--set", "V=100", "--set", "T_max=256"]
ARGV += ["--hardware", "h100-sxm", "--devices", "16", "--batch", "32", "--seq", "256", "--top", "5"]
TOKENS = 10**12  # --tokens 1T


def _run(argv, capsys) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_text_table_has_days_and_distinct_rows(capsys):
    r = json.loads(_run([*ARGV, "--tokens", "1T", "--json"], capsys))
    text = _run([*ARGV, "--tokens", "1T"], capsys)
    head, *lines = text.splitlines()[2:]
    assert "days" in head.split()
    rows = r["distinct"]
    assert len(rows) == 5 and len({(x["step_s"], x["memory_bytes"]) for x in rows}) == 5  # no pair twice
    for row, line in zip(rows, lines):
        # days = D / (B·T) steps × step seconds / 86,400: 1e12 / (32 × 256) = 122,070,312.5 steps
        days = TOKENS / (32 * 256) * row["step_s"] / 86_400
        assert abs(row["training_days"] - days) <= 1e-9 * days
        assert f"{days:,.1f}" in line.split() and line.split()[0] == str(row["rank"])
    # the unfolded ranking is still there, each folded layout named by its row
    ranked = r["layouts"]
    assert len(ranked) == 5 and sum(x["same"] for x in rows) >= 1
    assert any(x["recompute"] == "selective" for x in ranked[:2])  # the pair the table used to show twice
    assert "folded into it" in text


def test_distinct_keeps_the_first_of_each_pair():
    import numpy as np

    assert distinct(np.array([1, 1, 2, 2]), np.array([3.0, 3.0, 3.0, 4.0])) == [(0, [1]), (2, []), (3, [])]
