"""``costmodel check MODEL --against transformers`` (issue 26): a built-in family against the transformers module
of the same config, at drawn sizes — parameters by ``numel``, matmul FLOPs by ``FlopCounterMode`` on meta."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import costmodel
from costmodel import CostModelError
from costmodel.families import families
from costmodel.families.hf import read_json
from costmodel.families.hf_reading import read
from costmodel.testing.hf import TERMS as HF_TERMS
from costmodel.testing.hf import against, config_path, derived_fields, field_map, module_class
from costmodel.testing.pytorch import torch_counts
from costmodel.testing.subject import subject

ROOT = Path(__file__).resolve().parents[2]


#: Every built-in family is expected to pass (docs/verify.md's table, scripts/families_check.py); none is slow
#: (a few seconds each at 3 examples: the modules are counted on meta, Jamba's on CPU at tiny sizes).
FAMILIES = list(families())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_matches_its_transformers_module(family):
    report = costmodel.check(family, against="transformers", examples=3)
    assert report.passed, report.text()
    compared = [p.name for p in report.properties if "numel" in p.name or "FlopCounterMode" in p.name]
    assert len(compared) == 3  # params = numel, matmul FLOPs forward, forward + backward
    assert all(p.tried for p in report.properties if p.name in compared)  # compared at drawn sizes, not skipped


@pytest.mark.parametrize(
    "family, cls",
    [
        ("llama", "LlamaForCausalLM"),
        ("bert", "BertForMaskedLM"),  # the family's masked-LM head, not the causal BertLMHeadModel
        ("roberta", "RobertaForMaskedLM"),
        ("t5", "T5ForConditionalGeneration"),  # no causal LM: the encoder-decoder LM
        ("vit", "ViTForImageClassification"),  # the classifier head the family reads without architectures
    ],
)
def test_the_module_is_the_class_the_family_describes(family, cls):
    cfg, _ = read(read_json(config_path(family)), {t: None for t in families()[family].hf_model_types}, "test")
    assert module_class(families()[family], cfg, "test")[0] == cls
    # a file naming its class: that class, where the family reads it (the bare encoder: its pooler head)
    assert module_class(families()[family], {**cfg, "architectures": [cls]}, "test")[0] == cls
    if family == "bert":
        assert module_class(families()["bert"], {**cfg, "architectures": ["BertModel"]}, "test") == (
            "BertModel",
            "base",
        )


def test_the_fields_that_set_each_symbol_are_found_by_the_family():
    path = config_path("llama")
    cfg, _ = read(read_json(path), {"llama": None}, "test")
    fields, follows = field_map(families()["llama"], cfg)
    # llama reads d/h as its head width: head_dim follows hidden_size / num_attention_heads
    assert follows and fields["d"] == ["hidden_size"] and fields["h"] == ["num_attention_heads"]
    assert fields["n_kv"] == ["num_key_value_heads"] and fields["d_ff"] == ["intermediate_size"]


@pytest.mark.parametrize("family", ["gemma3", "qwen3", "gpt_oss"])
def test_a_layer_count_with_per_layer_lists_is_drawn(family):
    # layer_types has one entry a layer: changing num_hidden_layers alone is refused, so the lists follow it
    fam = families()[family]
    cfg, _ = read(read_json(config_path(family)), {t: None for t in fam.hf_model_types}, "test")
    assert isinstance(cfg.get("layer_types"), list)
    assert field_map(fam, cfg)[0]["L"] == ["num_hidden_layers"]


def test_the_docs_table_lists_every_family_and_each_passes():
    data = json.loads((ROOT / "tests" / "data" / "families_check.json").read_text(encoding="utf-8"))
    rows = {r["family"]: r for r in data["families"]}
    assert sorted(rows) == sorted(families())  # rerun scripts/families_check.py after adding a family
    assert {n: r["result"] for n, r in rows.items() if r["result"] != "pass"} == {}


SIZES = dict(B=1, T=2, L=2, V=4, d=8, h=4, d_nope=1, d_rope=2, d_v=1, r_kv=1, r_q=1, d_ff=1, d_expert=1)
SIZES.update(n_experts=2, top_k=1, n_shared=1)


def test_a_derived_field_follows_the_drawn_sizes():
    """DeepSeek-V3's ``qk_head_dim`` (nope + RoPE widths) and ``head_dim`` (the RoPE width) are computed by its
    config class: at drawn sizes they follow, not the small file's 16 and 8 (which broke its attention)."""
    import torch

    path = config_path("deepseek_v3")
    cfg, _ = read(read_json(path), {"deepseek_v3": None}, "test")
    assert {"qk_head_dim", "head_dim"} <= derived_fields(cfg, "test")
    _, factory, _, _ = against(path, {str(x) for x in subject(path).graph_symbols})
    with torch.device("meta"):
        module, _ = factory.fn(**SIZES, L_dense=1)
    c = module.config
    assert (c.qk_head_dim, c.head_dim) == (1 + 2, 2)
    assert c.num_key_value_heads == c.num_attention_heads == 4  # MLA: a key per head, none repeated


def test_jamba_counts_on_cpu_where_meta_cannot_run_it():
    # transformers' recurrent mask reads the attention mask's data (torch.all(mask == 1)): no meta run
    path = config_path("jamba")
    s = subject(path)
    _, factory, pinned, _ = against(path, {str(x) for x in s.graph_symbols})
    sizes = {**pinned, "B": 1, "T": 3, "V": 5, "d_ff": 2, "d_state": 2, "d_conv": 2, "dt_rank": 2}
    sizes.update(n_experts=2, top_k=1)
    counts = torch_counts(factory, sizes, HF_TERMS)
    assert counts["device"] == "cpu"
    assert counts["off"]["flops.matmul.forward"] > 0  # the padded convolution, stated in the report


def test_jamba_draws_two_experts_or_more():
    # one expert is transformers' JambaMLP (no router): a MoE graph requires n_experts >= 2
    report = costmodel.check("jamba", against="transformers", examples=3)
    assert report.passed and all(p.tried for p in report.properties[:1])
    assert min(v["n_experts"] for p in report.properties for v in p.tried if "n_experts" in v) >= 2


def test_the_report_states_the_convention_and_the_module():
    report = costmodel.check("llama4", against="transformers", examples=1)
    assert report.module == "transformers Llama4ForCausalLM"
    assert [c.split(" ")[0] for c in report.conventions] == ["Llama4TextMoe"]
    text = report.text()
    assert "module: transformers Llama4ForCausalLM" in text and "convention: Llama4TextMoe runs every token" in text
    assert json.loads(report.to_json())["conventions"] == report.conventions


def test_a_family_transformers_has_no_module_for_is_one_line_exit_2(tmp_path):
    # a vit config naming a class the family does not read: the family refuses it, one line
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**read_json(config_path("vit")), "architectures": ["ViTForMaskedImageModeling"]}))
    out = subprocess.run(
        [sys.executable, "-m", "costmodel", "check", str(path), "--against", "transformers", "--examples", "1"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "architectures" in out.stderr
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


def test_no_class_the_family_reads_is_one_clear_error():
    class OnlyItsOwnHead:  # a family refusing every transformers class named in architectures
        @staticmethod
        def from_hf(cfg):
            if "architectures" in cfg:
                raise CostModelError("architectures not supported")
            return {}

    with pytest.raises(CostModelError, match="no module of model_type 'llama' that the family describes"):
        module_class(OnlyItsOwnHead, {"model_type": "llama"}, "test")


@pytest.mark.slow  # its modules run on CPU (Jamba reads its mask's data): ~30 s on a busy machine
def test_a_jamba_with_attention_and_moe_layers_matches(tmp_path):
    # the small family config has no attention layer (L = 2 < the offset 4): a config.json with both kinds
    fields = {"model_type": "jamba", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4}
    fields.update(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, intermediate_size=16, vocab_size=64)
    fields.update(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0)
    fields.update(max_position_embeddings=64, mamba_dt_rank=4, mamba_d_state=6, mamba_d_conv=3, mamba_expand=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    report = costmodel.check(str(path), against="transformers", examples=2)
    assert report.passed, report.text()
    assert any("conv1d" in c for c in report.conventions)
