"""The CLI contract: commands, JSON keys, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from costmodel.cli import main

REQUIRED_KEYS = [
    "params.total",
    "params.embedding",
    "params.non_embedding",
    "flops.forward",
    "flops.backward",
    "flops.training",
    "flops.training_total",
    "flops.six_nd",
    "flops.matmul.forward",
    "flops.matmul.backward",
    "flops.matmul.training",
    "memory_bytes.params",
    "memory_bytes.grads",
    "memory_bytes.optimizer",
    "memory_bytes.activations",
    "memory_bytes.total",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_has_the_contract_keys_as_exact_integers(capsys):
    code, out, _ = run(capsys, "estimate", "gpt3-175b", "--tokens", "3e11", "--json")
    assert code == 0
    r = json.loads(out)
    for key in REQUIRED_KEYS:
        node = r
        for part in key.split("."):
            node = node[part]
        assert isinstance(node, int) and not isinstance(node, bool), key
    assert r["flops"]["six_nd"] == 6 * r["params"]["non_embedding"] * 300_000_000_000


def test_estimate_text_shows_six_nd_share_and_units(capsys):
    code, out, _ = run(capsys, "estimate", "gpt3-175b", "--tokens", "3e11")
    assert code == 0
    # 6ND with N = 12·96·12288² + 13·96·12288 + 2·12288 = 173,961,535,488 and D = 3e11
    six_nd = 6 * (12 * 96 * 12288**2 + 13 * 96 * 12288 + 2 * 12288) * 300_000_000_000
    code, js, _ = run(capsys, "estimate", "gpt3-175b", "--tokens", "3e11", "--json")
    total = json.loads(js)["flops"]["training_total"]  # the text shows the same numbers the JSON holds
    assert f"{total:.3e} FLOPs" in out and f"6ND = {six_nd:.3e} covers {100 * six_nd / total:.1f}%" in out
    assert "GB (" in out and "GiB)" in out


def test_derive_latex_and_text(capsys):
    code, out, _ = run(capsys, "derive", "gpt", "--format", "latex")
    assert code == 0 and r"\begin{align*}" in out and r"\toprule" in out and "T_{max}" in out
    code, out, _ = run(capsys, "derive", "gpt")
    assert code == 0 and "flops.training" in out


def test_models_lists_presets_with_counts(capsys):
    code, out, _ = run(capsys, "models", "--json")
    rows = {r["name"]: r for r in json.loads(out)["presets"]}
    assert code == 0 and rows["gpt2-small"]["params"] == 124_439_808


def test_set_overrides_symbols_and_options(capsys):
    code, out, _ = run(capsys, "estimate", "gpt2-small", "--set", "L=6", "--set", "tied=false", "--json")
    assert code == 0
    # 6 layers of 7,087,872 + wte, wpe, ln_f + an untied 768 × 50257 unembedding
    assert json.loads(out)["params"]["total"] == 6 * 7_087_872 + 50257 * 768 + 1024 * 768 + 2 * 768 + 768 * 50257


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["estimate", "gpt2-smal"], "did you mean 'gpt2-small'"),
        (["estimate", "gpt2-small", "--batch", "0"], "--batch"),
        (["estimate", "gpt2-small", "--tokens", "abc"], "--tokens"),
        (["estimate", "gpt2-small", "--set", "foo=1"], "unknown setting 'foo'"),
        (["estimate", "gpt2-small", "--set", "d_ff"], "expected NAME=VALUE"),
        (["estimate", "gpt2-small", "--set", "d_ff=__import__('os')"], "unexpected"),
        (["estimate", "gpt2-small", "--bogus"], "unrecognized arguments"),
        (["estimate", "gpt2-small", "--set", "h=5"], "not a positive whole number"),
        (["estimate", "gpt2-small", "--set", "d=-4"], "positive"),
        (["derive", "nope"], "unknown model"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_on_stderr_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("costmodel: error:") and fragment in err
    assert "Traceback" not in err


def test_console_script_and_module_entry_points():
    for cmd in (["costmodel"], [sys.executable, "-m", "costmodel"]):
        done = subprocess.run([*cmd, "estimate", "gpt2-small", "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["params"]["total"] == 124_439_808
    bad = subprocess.run(
        [sys.executable, "-m", "costmodel", "estimate", "nope"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1


def test_huge_model_stays_exact_in_json(capsys):
    # 10,000 layers of width 1e6: N = 12·L·d² + 13·L·d + 2·d, far beyond float64's 2^53 exact range
    code, out, _ = run(
        capsys,
        "estimate",
        "gpt",
        "--set",
        "L=10000",
        "--set",
        "d=1e6",
        "--set",
        "h=1000",
        "--set",
        "T_max=4096",
        "--seq",
        "4096",
        "--tokens",
        "1e13",
        "--json",
    )
    assert code == 0
    r = json.loads(out)
    n = 12 * 10_000 * 10**12 + 13 * 10_000 * 10**6 + 2 * 10**6
    assert r["params"]["non_embedding"] == n == 120_000_130_002_000_000
    assert r["flops"]["six_nd"] == 6 * n * 10**13
    assert isinstance(r["flops"]["training_total"], int)
    assert r["flops"]["training_total"] % 10**13 == 0  # per-token FLOPs (an integer) × D


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama2-7b", "--inference", "--context", "128"],
        ["estimate", "llama2-7b", "--inference", "--context", "128", "--hardware", "h100-sxm", "--devices", "2"],
        ["estimate", "gpt2-small", "--hardware", "h100-sxm", "--devices", "8", "--mfu", "0.4"],
        ["estimate", "mixtral-8x7b", "--seq", "256", "--batch", "8", "--dp", "2", "--ep", "2", "--zero", "1"],
    ],
)
def test_text_reports_of_every_mode(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "memory" in out and "total" in out
