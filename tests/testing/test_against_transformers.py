"""``costmodel check MODEL --against transformers`` (issue 26): a built-in family against the transformers module
of the same config, at drawn sizes — parameters by ``numel``, matmul FLOPs by ``FlopCounterMode`` on meta."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import costmodel
from costmodel import CostModelError
from costmodel.families import families
from costmodel.families.hf import read_json
from costmodel.families.hf_reading import read
from costmodel.testing.hf import config_path, field_map


@pytest.mark.parametrize("family", ["llama", "gpt"])
def test_a_family_matches_its_transformers_module(family):
    report = costmodel.check(family, against="transformers", examples=3)
    assert report.passed, report.text()
    compared = [p.name for p in report.properties if "numel" in p.name or "FlopCounterMode" in p.name]
    assert len(compared) == 3  # params = numel, matmul FLOPs forward, forward + backward


def test_the_fields_that_set_each_symbol_are_found_by_the_family():
    path = config_path("llama")
    cfg, _ = read(read_json(path), {"llama": None}, "test")
    fields, follows = field_map(families()["llama"], cfg)
    # llama reads d/h as its head width: head_dim follows hidden_size / num_attention_heads
    assert follows and fields["d"] == ["hidden_size"] and fields["h"] == ["num_attention_heads"]
    assert fields["n_kv"] == ["num_key_value_heads"] and fields["d_ff"] == ["intermediate_size"]


def test_a_model_transformers_has_no_causal_lm_for_is_one_line_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "costmodel", "check", "vit", "--against", "transformers", "--examples", "1"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no causal LM" in out.stderr
    with pytest.raises(CostModelError, match="no config.json and no family"):
        costmodel.check("gpt2-small", against="transformers", examples=1)


MODULE = """
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 64)
        self.down = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def factory():
    with torch.device("meta"):
        return MLP(), {"x": torch.zeros(2, 8, 16, device="meta")}
"""


def test_a_module_factory_is_a_model_every_verb_and_check_take(tmp_path):
    """``file.py:factory`` returning (module, example_inputs) is traced (leading dimensions B, T)."""
    (tmp_path / "mlp.py").write_text(MODULE)
    spec = f"{tmp_path / 'mlp.py'}:factory"
    r = costmodel.estimate(spec, batch=2, seq=8)
    assert r["params"]["total"] == 16 * 64 + 64 + 64 * 16 + 16  # = 2,128, the module's numel
    assert r["flops"]["matmul"]["forward"] == 2 * 2 * 8 * (16 * 64 + 64 * 16)  # = 65,536
    assert costmodel.check(spec, examples=2).passed


def test_without_torch_the_error_names_the_extra(monkeypatch):
    from costmodel.families import hf as hf_config

    monkeypatch.setattr(hf_config, "can_trace", lambda: False)
    with pytest.raises(CostModelError, match=r"needs torch and transformers: pip install 'costmodel\[torch\]'"):
        costmodel.check("llama", against="transformers", examples=1)
