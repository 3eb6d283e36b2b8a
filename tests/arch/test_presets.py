"""Preset parameter counts equal the real models.

Each preset is checked three ways: against ``numel()`` of the transformers model
built on the ``meta`` device from the fields of the released ``config.json``
(copied below from the Hugging Face hub files the presets cite), against the
same config.json read by costmodel, and, where a count is published, against it.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from costmodel.families import load
from costmodel.graph.analysis import as_int, evaluate, totals
from costmodel.verbs.estimate import estimate

LLAMA = {"model_type": "llama", "max_position_embeddings": 4096, "tie_word_embeddings": False}
#: name -> the fields of its config.json that size the model
HF_CONFIGS = {
    "llama1-7b": {
        **LLAMA,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
    "llama1-65b": {
        **LLAMA,
        "hidden_size": 8192,
        "intermediate_size": 22016,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
    "llama2-7b": {
        **LLAMA,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
    },
    "llama2-13b": {
        **LLAMA,
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
        "vocab_size": 32000,
    },
    "llama2-70b": {
        **LLAMA,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
    },
    "llama3-8b": {
        **LLAMA,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    },
    "llama3-70b": {
        **LLAMA,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    },
    "llama3-405b": {
        **LLAMA,
        "hidden_size": 16384,
        "intermediate_size": 53248,
        "num_hidden_layers": 126,
        "num_attention_heads": 128,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "mistral-7b": {
        **LLAMA,
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
    },
    "mixtral-8x7b": {
        **LLAMA,
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 32768,
    },
    "qwen2-7b": {
        **LLAMA,
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
    },
    **{
        f"mamba-{name}": {
            "model_type": "mamba",
            "vocab_size": 50280,
            "state_size": 16,
            "expand": 2,
            "conv_kernel": 4,
            "time_step_rank": "auto",
            "use_bias": False,
            "use_conv_bias": True,
            "tie_word_embeddings": True,
            "hidden_size": width,
            "num_hidden_layers": layers,
        }
        for name, width, layers in (
            ("130m", 768, 24),
            ("370m", 1024, 48),
            ("790m", 1536, 48),
            ("1.4b", 2048, 48),
            ("2.8b", 2560, 64),
        )
    },
    **{
        name: {
            "model_type": "jamba",
            "vocab_size": 65536,
            "num_key_value_heads": 8,
            "num_experts": 16,
            "num_experts_per_tok": 2,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "attn_layer_period": 8,
            "attn_layer_offset": 4,
            "mamba_d_state": 16,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "mamba_dt_rank": "auto",
            "mamba_conv_bias": True,
            "mamba_proj_bias": False,
            "tie_word_embeddings": False,
            "max_position_embeddings": 262144,
            "hidden_size": width,
            "intermediate_size": d_ff,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
        }
        for name, width, d_ff, layers, heads in (
            ("jamba-v0.1", 4096, 14336, 32, 32),
            ("jamba-1.5-large", 8192, 24576, 72, 64),
        )
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "first_k_dense_replace": 3,
        "n_group": 8,
        "topk_group": 4,
        "tie_word_embeddings": False,
    },
}


def preset_params(name: str) -> int:
    m = load(name)
    return as_int(evaluate(totals(m.graph).params, m.values), "params")


def test_every_preset_is_checked():
    import importlib.util
    import pathlib

    from costmodel.families import presets

    spec = importlib.util.spec_from_file_location("_test_hf_tables", pathlib.Path(__file__).parent / "test_hf.py")
    test_hf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test_hf)
    sibling_tables = test_hf.sibling_tables  # each family group's presets are in its own test_presets*.py
    arch = {n for n, p in presets().items() if p.family != "gpt"}  # gpt: tests/arch/test_gpt_vs_torch.py
    checked = {name for table in sibling_tables("test_presets*.py", "HF_CONFIGS") for name in table}
    assert arch == checked | {"mistral-7b-swa"}


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_preset_params_equal_transformers(name):
    fields = dict(HF_CONFIGS[name])
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert preset_params(name) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_config_json_gives_the_preset(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS[name]))
    assert estimate(str(path))["params"]["total"] == preset_params(name)


def test_published_counts():
    # Meta's model cards: Llama-3-8B has 8,030,261,248 parameters, LLaMA-2-7B 6,738,415,616
    assert preset_params("llama3-8b") == 8_030_261_248
    assert preset_params("llama2-7b") == 6_738_415_616
    # 7B, by hand: 32 layers × (4·4096² attention + 3·4096·11008 MLP + 2·4096 norms)
    # + 2·32000·4096 (embedding and untied unembedding) + 4096 (final norm)
    assert preset_params("llama2-7b") == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert preset_params("llama1-7b") == preset_params("llama2-7b")  # same shape, longer context for 2
    assert preset_params("mistral-7b-swa") == preset_params("mistral-7b")  # the window changes FLOPs only


def test_published_active_counts():
    # Mixtral of Experts (Jiang et al. 2024), section 2: "47B" total, "13B active"; Mistral AI's
    # announcement gives 46.7B total and 12.9B used per token
    mix = estimate("mixtral-8x7b")["params"]
    assert round(mix["total"] / 1e8) == 467 and round(mix["active"] / 1e8) == 129
    # the inactive part is 6 of 8 experts in each of 32 layers: 32 · 6 · 3·4096·14336
    assert mix["total"] - mix["active"] == 32 * 6 * 3 * 4096 * 14336
    # DeepSeek-V3 Technical Report, abstract: 671B total, 37B activated per token
    ds = estimate("deepseek-v3")["params"]
    assert round(ds["total"] / 1e9) == 671 and int(ds["active"] / 1e9) == 37
    assert ds["active_non_embedding"] == ds["active"] - 129280 * 7168  # only the input table is "embedding"
