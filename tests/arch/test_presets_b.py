"""The presets of gpt_neox, falcon, starcoder2, gpt_oss and llama4: transformers, published counts, the CLI.

Each preset's parameter count equals ``numel()`` of the transformers model built on ``meta`` from the
fields of its released ``config.json`` (copied below from the hub files the presets cite), and the
same config.json read by costmodel gives the preset's count. Published counts are checked where a
source prints one, exactly or to its rounding; where a model card only names a size ("7B"), the
tolerance is stated.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
import transformers

from costmodel import symbols
from costmodel.cli import main
from costmodel.families import load
from costmodel.graph.analysis import as_int, evaluate, totals
from costmodel.graph.passes import flash_attention


def estimate_json(*argv: str) -> dict:
    """``costmodel estimate ARGV --json``, through the command line's entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv, "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


PYTHIA = {
    "model_type": "gpt_neox",
    "rotary_pct": 0.25,
    "use_parallel_residual": True,
    "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
    "vocab_size": 50304,
}


def _pythia(layers: int, width: int, heads: int, **over) -> dict:
    return {
        **PYTHIA,
        "num_hidden_layers": layers,
        "hidden_size": width,
        "num_attention_heads": heads,
        "intermediate_size": 4 * width,
        **over,
    }


STARCODER2 = {
    "model_type": "starcoder2",
    "vocab_size": 49152,
    "sliding_window": 4096,
    "use_bias": True,
    "max_position_embeddings": 16384,
}
GPT_OSS = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "head_dim": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "sliding_window": 128,
    "attention_bias": True,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
LLAMA4 = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 202048,
    "num_experts_per_tok": 1,
    "attention_chunk_size": 8192,
    "tie_word_embeddings": False,
    "no_rope_layers": [],
    "max_position_embeddings": 10485760,
}

#: name -> the fields of its config.json that size the model
HF_CONFIGS = {
    "pythia-70m": _pythia(6, 512, 8),
    "pythia-160m": _pythia(12, 768, 12),
    "pythia-410m": _pythia(24, 1024, 16),
    "pythia-1b": _pythia(16, 2048, 8),
    "pythia-1.4b": _pythia(24, 2048, 16),
    "pythia-2.8b": _pythia(32, 2560, 32),
    "pythia-6.9b": _pythia(32, 4096, 32, vocab_size=50432),
    "pythia-12b": _pythia(36, 5120, 40, vocab_size=50688),
    "gpt-neox-20b": _pythia(44, 6144, 64, vocab_size=50432),
    "falcon-7b": {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "vocab_size": 65024,
        "multi_query": True,
        "parallel_attn": True,
        "bias": False,
        "alibi": False,
        "new_decoder_architecture": False,
    },
    "falcon-40b": {
        "model_type": "falcon",
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_kv_heads": 8,
        "num_hidden_layers": 60,
        "vocab_size": 65024,
        "new_decoder_architecture": True,
        "parallel_attn": True,
        "bias": False,
        "alibi": False,
    },
    "falcon-180b": {
        "model_type": "falcon",
        "hidden_size": 14848,
        "num_attention_heads": 232,
        "num_kv_heads": 8,
        "num_hidden_layers": 80,
        "vocab_size": 65024,
        "new_decoder_architecture": True,
        "parallel_attn": True,
        "bias": False,
        "alibi": False,
    },
    "falcon-rw-1b": {
        "model_type": "falcon",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_hidden_layers": 24,
        "vocab_size": 50304,
        "multi_query": False,
        "parallel_attn": False,
        "bias": True,
        "alibi": True,
        "new_decoder_architecture": False,
    },
    "starcoder2-3b": {
        **STARCODER2,
        "hidden_size": 3072,
        "intermediate_size": 12288,
        "num_hidden_layers": 30,
        "num_attention_heads": 24,
        "num_key_value_heads": 2,
    },
    "starcoder2-7b": {
        **STARCODER2,
        "hidden_size": 4608,
        "intermediate_size": 18432,
        "num_hidden_layers": 32,
        "num_attention_heads": 36,
        "num_key_value_heads": 4,
    },
    "starcoder2-15b": {
        **STARCODER2,
        "hidden_size": 6144,
        "intermediate_size": 24576,
        "num_hidden_layers": 40,
        "num_attention_heads": 48,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
    "gpt-oss-20b": {**GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32},
    "gpt-oss-120b": {**GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128},
    "llama4-scout": {**LLAMA4, "num_local_experts": 16, "interleave_moe_layer_step": 1, "use_qk_norm": True},
    "llama4-maverick": {
        **LLAMA4,
        "num_local_experts": 128,
        "interleave_moe_layer_step": 2,
        "use_qk_norm": False,
        "max_position_embeddings": 1048576,
    },
}


def counts(spec: str) -> dict[str, int]:
    m = load(spec)
    t = totals(m.graph)
    return {
        "total": as_int(evaluate(t.params, m.values), "params"),
        "active": as_int(evaluate(t.params_active, m.values), "active"),
    }


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_preset_params_equal_transformers(name):
    fields = dict(HF_CONFIGS[name])
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert counts(name)["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_config_json_gives_the_preset(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS[name]))
    assert counts(str(path)) == counts(name)


def test_published_counts():
    # Biderman et al. 2023 (Pythia), Table 1, "Non-Embedding Params": Pythia leaves out both tables,
    # the input embedding and the untied embed_out, so it is total − 2·V·d
    published = {
        "pythia-70m": 18_915_328,
        "pythia-160m": 85_056_000,
        "pythia-410m": 302_311_424,
        "pythia-1b": 805_736_448,
        "pythia-1.4b": 1_208_602_624,
        "pythia-2.8b": 2_517_652_480,
        "pythia-6.9b": 6_444_163_072,
        "pythia-12b": 11_327_027_200,
    }
    for name, non_embedding in published.items():
        fields = HF_CONFIGS[name]
        assert counts(name)["total"] - 2 * fields["vocab_size"] * fields["hidden_size"] == non_embedding, name
    # by hand, Pythia-70M: 6 layers × (4·512² attention + 4·512 biases of q, k, v, o + 2·4·512² MLP
    # + 4·512 + 512 MLP biases + 4·512 two LayerNorms) + 2·50304·512 tables + 2·512 final LayerNorm
    assert counts("pythia-70m")["total"] == 6 * (12 * 512**2 + 13 * 512) + 2 * 50304 * 512 + 2 * 512 == 70_426_624
    # OpenAI 2025, gpt-oss model card, Table 1: total 20.91B / 116.83B; active 3.61B / 5.13B, which leave
    # out the token table only (the untied unembedding is counted): params.active_non_embedding
    for name, total, active in (("gpt-oss-20b", 2091, 361), ("gpt-oss-120b", 11683, 513)):
        r = estimate_json(name)["params"]
        assert (round(r["total"] / 1e7), round(r["active_non_embedding"] / 1e7)) == (total, active), name
    # Meta 2025, Llama 4 model card: 17B active parameters; Maverick 400B total, Scout 109B total with
    # its vision encoder (the text model here is 107.8B of it)
    scout, maverick = counts("llama4-scout"), counts("llama4-maverick")
    assert round(scout["active"] / 1e9) == round(maverick["active"] / 1e9) == 17
    assert round(maverick["total"] / 1e9, -1) == 400 and 107e9 < scout["total"] < 109e9
    # model cards that name a size only: Falcon "7B", "40B", "180B"; StarCoder2 "3B", "7B", "15B" (the
    # 15B model is untied: 15.96B): within 7% of the name
    for name, size in (
        ("falcon-7b", 7),
        ("falcon-40b", 40),
        ("falcon-180b", 180),
        ("starcoder2-3b", 3),
        ("starcoder2-7b", 7),
        ("starcoder2-15b", 15),
    ):
        assert abs(counts(name)["total"] / (size * 1e9) - 1) < 0.07, name


def test_active_parameters_are_the_routed_top_k():
    # gpt-oss-120b: 124 of 128 experts idle per token in each of 36 layers; an expert is three
    # 2880 × 2880 matrices and its biases (2 · 2880 on gate and up, 2880 on down)
    oss = counts("gpt-oss-120b")
    assert oss["total"] - oss["active"] == 36 * 124 * (3 * 2880 * 2880 + 3 * 2880)
    # Llama 4 Maverick: 127 of 128 experts idle in each of its 24 MoE layers (3 · 5120 · 8192 each);
    # the router and the shared expert are always active
    mav = counts("llama4-maverick")
    assert mav["total"] - mav["active"] == 24 * 127 * 3 * 5120 * 8192


@pytest.mark.parametrize(
    "name", ["pythia-160m", "falcon-40b", "falcon-rw-1b", "starcoder2-3b", "gpt-oss-20b", "llama4-maverick"]
)
def test_cli_estimates_the_preset_and_its_config_json(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS[name]))
    preset, from_file = estimate_json(name), estimate_json(str(path))
    assert preset["params"] == from_file["params"]
    assert preset["source"] and preset["flops"]["training"] > preset["flops"]["matmul"]["training"] > 0


@pytest.mark.parametrize(
    "name",
    ["pythia-160m", "falcon-40b", "falcon-rw-1b", "starcoder2-3b", "gpt-oss-20b", "llama4-scout", "llama4-maverick"],
)
def test_flash_attention_fuses_every_layer_and_keeps_the_counts(name):
    m = load(name)
    G, H = m.graph, flash_attention(m.graph)
    fused = H.graph["rewritten"]["flash_attention"]
    assert len(fused) == len({n.rsplit(".", 2)[0] for n in G if n.endswith("attn.softmax")}) > 0
    t, u = totals(G), totals(H)
    values = {**m.values, symbols.B: 1, symbols.T: 4096}
    for a, b in (
        (t.params, u.params),
        (t.training.flops, u.training.flops),
        (t.training.matmul_flops, u.training.matmul_flops),
    ):
        assert evaluate(a, values) == evaluate(b, values)  # gpt-oss's sinks stay, in the fused op


def test_windowed_counts_change_only_the_sliding_layers():
    t = 8192
    dense = estimate_json("starcoder2-15b", "--seq", str(t))["flops"]["matmul"]["forward"]
    windowed = estimate_json("starcoder2-15b", "--seq", str(t), "--set", "window=4096")["flops"]["matmul"]["forward"]
    # scores and context, 2·h·d_head FLOPs per (query, key) each, over T − W fewer keys per query, 40 layers
    assert dense - windowed == 40 * 2 * 2 * 48 * 128 * t * (t - 4096)
    dense = estimate_json("gpt-oss-20b", "--seq", str(t))["flops"]["matmul"]["forward"]
    windowed = estimate_json("gpt-oss-20b", "--seq", str(t), "--set", "window=128")["flops"]["matmul"]["forward"]
    # only the 12 sliding layers (0, 2, ..., 22) meet fewer keys: 64 heads of 64
    assert dense - windowed == 12 * 2 * 2 * 64 * 64 * t * (t - 128)
