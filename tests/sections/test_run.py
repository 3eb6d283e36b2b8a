"""A run is prepared once (issue 24): the device and its stack are read before anything is derived, and the
attention pass is applied once per graph and implementation."""

import pytest

import costmodel
from costmodel import CostModelError, Options
from costmodel.memory.device import prepared
from costmodel.sections import run


def test_a_misspelt_stack_fails_before_anything_is_derived(monkeypatch):
    monkeypatch.setattr(run, "quantities", lambda *a, **k: pytest.fail("derived before the stack was checked"))
    with pytest.raises(CostModelError, match="unknown stack 'deepspeed'"):
        run.estimate_formulas("gpt2-small", None, Options(hardware="a100-80gb", stack="deepspeed"))
    with pytest.raises(CostModelError, match="unknown hardware 'h100'"):
        run.estimate_formulas("gpt2-small", None, Options(hardware="h100"))


def test_prepare_hands_down_the_device_with_its_stack():
    r = run.prepare("gpt2-small", None, Options(hardware="a100-80gb", stack="megatron-deepspeed"))
    assert r.device.name == "a100-80gb"
    # the stack's sustained factor, below the device default of 0.89 (devices/data/hardware.json)
    assert float(r.device.attained.sustained) < 0.89
    assert run.prepare("gpt2-small", None, Options()).device is None


def test_the_attention_pass_is_applied_once_per_graph():
    m = costmodel.load("gpt2-small")
    flash = Options(flash=True)
    first = prepared(m.graph, flash)
    assert prepared(m.graph, flash) is first
    assert first is not m.graph and first.graph["rewritten"]["flash_attention"]
    assert prepared(m.graph, Options()) is not first
