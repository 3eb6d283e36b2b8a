"""Real Hub configs (reconstructed in tests/data/hf, each with its "_source") read as transformers reads them:
published parameter counts, the checkpoint's weight bytes, a wrapper's language model, renamed fields."""

from __future__ import annotations

import json
import os

import pytest

from costmodel import estimate

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "hf")


def path(name: str) -> str:
    return os.path.join(DATA, name)


@pytest.mark.parametrize(
    "name, total, published",
    [
        # the language model of Gemma 3 27B: keras-hub's gemma3_27b_text 27,009,002,240 (V = 262,144) plus the
        # 64 more rows × 5376 of the HF table (tests/arch/test_presets_decoders_a.py); + the 417M vision
        # tower (Gemma 3 Technical Report, Table 1) is the model card's 27.4B
        ("gemma-3-27b-it.json", 27_009_002_240 + 64 * 5376, 27.0e9),
        ("qwen3-30b-a3b.json", 30_532_122_624, 30.5e9),  # model card: 30.5B in total (keras-hub: exact)
        ("gpt-oss-20b.json", 20_914_757_184, 20.91e9),  # gpt-oss model card, Table 1: 20.91B total
        ("smollm3-3b.json", 3_075_098_624, 3.08e9),  # Hub: 3.08B (36 × 78,123,008 + 2048 + 262,668,288)
        ("mistral-nemo-base-2407.json", 12_247_782_400, 12.2e9),  # model card: 12B; Hub 12.2B
        ("phi-4.json", 14_659_507_200, 14.7e9),  # Phi-4 report: 14B; Hub 14.7B
        ("olmo-2-1124-7b.json", 7_298_617_344, 7.3e9),  # OLMo 2: 7B; Hub 7.3B
    ],
)
def test_published_parameter_counts(name, total, published):
    n = estimate(path(name))["params"]["total"]
    assert n == total
    assert abs(n - published) / published < 0.005  # the card's rounded count


def test_active_counts():
    # Qwen3-30B-A3B card: 3.3B activated; gpt-oss card Table 1: 3.61B active, the embedding table left out
    assert round(estimate(path("qwen3-30b-a3b.json"))["params"]["active"] / 1e8) == 34  # 3,353,032,704
    gpt = estimate(path("gpt-oss-20b.json"))["params"]
    assert round(gpt["active_non_embedding"] / 1e7) == 361


def test_gpt_oss_mxfp4_weight_bytes():
    r = estimate(path("gpt-oss-20b.json"), inference=True, seq=16)
    experts = 24 * 32 * (2880 * 5760 + 2880 * 2880)  # gate_up (2·d_ff × d) and down (d × d_ff) of 32 experts
    fp4 = experts // 2  # two e2m1 values a byte
    scales = experts // 32  # one e8m0 byte per 32 inputs
    rest = (20_914_757_184 - experts) * 2  # attention, router, embeddings, head, biases, norms in bf16
    assert r["memory_bytes"]["params"] == fp4 + scales + rest == 13_761_264_768  # the card's 12.8 GiB
    assert r["memory_bytes"]["parts"]["scales"] == scales
    chosen = estimate(path("gpt-oss-20b.json"), inference=True, seq=16, weights_dtype="bf16")
    assert chosen["memory_bytes"]["params"] == 20_914_757_184 * 2  # chosen: every weight in bf16
    assert "mxfp4" in " ".join(r["notes"])


def test_wrapper_counts_the_language_model_and_says_so():
    r = estimate(path("gemma-3-27b-it.json"))
    assert r["family"] == "gemma3"
    assert any("vision_config" in n and "not counted" in n for n in r["notes"])
    assert any("vocab_size=262208" in n for n in r["notes"])  # Gemma3TextConfig's default, named


def test_renamed_field_either_name(tmp_path):
    # transformers 5.24 saves Qwen3-MoE's experts as num_local_experts (attribute_map); Hub files say num_experts
    with open(path("qwen3-30b-a3b.json")) as fh:
        cfg = json.load(fh)
    cfg["num_local_experts"] = cfg.pop("num_experts")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert estimate(str(p))["params"]["total"] == 30_532_122_624


@pytest.mark.parametrize(
    "qc, per_matrix",
    [
        # GPTQ int4, group 128: ½ byte a weight, (2 + ½) bytes per group and output, 4 bytes g_idx per input
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128},
            lambda r, c: r * c // 2 + r * (c // 128) * 5 // 2 + 4 * c,
        ),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, lambda r, c: r * c // 2 + r * (c // 128) * 5 // 2),
        # FP8 with 128 × 128 blocks: a byte a weight, an fp32 scale a block
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, lambda r, c: r * c + (r // 128) * (c // 128) * 4),
    ],
)
def test_quantized_layers(tmp_path, qc, per_matrix):
    d, f, V, L = 256, 512, 1024, 2
    cfg = {
        "model_type": "llama",
        "hidden_size": d,
        "intermediate_size": f,
        "num_hidden_layers": L,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": V,
        "max_position_embeddings": 64,
        "quantization_config": qc,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    got = estimate(str(p), inference=True, seq=8)["memory_bytes"]["params"]
    layer = 4 * per_matrix(d, d) + 2 * per_matrix(f, d) + per_matrix(d, f) + 2 * d * 2  # q k v o, gate up, down, norms
    assert got == L * layer + 2 * V * d * 2 + d * 2  # table, head (kept in bf16), final norm
