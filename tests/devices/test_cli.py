"""The CLI's time keys and roofline command (the issue's 'done when' commands, with a GPT preset)."""

import json

import pytest

from costmodel.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_estimate_gpt3_on_h100_says_25_years(capsys):
    code, out, _ = run(
        capsys, "estimate", "gpt3-175b", "--tokens", "3e11", "--hardware", "h100-sxm", "--achieved-tflops", "400"
    )
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("  training "))
    assert "25.6 years" in line  # exact count; 6ND alone gives 24.8 (the lecture's ≈ 25)
    assert "24.8 years" in out


def test_estimate_json_time_keys(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "gpt3-175b",
        "--tokens",
        "3e11",
        "--hardware",
        "a100-80gb",
        "--devices",
        "1024",
        "--mfu",
        "0.5",
        "--json",
    )
    r = json.loads(out)
    assert code == 0
    for key in ("step_s", "training_s", "tokens_per_s", "gpu_hours", "peak_flops", "devices"):
        assert key in r["time"]
    assert r["mfu"] == pytest.approx(0.5) and isinstance(r["time"]["peak_flops"], int)
    assert isinstance(r["flops"]["training_total"], int)  # counts stay exact


def test_estimate_without_hardware_has_no_time(capsys):
    code, out, _ = run(capsys, "estimate", "gpt2-small", "--json")
    assert code == 0 and "time" not in json.loads(out)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["estimate", "gpt2-small", "--hardware", "h100"], "did you mean 'h100-sxm'"),
        (["estimate", "gpt2-small", "--mfu", "0.5"], "needs a device"),
        (
            ["estimate", "gpt2-small", "--hardware", "h100-sxm", "--mfu", "0.5", "--achieved-tflops", "400"],
            "not allowed with argument",
        ),
        (["roofline", "gpt2-small", "--hardware", "h100-sxm", "--context", "10"], "give --decode too"),
        (["roofline", "gpt2-small", "--hardware", "h100-sxm", "--plot", "x.gif"], "expected a name ending in"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_roofline_decode_all_memory_bound_with_plot(capsys, tmp_path):
    png = tmp_path / "r.png"
    code, out, _ = run(
        capsys,
        "roofline",
        "gpt3-6.7b",
        "--hardware",
        "h100-sxm",
        "--decode",
        "--context",
        "4096",
        "--plot",
        str(png),
        "--json",
    )
    r = json.loads(out)
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert r["mode"] == "decode" and all(o["bound"] == "memory" for o in r["ops"])
    assert r["decode"]["latency_per_token_s"] == pytest.approx(r["total"]["time_s"])
    assert 4.6e-3 < r["decode"]["latency_per_token_s"] < 4.7e-3  # (13.30 GB + 2.15 GB) / 3.35 TB/s = 4.61 ms


def test_roofline_prefill_text(capsys):
    code, out, _ = run(capsys, "roofline", "gpt3-6.7b", "--hardware", "h100-sxm", "--seq", "2048")
    assert code == 0
    fc = next(l for l in out.splitlines() if l.startswith("layers.mlp.fc"))
    assert "compute" in fc
    assert "FlashAttention" in out and "time to first token" in out


def test_roofline_training_json(capsys):
    code, out, _ = run(
        capsys,
        "roofline",
        "gpt2-small",
        "--hardware",
        "a100-80gb",
        "--phase",
        "training",
        "--fuse",
        "--flash",
        "--json",
    )
    r = json.loads(out)
    assert code == 0 and r["passes"] == ["flash_attention", "fuse_elementwise"]
    assert r["variants"]["flash_bytes_saved"] > 0 and r["variants"]["fusion_bytes_saved"] > 0


def test_estimate_plot_memory(capsys, tmp_path):
    svg = tmp_path / "m.svg"
    code, _, _ = run(capsys, "estimate", "gpt2-small", "--hardware", "a100-40gb", "--plot-memory", str(svg))
    text = svg.read_text()
    assert code == 0 and "optimizer" in text and "capacity 40 GB" in text


def test_roofline_checks_sizes(capsys):
    code, _, err = run(capsys, "roofline", "gpt2-small", "--hardware", "h100-sxm", "--set", "h=7")
    assert code == 2 and "not a positive whole number" in err
