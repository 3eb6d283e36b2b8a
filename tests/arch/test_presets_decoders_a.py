"""The Gemma, Phi-3, Qwen3 and OLMo 2 presets equal the released models, and their published counts.

As in ``test_presets.py``: each preset is checked against ``numel()`` of the transformers model built
on ``meta`` from the fields of the released ``config.json`` (below, from the Hugging Face hub files
the presets cite), against the same config.json read by costmodel, and against published counts
with their source. Where a window bounds the cache, the KV cache of a prefill longer than the window
equals transformers' cache object.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from costmodel.families import load
from costmodel.graph.analysis import as_int, evaluate, totals
from costmodel.verbs.estimate import estimate

G1 = {
    "model_type": "gemma",
    "head_dim": 256,
    "hidden_act": "gelu",
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
}
G2 = {
    "model_type": "gemma2",
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
}
G3 = {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "query_pre_attn_scalar": 256,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}
P3 = {
    "model_type": "phi3",
    "vocab_size": 32064,
    "max_position_embeddings": 4096,
    "sliding_window": 2047,
    "pad_token_id": 32000,
    "tie_word_embeddings": False,
}
Q3 = {
    "model_type": "qwen3",
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "num_key_value_heads": 8,
    "use_sliding_window": False,
    "sliding_window": None,
}
QM = {
    **Q3,
    "model_type": "qwen3_moe",
    "num_key_value_heads": 4,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "tie_word_embeddings": False,
}
O2 = {
    "model_type": "olmo2",
    "vocab_size": 100352,
    "max_position_embeddings": 4096,
    "pad_token_id": 100277,
    "eos_token_id": 100257,
    "tie_word_embeddings": False,
}


def shape(L: int, d: int, h: int, kv: int, ff: int, **more: object) -> dict:
    return {
        "num_hidden_layers": L,
        "hidden_size": d,
        "num_attention_heads": h,
        "num_key_value_heads": kv,
        "intermediate_size": ff,
        **more,
    }


#: name -> the fields of its config.json that size the model
HF_CONFIGS = {
    "gemma-2b": {**G1, **shape(18, 2048, 8, 1, 16384)},
    "gemma-7b": {**G1, **shape(28, 3072, 16, 16, 24576)},
    "gemma2-2b": {**G2, **shape(26, 2304, 8, 4, 9216)},
    "gemma2-9b": {**G2, **shape(42, 3584, 16, 8, 14336)},
    "gemma2-27b": {**G2, **shape(46, 4608, 32, 16, 36864, head_dim=128, query_pre_attn_scalar=144)},
    "gemma3-1b": {
        **G3,
        **shape(
            26,
            1152,
            4,
            1,
            6912,
            vocab_size=262144,
            sliding_window=512,
            rope_scaling=None,
            max_position_embeddings=32768,
        ),
    },
    "gemma3-4b": {**G3, **shape(34, 2560, 8, 4, 10240)},
    "gemma3-12b": {**G3, **shape(48, 3840, 16, 8, 15360)},
    "gemma3-27b": {**G3, **shape(62, 5376, 32, 16, 21504, head_dim=128, query_pre_attn_scalar=168)},
    "phi3-mini-4k": {**P3, **shape(32, 3072, 32, 32, 8192)},
    "phi3-medium-4k": {**P3, **shape(40, 5120, 40, 10, 17920)},
    "phi4": {
        **P3,
        **shape(
            40,
            5120,
            40,
            10,
            17920,
            vocab_size=100352,
            max_position_embeddings=16384,
            sliding_window=None,
            pad_token_id=100257,
        ),
    },
    "qwen3-0.6b": {**Q3, **shape(28, 1024, 16, 8, 3072, tie_word_embeddings=True, max_window_layers=28)},
    "qwen3-1.7b": {**Q3, **shape(28, 2048, 16, 8, 6144, tie_word_embeddings=True, max_window_layers=28)},
    "qwen3-4b": {**Q3, **shape(36, 2560, 32, 8, 9728, tie_word_embeddings=True, max_window_layers=36)},
    "qwen3-8b": {**Q3, **shape(36, 4096, 32, 8, 12288, tie_word_embeddings=False, max_window_layers=36)},
    "qwen3-14b": {**Q3, **shape(40, 5120, 40, 8, 17408, tie_word_embeddings=False, max_window_layers=40)},
    "qwen3-32b": {**Q3, **shape(64, 5120, 64, 8, 25600, tie_word_embeddings=False, max_window_layers=64)},
    "qwen3-30b-a3b": {**QM, **shape(48, 2048, 32, 4, 6144, moe_intermediate_size=768, max_window_layers=48)},
    "qwen3-235b-a22b": {**QM, **shape(94, 4096, 64, 4, 12288, moe_intermediate_size=1536, max_window_layers=94)},
    "olmo2-7b": {**O2, **shape(32, 4096, 32, 32, 11008)},
    "olmo2-13b": {**O2, **shape(40, 5120, 40, 40, 13824)},
}


def hf_model(fields: dict, dtype: torch.dtype = torch.float32):
    fields = dict(fields)
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype)


def params(name: str, key: str = "params", **settings: object) -> int:
    """A preset's parameter count (``key``: ``params``, ``params_non_embedding`` or ``params_active``)."""
    m = load(name, settings)
    t = totals(m.graph)
    value = getattr(t, key)
    return as_int(evaluate(t.params if value is None else value, m.values), key)  # dense: active = all


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_preset_params_equal_transformers(name):
    assert params(name) == sum(p.numel() for p in hf_model(HF_CONFIGS[name]).parameters())


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_config_json_gives_the_preset(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS[name]))
    assert params(str(path)) == params(name)
    assert params(str(path), "params_active") == params(name, "params_active")
    config, preset = (
        estimate(spec, inference=True, context=5000)["memory_bytes"]["kv_cache"] for spec in (str(path), name)
    )
    assert config == preset  # the same window, the same layer pattern


@pytest.mark.parametrize("name, context", [("gemma2-2b", 4100), ("gemma3-1b", 600), ("phi3-mini-4k", 2100)])
def test_windowed_cache_equals_transformers(name, context):
    # a prefill past the window: local layers keep W − 1 tokens (gemma2-2b: 13 of 26 layers keep 4095 of
    # 4100; gemma3-1b: 22 of 26 keep 511 of 600; phi3-mini-4k: all 32 keep 2046 of 2100)
    model = hf_model(HF_CONFIGS[name], torch.bfloat16)
    with torch.no_grad():
        cache = model(input_ids=torch.zeros(1, context, dtype=torch.long, device="meta"), use_cache=True).cache
    theirs = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert estimate(name, inference=True, context=context)["memory_bytes"]["kv_cache"] == theirs


def test_published_counts():
    # exact counts: keras-hub's keras_hub/src/models/{gemma,gemma3,phi3,qwen3,qwen3_moe}/*_presets.py ("params")
    assert params("gemma-2b") == 2_506_172_416  # gemma_2b_en
    assert params("gemma-7b") == 8_537_680_896  # gemma_7b_en
    assert params("gemma2-2b") == 2_614_341_888  # gemma2_2b_en
    assert params("gemma2-9b") == 9_241_705_984  # gemma2_9b_en
    assert params("gemma2-27b") == 27_227_128_320  # gemma2_27b_en
    assert params("gemma3-1b") == 999_885_952  # gemma3_1b
    # keras-hub's text towers of Gemma 3 4B/12B/27B read a 262,144-row table; the HF text_config has 262,208
    assert params("gemma3-4b", V=262144) == 3_880_099_328  # gemma3_4b_text
    assert params("gemma3-12b", V=262144) == 11_765_788_416  # gemma3_12b_text
    assert params("gemma3-27b", V=262144) == 27_009_002_240  # gemma3_27b_text
    assert params("gemma3-27b") - params("gemma3-27b", V=262144) == 64 * 5376
    assert params("phi3-mini-4k") == 3_821_079_552  # phi3_mini_4k_instruct_en
    for name, n in [
        ("qwen3-0.6b", 596_049_920),
        ("qwen3-1.7b", 1_720_574_976),
        ("qwen3-4b", 4_022_468_096),
        ("qwen3-8b", 8_190_735_360),
        ("qwen3-14b", 14_768_307_200),
        ("qwen3-32b", 32_762_123_264),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("qwen3-235b-a22b", 235_093_634_560),
    ]:
        assert params(name) == n, name


def test_published_non_embedding_counts():
    # Gemma (2024) Table 2 and Gemma 2 (2024) Table 1, exact: total − V·d (the tied table, counted once)
    for name, n in [
        ("gemma-2b", 1_981_884_416),
        ("gemma-7b", 7_751_248_896),
        ("gemma2-2b", 2_024_517_888),
        ("gemma2-9b", 8_324_201_984),
        ("gemma2-27b", 26_047_480_320),
    ]:
        assert params(name, "params_non_embedding") == n, name
    # Gemma 3 Technical Report, Table 1, in millions: 698M, 3,209M, 10,759M, 25,600M (1B: 302M embedding)
    for name, millions in [("gemma3-1b", 698), ("gemma3-4b", 3209), ("gemma3-12b", 10759), ("gemma3-27b", 25600)]:
        assert round(params(name, "params_non_embedding") / 1e6) == millions, name
    assert round((params("gemma3-1b") - params("gemma3-1b", "params_non_embedding")) / 1e6) == 302
    # Qwen3 model cards, "Number of Parameters (Non-Embedding)": Qwen counts an untied unembedding as
    # embedding too, so theirs is ours minus V·d where the head is untied (V = 151936)
    for name, d, tied, billions in [
        ("qwen3-0.6b", 1024, True, 0.44),
        ("qwen3-1.7b", 2048, True, 1.4),
        ("qwen3-4b", 2560, True, 3.6),
        ("qwen3-8b", 4096, False, 6.95),
        ("qwen3-14b", 5120, False, 13.2),
        ("qwen3-32b", 5120, False, 31.2),
        ("qwen3-30b-a3b", 2048, False, 29.9),
        ("qwen3-235b-a22b", 4096, False, 234),
    ]:
        theirs = params(name, "params_non_embedding") - (0 if tied else 151936 * d)
        digits = len(str(billions).partition(".")[2])
        assert round(theirs / 1e9, digits) == billions, name


def test_published_rounded_and_active_counts():
    # Qwen3 model cards: 0.6B, 1.7B, 4.0B, 8.2B, 14.8B, 32.8B; 30.5B total / 3.3B activated; 235B / 22B
    for name, billions in [
        ("qwen3-0.6b", 0.6),
        ("qwen3-1.7b", 1.7),
        ("qwen3-4b", 4.0),
        ("qwen3-8b", 8.2),
        ("qwen3-14b", 14.8),
        ("qwen3-32b", 32.8),
        ("qwen3-30b-a3b", 30.5),
    ]:
        assert round(params(name) / 1e9, 1) == billions, name
    assert int(params("qwen3-30b-a3b", "params_active") / 1e8) == 33  # 3.35B, which the card truncates to 3.3B
    assert round(params("qwen3-235b-a22b") / 1e9) == 235
    assert round(params("qwen3-235b-a22b", "params_active") / 1e9) == 22
    # the inactive part: (128 − 8) experts of 3·d·d_expert in every layer (48 layers, d 2048, d_expert 768)
    assert params("qwen3-30b-a3b") - params("qwen3-30b-a3b", "params_active") == 48 * 120 * 3 * 2048 * 768
    # Phi-3 Technical Report: 3.8B (mini), 14B (medium); Phi-4 Technical Report: 14B (a 14.7B model)
    assert round(params("phi3-mini-4k") / 1e8) == 38 and round(params("phi3-medium-4k") / 1e9) == 14
    assert 14e9 <= params("phi4") < 15e9
    # OLMo 2 model pages (allenai/OLMo-2-1124-7B, -13B): 7.3B and 13.7B parameters
    assert round(params("olmo2-7b") / 1e8) == 73 and round(params("olmo2-13b") / 1e8) == 137
