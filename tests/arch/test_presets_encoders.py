"""The BERT, RoBERTa, T5 and ViT presets equal the real models, and the published counts.

Each preset is checked against ``numel()`` of the transformers model built on ``meta`` from the fields of its
released ``config.json`` (copied below from the Hugging Face files the presets cite), against the same
config.json read by costmodel, and, where a count is published, against it. The smallest preset of each
kind is also counted with ``FlopCounterMode`` at the preset's own step shape.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from costmodel.families import load
from costmodel.graph.analysis import as_int, evaluate, totals
from costmodel.verbs.estimate import estimate

BERT = {
    "model_type": "bert",
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "architectures": ["BertForMaskedLM"],
}
BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
LARGE = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}
ROBERTA = {
    "model_type": "roberta",
    "vocab_size": 50265,
    "max_position_embeddings": 514,
    "type_vocab_size": 1,
    "pad_token_id": 1,
    "architectures": ["RobertaForMaskedLM"],
}
T5 = {
    "model_type": "t5",
    "vocab_size": 32128,
    "relative_attention_num_buckets": 32,
    "n_positions": 512,
    "decoder_start_token_id": 0,
}
V11 = {**T5, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "d_kv": 64}
VIT = {"model_type": "vit", "image_size": 224, "num_channels": 3, "qkv_bias": True}
IMAGENET = {
    **VIT,
    "patch_size": 16,
    "architectures": ["ViTForImageClassification"],
    "id2label": {str(i): f"class {i}" for i in range(1000)},
}
IN21K = {**VIT, "architectures": ["ViTModel"]}

#: preset → the fields of its config.json that size the model
HF_CONFIGS = {
    "bert-base-uncased": {**BERT, **BASE, "vocab_size": 30522},
    "bert-large-uncased": {**BERT, **LARGE, "vocab_size": 30522},
    "bert-base-cased": {**BERT, **BASE, "vocab_size": 28996},
    "bert-large-cased": {**BERT, **LARGE, "vocab_size": 28996},
    "roberta-base": {**ROBERTA, **BASE},
    "roberta-large": {**ROBERTA, **LARGE},
    "t5-small": {**T5, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8},
    "t5-base": {**T5, "d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_heads": 12},
    "t5-large": {**T5, "d_model": 1024, "d_kv": 64, "d_ff": 4096, "num_layers": 24, "num_heads": 16},
    "t5-3b": {**T5, "d_model": 1024, "d_kv": 128, "d_ff": 16384, "num_layers": 24, "num_heads": 32},
    "t5-11b": {**T5, "d_model": 1024, "d_kv": 128, "d_ff": 65536, "num_layers": 24, "num_heads": 128},
    "t5-v1.1-small": {**V11, "d_model": 512, "d_ff": 1024, "num_layers": 8, "num_decoder_layers": 8, "num_heads": 6},
    "t5-v1.1-base": {**V11, "d_model": 768, "d_ff": 2048, "num_layers": 12, "num_heads": 12},
    "t5-v1.1-large": {**V11, "d_model": 1024, "d_ff": 2816, "num_layers": 24, "num_heads": 16},
    "t5-v1.1-xl": {**V11, "d_model": 2048, "d_ff": 5120, "num_layers": 24, "num_heads": 32},
    "t5-v1.1-xxl": {**V11, "d_model": 4096, "d_ff": 10240, "num_layers": 24, "num_heads": 64},
    "vit-base-patch16-224": {**IMAGENET, **BASE},
    "vit-large-patch16-224": {**IMAGENET, **LARGE},
    "vit-base-patch16-224-in21k": {**IN21K, **BASE, "patch_size": 16},
    "vit-large-patch16-224-in21k": {**IN21K, **LARGE, "patch_size": 16},
    "vit-huge-patch14-224-in21k": {
        **IN21K,
        "hidden_size": 1280,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "intermediate_size": 5120,
        "patch_size": 14,
    },
}

CLASSES = {
    "BertForMaskedLM": transformers.BertForMaskedLM,
    "RobertaForMaskedLM": transformers.RobertaForMaskedLM,
    "ViTForImageClassification": transformers.ViTForImageClassification,
    "ViTModel": transformers.ViTModel,
}


def build(name: str):
    """The transformers model of a preset's config, on meta, as released (a v1.1 T5 with its own LM head)."""
    fields = dict(HF_CONFIGS[name])
    model_type = fields.pop("model_type")
    arch = fields.pop("architectures", ["T5ForConditionalGeneration"])[0]
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    cfg._attn_implementation = "eager"
    with torch.device("meta"):
        model = CLASSES.get(arch, transformers.T5ForConditionalGeneration)(cfg)
        if fields.get("tie_word_embeddings") is False:  # from_pretrained keeps the checkpoint's own head
            model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    return model.eval()


def preset_params(name: str) -> int:
    m = load(name)
    return as_int(evaluate(totals(m.graph).params, m.values), "params")


def test_every_encoder_preset_is_checked():
    from costmodel.families import presets

    assert {n for n, p in presets().items() if p.family in ("bert", "roberta", "t5", "vit")} == set(HF_CONFIGS)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_preset_params_equal_transformers(name):
    assert preset_params(name) == sum(p.numel() for p in build(name).parameters())


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_config_json_gives_the_preset(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS[name]))
    m = load(str(path))
    assert as_int(evaluate(totals(m.graph).params, m.values), "params") == preset_params(name)


@pytest.mark.parametrize(
    "name",
    [
        "bert-base-uncased",
        "roberta-base",
        "t5-small",
        "t5-v1.1-small",
        "vit-base-patch16-224",
        "vit-base-patch16-224-in21k",
    ],
)
def test_preset_flops_equal_flop_counter(name):
    r = estimate(name)  # one sequence (image) of the preset's own shape
    model, cfg = build(name), r["config"]

    def ids(n: int) -> torch.Tensor:
        return torch.zeros(1, n, dtype=torch.long, device="meta")

    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        if name.startswith("t5"):
            model(input_ids=ids(cfg["T_src"]), decoder_input_ids=ids(cfg["T"]), use_cache=False)
        elif name.startswith("vit"):
            model(pixel_values=torch.zeros(1, 3, 224, 224, device="meta"))
        else:
            model(input_ids=ids(cfg["T"]))
    assert r["flops"]["matmul"]["forward"] == forward.get_total_flops()
    # backward is 2 × forward, but for ViT-B/16's patch embedding (2 · 196 patches · 768 · 3·16²), whose input,
    # the pixels, needs no gradient: only its weight gradient runs (as test_hf_encoders.py checks)
    patch = 2 * 196 * 768 * 3 * 16 * 16 if name.startswith("vit") else 0
    assert r["flops"]["matmul"]["training"] == 3 * forward.get_total_flops() - patch


def test_published_counts():
    # BERT (Devlin et al. 2019, section 3): BERT-base 110M, BERT-large 340M, counted without the MLM head
    # (BertModel with its pooler): 109,482,240 and 335,141,888
    bert = {
        n: estimate(n, settings={"head": "pooler"})["params"]["total"]
        for n in ("bert-base-uncased", "bert-large-uncased")
    }
    assert bert == {"bert-base-uncased": 109_482_240, "bert-large-uncased": 335_141_888}
    assert round(bert["bert-base-uncased"] / 1e7) == 11 and round(bert["bert-large-uncased"] / 1e7) == 34
    # the MLM head's d × d transform (and bias) takes the pooler's place; it adds a LayerNorm (2d) and the
    # output bias over the vocabulary (its matrix is the token table)
    assert preset_params("bert-base-uncased") == bert["bert-base-uncased"] + 2 * 768 + 30522
    # RoBERTa (fairseq README, HF model cards): base 125M, large 355M (RobertaModel with its pooler)
    roberta = [estimate(n, settings={"head": "pooler"})["params"]["total"] for n in ("roberta-base", "roberta-large")]
    assert [round(n / 1e6) for n in roberta] == [125, 355]
    # T5 (Raffel et al. 2020, section 3.7): Small 60M, Base 220M, 3B, 11B. The paper's Large "770M" is the
    # HF count plus one more V × d table (737,668,096 + 32128 · 1024 = 770,567,168), the others are not
    t5 = {n: preset_params(n) for n in ("t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b")}
    assert int(t5["t5-small"] / 1e6) == 60 and round(t5["t5-base"] / 1e7) == 22
    assert round(t5["t5-3b"] / 1e9) == 3 and round(t5["t5-11b"] / 1e9) == 11
    assert t5["t5-large"] + 32128 * 1024 == 770_567_168
    # by hand, t5-small: shared table V·d; 6 encoder layers of 4 attention matrices d·(h·d_kv), 2 FFN
    # matrices d·d_ff and 2 norms; 6 decoder layers with a second attention and a third norm; one
    # n_buckets × h bias table per stack and a final norm each
    d, inner, ff = 512, 8 * 64, 2048
    assert (
        t5["t5-small"]
        == 32128 * d
        + 6 * (4 * d * inner + 2 * d * ff + 2 * d)
        + 6 * (8 * d * inner + 2 * d * ff + 3 * d)
        + 2 * 32 * 8
        + 2 * d
    )
    # v1.1 as released has its own LM head: V × d more than the tied model transformers builds from the config
    assert (
        preset_params("t5-v1.1-base") - estimate("t5-v1.1-base", settings={"tied": True})["params"]["total"]
        == 32128 * 768
    )
    # ViT (Dosovitskiy et al. 2021, Table 1): ViT-Base 86M, ViT-Huge 632M (the backbones, with pooler);
    # ViT-Large "307M" is not reproduced: the HF backbone has 304,351,232
    assert [round(preset_params(n) / 1e6) for n in ("vit-base-patch16-224-in21k", "vit-huge-patch14-224-in21k")] == [
        86,
        632,
    ]
    # by hand, ViT-B/16's classifier: patch embedding 768·3·16² + 768, [CLS] 768, 197 positions × 768,
    # 12 layers of 4·(768² + 768) attention, 2·768·3072 + 3072 + 768 MLP and 4·768 norms, a final norm, the
    # 1000-class head 768·1000 + 1000
    layer = 4 * (768**2 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768
    assert (
        preset_params("vit-base-patch16-224")
        == 768 * 3 * 256 + 768 + 768 + 197 * 768 + 12 * layer + 2 * 768 + 768 * 1000 + 1000
        == 86_567_656
    )
