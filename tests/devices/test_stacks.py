"""A device's sustained factor per software stack: read from the table or a hardware file, chosen with
``--stack`` (estimate and plan), refused with one line when unknown; without it, the device's default."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from costmodel import CostModelError, Options
from costmodel.cli import main
from costmodel.devices.table import builtin, device, read_file, with_stack

DEFAULT = float(builtin()["a100-80gb"].attained.sustained)  # 0.89, fitted on Korthikanti et al.'s Table 5
DEEPSPEED = float(builtin()["a100-80gb"].attained.stacks["megatron-deepspeed"].sustained)


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_table_keeps_the_default_and_a_factor_per_stack_with_its_runs():
    a100 = builtin()["a100-80gb"].attained
    assert set(a100.stacks) == {"megatron-lm", "megatron-deepspeed"}
    for st in a100.stacks.values():
        assert 0 < st.sustained < 1 and st.source and len(st.fitted_on) >= 2
    assert not builtin()["h100-sxm"].attained.stacks  # NeMo and Llama 3: one source each, no factor
    dev = with_stack(device("a100-80gb"), "megatron-deepspeed")
    assert float(dev.attained.sustained) == DEEPSPEED and dev.name == "a100-80gb"
    assert with_stack(device("a100-80gb"), None) is device("a100-80gb")
    assert float(device("a100-80gb").attained.sustained) == DEFAULT  # the table's device is not changed


def test_an_unknown_stack_names_the_devices_stacks():
    with pytest.raises(
        CostModelError, match=r"unknown stack 'deepspeed' for a100-80gb \(did you mean 'megatron-deepspeed'"
    ):
        with_stack(device("a100-80gb"), "deepspeed")
    with pytest.raises(
        CostModelError, match="h100-sxm.*it has no stack factors.*other devices have megatron-deepspeed"
    ):
        with_stack(device("h100-sxm"), "megatron-deepspeed")


def _entry(**stacks):
    """A hardware file: the built-in A100 80GB entry as ``mine``, with these stacks."""
    text = resources.files("costmodel").joinpath("devices/data/hardware.json").read_text(encoding="utf-8")
    base = json.loads(text)["devices"]["a100-80gb"]
    base["efficiency"]["stacks"] = stacks
    return {"devices": {"mine": base}}


def test_a_hardware_file_adds_its_own_stack(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_entry(mine={"sustained": "0.5", "source": "my runs", "fitted_on": ["a", "b"]})))
    dev = with_stack(read_file(path)["mine"], "mine")
    assert float(dev.attained.sustained) == 0.5 and dev.attained.stacks["mine"].fitted_on == ("a", "b")
    bad = (
        ({"x": {"sustained": "1.5", "source": "s"}}, "out of range"),
        ({"x": {"sustained": "0.5"}}, "expected a sustained factor and its source"),
        ({"x y": {"sustained": "0.5", "source": "s"}}, "a stack's name is"),
        ({"x": {"sustained": "0.5", "source": "s", "fitted_on": "a"}}, "fitted_on: expected a list"),
        ({"x": {"sustained": "0.5", "source": "s", "fited_on": []}}, "unknown field 'fited_on'"),
    )
    for stacks, message in bad:
        path.write_text(json.dumps(_entry(**stacks)))
        with pytest.raises(CostModelError, match=message):
            read_file(path)


def test_a_stack_needs_a_device_and_the_calibrated_step():
    with pytest.raises(CostModelError, match="give --hardware"):
        Options.make(stack="megatron-lm")
    for other in ({"mfu": "0.5"}, {"time_model": "roofline"}):
        with pytest.raises(CostModelError, match="stack chooses the sustained factor"):
            Options.make(stack="megatron-lm", hardware="a100-80gb", **other)


ARGV = ("estimate", "gpt3-175b", "--batch", "8", "--seq", "2048", "--hardware", "a100-80gb", "--json")


def test_estimate_with_a_stack_scales_a_compute_bound_step_by_the_factors_ratio(capsys):
    code, out, _ = run(capsys, *ARGV)
    default = json.loads(out)["time"]
    code2, out2, _ = run(capsys, *ARGV, "--stack", "megatron-deepspeed")
    chosen = json.loads(out2)["time"]
    assert code == code2 == 0
    assert "stack" not in default and chosen["stack"] == "megatron-deepspeed"  # the key only when chosen
    # one device, no communication: every kernel's time is divided by the factor but for its launch overhead
    assert chosen["step_s"] / default["step_s"] == pytest.approx(DEFAULT / DEEPSPEED, rel=1e-3)
    assert chosen["roofline_step_s"] == default["roofline_step_s"]  # the bound does not depend on software
    code, out, _ = run(capsys, *ARGV[:-1], "--stack", "megatron-deepspeed")
    assert code == 0 and "the megatron-deepspeed stack's sustained factor" in out


def test_estimate_refuses_an_unknown_stack_in_one_line(capsys):
    code, out, err = run(capsys, *ARGV, "--stack", "deepsped")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "did you mean 'megatron-deepspeed'" in err and "its stacks: megatron-deepspeed, megatron-lm" in err


def test_plan_with_a_stack(capsys):
    tiny = ("--set", "L=4", "--set", "d=64", "--set", "h=4", "--set", "V=100", "--set", "T_max=256")
    argv = ["plan", "gpt", *tiny, "--hardware", "a100-80gb", "--devices", "8", "--batch", "16", "--seq", "256"]
    assert main([*argv, "--top", "1", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*argv, "--top", "1", "--json", "--stack", "megatron-deepspeed", "--verify"]) == 0
    chosen = json.loads(capsys.readouterr().out)
    assert "stack" not in default and chosen["stack"] == "megatron-deepspeed"
    best = chosen["layouts"][0]
    assert best["step_s"] > default["layouts"][0]["step_s"]  # a slower stack: every layout slower
    assert best["step_s"] == pytest.approx(best["verified"]["step_s"], rel=0.02)  # estimate's step with the stack
    assert main([*argv, "--stack", "nemo"]) == 2
    assert "unknown stack 'nemo' for a100-80gb" in capsys.readouterr().err


def test_calibrate_keeps_the_base_devices_stacks():
    from costmodel.devices.table import parse_table
    from costmodel.verbs.calibrate import calibrate  # the kernel fit, only for this test

    bw = 2.039e12 * 0.85  # copies at 85 % of the bandwidth, 6 us each
    rows = [{"kind": "memory", "bytes": float(n), "seconds": n / bw + 6e-6} for n in (1e6, 1e8, 1e9)]
    mine = parse_table(calibrate(rows, device("a100-80gb"), name="mine"), "calibrated")["mine"]
    assert float(with_stack(mine, "megatron-deepspeed").attained.sustained) == DEEPSPEED
    assert (
        mine.attained.stacks["megatron-lm"].fitted_on == builtin()["a100-80gb"].attained.stacks["megatron-lm"].fitted_on
    )


def test_hardware_name_lists_the_stacks(capsys):
    code, out, _ = run(capsys, "hardware", "a100-80gb")
    assert code == 0 and f"megatron-deepspeed   {DEEPSPEED:g}, fitted on 4 runs" in out
    code, out, _ = run(capsys, "hardware", "h100-sxm")
    assert code == 0 and "--stack" not in out  # no stack factors, no lines


def test_hardware_json_lists_each_devices_default_and_stacks(capsys):
    """``hardware --json`` (an added key, ``sustained``) gives what ``hardware.json`` says, for every device."""
    raw = json.loads(resources.files("costmodel").joinpath("devices/data/hardware.json").read_text(encoding="utf-8"))
    code, out, _ = run(capsys, "hardware", "--json")
    assert code == 0
    shown = json.loads(out)["devices"]
    for name, entry in raw["devices"].items():
        eff = entry.get("efficiency", {})
        got = shown[name]["sustained"]
        assert got["default"] == float(eff.get("sustained", 1))
        want = {k: (float(v["sustained"]), v["fitted_on"]) for k, v in eff.get("stacks", {}).items()}
        assert {k: (v["sustained"], v["fitted_on"]) for k, v in got["stacks"].items()} == want
    assert set(shown["a100-80gb"]["sustained"]["stacks"]) == {"megatron-lm", "megatron-deepspeed"}
