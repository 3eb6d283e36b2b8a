"""The terminal text of ``estimate``: fits 100 columns, says "1 device", shows the micro-batch and the defaults
it chose, and announces the files it writes."""

import json
import re

import pytest

from costmodel import units
from costmodel.cli import main
from costmodel.units import duration

CASES = [
    ("llama2-7b", "--hardware", "h100-sxm", "--tokens", "2e12"),
    ("gpt3-175b", "--tokens", "3e11", "--hardware", "h100-sxm", "--achieved-tflops", "400"),
    (
        "mixtral-8x7b",
        "--hardware",
        "h100-sxm",
        "--devices",
        "64",
        "--dp",
        "8",
        "--tp",
        "8",
        "--zero",
        "1",
        "--batch",
        "64",
        "--recompute",
        "selective",
    ),
    ("gpt2-small", "--inference", "--context", "1024", "--hardware", "h100-sxm"),
]


@pytest.mark.parametrize("argv", CASES, ids=lambda a: a[0])
def test_estimate_text_fits_100_columns(argv, capsys):
    assert main(["estimate", *argv]) == 0
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > 100]
    assert wide == []


def test_estimate_text_says_what_it_chose(capsys):
    assert (
        main(["estimate", "llama2-7b", "--hardware", "h100-sxm", "--tokens", "2e12", "--time-model", "roofline"]) == 0
    )
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first == "llama2-7b (llama)  B=1 (default), T=4,096 (the config's context), micro-batch 1"
    assert "time on 1 device × h100-sxm" in out and "1 x h100" not in out
    # the training time in years of 365.25 days (31,557,600 s), 3 significant digits, as every report says it
    line = next(x for x in out.splitlines() if x.startswith("  training "))
    assert (
        main(
            [
                "estimate",
                "llama2-7b",
                "--hardware",
                "h100-sxm",
                "--tokens",
                "2e12",
                "--time-model",
                "roofline",
                "--json",
            ]
        )
        == 0
    )
    seconds = json.loads(capsys.readouterr().out)["time"]["training_s"]
    assert 5.85 < seconds / 31_557_600 < 5.95  # 5.9 years: 6.7e9 params, 2e12 tokens on one H100 at the roofline
    assert line.startswith(f"  training      {duration(seconds)}  (") and duration(seconds) == "5.9 years"
    assert main(["estimate", "llama2-7b", "--batch", "8", "--seq", "1024", "--dp", "2", "--devices", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "llama2-7b (llama)  B=8, T=1,024, micro-batch 4"


def test_files_written_are_announced(capsys, tmp_path):
    svg = tmp_path / "m.svg"
    assert main(["estimate", "gpt2-small", "--hardware", "a100-40gb", "--plot-memory", str(svg)]) == 0
    assert f"wrote the memory chart to {svg}" in capsys.readouterr().err
    tex = tmp_path / "r.tex"
    assert main(["report", "gpt2-small", "--latex", str(tex)]) == 0
    assert f"wrote latex report to {tex}" in capsys.readouterr().err


#: A count of one followed by a plural noun ("1 devices", "1 tokens"), not preceded by another digit.
ONE_PLURAL = re.compile(r"(?<![\d.,])1 (device|token|layout|op|layer|value|config|metric)s\b")


def test_one_of_anything_is_singular(capsys):
    argv = ["estimate", "gpt2-small", "--batch", "1", "--seq", "1", "--hardware", "h100-sxm", "--devices", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "per device (1 device: dp 1" in out and "time on 1 device × h100-sxm" in out
    assert "one step = 1 token (use --tokens D" in out
    assert ONE_PLURAL.findall(out) == []
    assert main(["plan", "gpt2-small", "--hardware", "h100-sxm", "--devices", "1", "--batch", "1", "--seq", "128"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpt2-small on 1 device × h100-sxm, global batch 1 x 128 tokens\n  3 layouts searched")
    assert ONE_PLURAL.findall(out) == []
    assert [units.plural(n, "layout") for n in (0, 1, 2, 1000)] == [
        "0 layouts",
        "1 layout",
        "2 layouts",
        "1,000 layouts",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ("roofline", "gpt2-small", "--hardware", "h100-sxm"),  # its op table was 105 columns, its total 105
        ("roofline", "llama2-7b", "--hardware", "h100-sxm", "--decode", "--context", "4096"),
        ("hardware",),  # its header line was 121 columns
        ("plan", "gpt2-small", "--hardware", "h100-sxm", "--devices", "8", "--batch", "8", "--seq", "256"),
    ],
    ids=lambda a: a[0] + ("-decode" if "--decode" in a else ""),
)
def test_other_texts_fit_100_columns(argv, capsys):
    assert main(list(argv)) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if len(line) > 100] == []


def test_does_not_fit_hint_names_the_flags_it_came_from(capsys):
    """Issue 30 item 10: the hint printed a bare ``costmodel fit MODEL --hardware HW``; run as printed it did a
    training fit of another step. The command it names carries the step's flags, and running it as printed
    answers the same (inference) question: llama3-70b's bf16 weights alone, 70,553,706,496 × 2 B = 141.1 GB,
    overflow an 80 GB h100-sxm at tp 1."""
    argv = [
        "estimate",
        "llama3-70b",
        "--inference",
        "--context=8k",
        "--batch",
        "2",
        "--hardware",
        "h100-sxm",
        "--flash",
    ]
    assert main([*argv, "--devices", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the wrapped lines joined
    command = re.search(r"DOES NOT FIT .*?'(costmodel fit [^']*)' names the smallest change", out).group(1)
    assert command == "costmodel fit llama3-70b --hardware h100-sxm --inference --context=8k --batch 2 --flash"
    assert main(command.split()[1:]) == 0
    fit = capsys.readouterr().out
    assert "engine: vllm" in fit.splitlines()[0]  # an inference fit (the serving engine's KV pool), not training
