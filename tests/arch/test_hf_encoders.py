"""BERT, RoBERTa and ViT cross-checked against transformers, built from tiny configs on the ``meta`` device.

For each config we write a ``config.json``, let costmodel read it (``estimate(path)``), and build the same
config with transformers (eager attention: SDPA on CPU tensors counts 0 FLOPs). Exact equalities:
``params.total`` = the ``numel()`` sum of the real parameters; ``flops.matmul.forward`` and
``flops.matmul.training`` = ``FlopCounterMode`` over a forward and a forward + backward, at two
(B, T) for BERT/RoBERTa and two image sizes for ViT. T5 is in ``test_hf_t5.py``.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from costmodel import CostModelError
from costmodel.families import load
from costmodel.graph.analysis import evaluate, totals
from costmodel.verbs.estimate import estimate

#: the Hugging Face model types this file checks (tests/arch/test_hf.py asks that every supported one is checked)
CHECKED_TYPES = {"bert", "roberta", "vit"}

MODELS = {  # model_type → (masked-LM / classifier class, bare encoder class)
    "bert": (transformers.BertForMaskedLM, transformers.BertModel),
    "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaModel),
    "vit": (transformers.ViTForImageClassification, transformers.ViTModel),
}


def build(fields: dict, pooler: bool | None = None):
    """The transformers model of ``fields`` on meta: the head model (``pooler=None``) or the bare encoder."""
    fields = dict(fields)
    model_type = fields.pop("model_type")
    fields.pop("architectures", None)
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    cfg._attn_implementation = "eager"
    head, bare = MODELS[model_type]
    with torch.device("meta"):
        return head(cfg) if pooler is None else bare(cfg, add_pooling_layer=pooler)


def counts(model, run) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward + backward FLOPs): ``run(model)`` returns the scalar to differentiate."""
    model.eval()  # dropout off (it adds no matmul either way)
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        run(model)
    with FlopCounterMode(display=False) as training:
        run(model).backward()
    return sum(p.numel() for p in model.parameters()), forward.get_total_flops(), training.get_total_flops()


def text_run(batch: int, seq: int, head: bool):
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    if head:
        return lambda m: m(input_ids=ids, labels=ids).loss
    return lambda m: outputs_sum(m(input_ids=ids))


def outputs_sum(out):
    """What a bare encoder's backward starts from: its hidden states (and pooled output, if any) summed."""
    pooled = out.pooler_output
    return out.last_hidden_state.sum() + (pooled.sum() if pooled is not None else 0)


def image_run(batch: int, fields: dict, head: bool):
    side = fields["image_size"]
    pixels = torch.zeros(batch, fields.get("num_channels", 3), side, side, device="meta")
    if head:
        labels = torch.zeros(batch, dtype=torch.long, device="meta")
        return lambda m: m(pixel_values=pixels, labels=labels).loss
    return lambda m: outputs_sum(m(pixel_values=pixels))


def engine(tmp_path, fields: dict, **values) -> tuple[int, int, int]:
    """costmodel's counts for the config.json of ``fields`` at ``values`` (B, T): the totals ``estimate`` reports,
    without its memory and time sections."""
    path = tmp_path / f"{fields['model_type']}-config.json"
    path.write_text(json.dumps(fields))
    m = load(str(path))
    t = totals(m.graph)
    values = {**m.values, **values}
    return tuple(int(evaluate(e, values)) for e in (t.params, t.forward.matmul_flops, t.training.matmul_flops))


def text(model_type: str, **over) -> dict:
    base = {
        "model_type": model_type,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 48,
        "vocab_size": 60,
        "max_position_embeddings": 40,
        "type_vocab_size": 2,
    }
    if model_type == "roberta":
        base.update(type_vocab_size=1, pad_token_id=1)
    return {**base, **over}


def image(**over) -> dict:
    base = {
        "model_type": "vit",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 48,
        "image_size": 32,
        "patch_size": 8,
        "num_channels": 3,
        "num_labels": 5,
    }
    return {**base, **over}


def check_text(tmp_path, fields: dict, batch: int, seq: int) -> None:
    head = fields.get("architectures", ["ForMaskedLM"])[0].endswith("ForMaskedLM")
    theirs = counts(build(fields, None if head else True), text_run(batch, seq, head))
    assert engine(tmp_path, fields, B=batch, T=seq) == theirs, (fields, batch, seq)


def check_image(tmp_path, fields: dict, batch: int) -> None:
    head = fields.get("architectures", ["ViTForImageClassification"])[0] == "ViTForImageClassification"
    theirs = counts(build(fields, None if head else True), image_run(batch, fields, head))
    assert engine(tmp_path, fields, B=batch) == theirs, (fields, batch)


TEXT = {
    "bert": text("bert"),
    "bert-relu-3-types": text("bert", hidden_act="relu", type_vocab_size=3, num_attention_heads=2),
    "bert-model-pooler": text("bert", architectures=["BertModel"]),
    "roberta": text("roberta"),
    "roberta-model-pooler": text("roberta", architectures=["RobertaModel"], hidden_act="gelu_new"),
}


@pytest.mark.parametrize("name", sorted(TEXT))
@pytest.mark.parametrize("batch, seq", [(2, 5), (3, 16)])
def test_text_encoder_matches_transformers(tmp_path, name, batch, seq):
    check_text(tmp_path, TEXT[name], batch, seq)


def test_bert_without_pooler_matches_transformers():
    fields = text("bert")
    theirs = counts(build(fields, pooler=False), text_run(2, 7, head=False))
    config = {"L": 2, "d": 32, "h": 4, "d_ff": 48, "V": 60, "T_max": 40, "n_types": 2, "head": "none"}
    r = estimate("bert", settings=config, batch=2, seq=7)
    assert (r["params"]["total"], r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]) == theirs


IMAGES = {
    "vit": image(),
    "vit-head-dim-no-qkv-bias": image(qkv_bias=False, head_dim=6, num_channels=4, patch_size=4, num_labels=10),
    "vit-model-pooler": image(architectures=["ViTModel"], pooler_output_size=20),
    "vit-id2label": {
        **{k: v for k, v in image().items() if k != "num_labels"},
        "id2label": {str(i): f"class{i}" for i in range(7)},
    },
}


@pytest.mark.parametrize("name", sorted(IMAGES))
@pytest.mark.parametrize("side", [32, 48])
def test_vit_matches_transformers_at_two_image_sizes(tmp_path, name, side):
    check_image(tmp_path, {**IMAGES[name], "image_size": side}, batch=2)


def test_vit_backward_has_no_pixel_gradient():
    # FlopCounterMode: forward + backward = 3 × (everything but the patch embedding) + 2 × the patch
    # embedding, whose input (the pixels) needs no gradient: only the weight gradient runs
    from costmodel.graph.analysis import breakdown

    m = load("vit-base-patch16-224")
    patch = breakdown(m.graph)["embeddings.patch"]
    fwd = evaluate(patch.forward.matmul_flops, {**m.values, "B": 1})
    assert fwd == 2 * 196 * 768 * 3 * 16 * 16  # 2 · patches · d · (channels · 16²)
    assert evaluate(patch.backward.matmul_flops, {**m.values, "B": 1}) == fwd


def test_estimate_reads_a_config_json_and_counts_tokens(tmp_path):
    # ViT: (224/16)² patches + [CLS] per image; BERT: B·T
    assert estimate("vit-base-patch16-224", batch=3)["tokens"]["per_step"] == 3 * (14 * 14 + 1)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TEXT["roberta"]))
    r = estimate(str(path), batch=2)
    assert r["config"]["T"] == 40 - 2 and r["tokens"]["per_step"] == 2 * 38  # the positions after the padding id
    ours = r["params"]["total"], r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]
    assert ours == counts(build(TEXT["roberta"]), text_run(2, 38, head=True))


@pytest.mark.parametrize(
    "argv, message",
    [
        (("bert-base-uncased", "--inference"), "no KV cache"),
        (("vit-base-patch16-224", "--inference"), "no KV cache"),
        (("vit-base-patch16-224", "--seq", "128"), "no sequence length T"),
        (("roberta-base", "--seq", "513"), "T + 2 cannot exceed the table T_max"),
    ],
)
def test_options_that_do_not_apply_are_one_clear_line(argv, message):
    import contextlib
    import io

    from costmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv])
    assert code == 2 and out.getvalue() == "" and message in err.getvalue() and err.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    "fields, message",
    [
        (text("bert", tie_word_embeddings=False), "tie_word_embeddings false"),
        (text("bert", hidden_act="tanh"), "hidden_act 'tanh'"),
        (text("bert", architectures=["BertForPreTraining"]), "architectures"),
        (image(image_size=[32, 48]), "not square"),
        ({k: v for k, v in image().items() if k != "patch_size"}, "missing field 'patch_size'"),
    ],
)
def test_config_errors(tmp_path, fields, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    with pytest.raises(CostModelError, match=message):
        estimate(str(path))


@st.composite
def text_configs(draw) -> dict:
    model_type = draw(st.sampled_from(["bert", "roberta"]))
    heads = draw(st.sampled_from([1, 2, 4]))
    return text(
        model_type,
        num_attention_heads=heads,
        hidden_size=heads * draw(st.sampled_from([2, 4, 6])),
        num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 40)),
        vocab_size=draw(st.integers(8, 64)),
        max_position_embeddings=draw(st.integers(12, 24)),
        hidden_act=draw(st.sampled_from(["gelu", "relu", "silu"])),
        **({"architectures": ["BertModel" if model_type == "bert" else "RobertaModel"]} if draw(st.booleans()) else {}),
    )


@settings(max_examples=6, deadline=None)
@given(fields=text_configs(), batch=st.integers(1, 2), seq=st.integers(1, 9))
def test_generated_text_encoders_match_transformers(tmp_path_factory, fields, batch, seq):
    check_text(tmp_path_factory.mktemp("cfg"), fields, batch, seq)


@st.composite
def image_configs(draw) -> dict:
    heads = draw(st.sampled_from([1, 2, 4]))
    patch = draw(st.sampled_from([2, 4, 8]))
    return image(
        num_attention_heads=heads,
        hidden_size=heads * draw(st.sampled_from([2, 4])),
        num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 40)),
        patch_size=patch,
        image_size=patch * draw(st.integers(1, 4)),
        num_channels=draw(st.integers(1, 3)),
        qkv_bias=draw(st.booleans()),
        num_labels=draw(st.integers(2, 9)),
        **({"architectures": ["ViTModel"]} if draw(st.booleans()) else {}),
    )


@settings(max_examples=6, deadline=None)
@given(fields=image_configs(), batch=st.integers(1, 2))
def test_generated_vits_match_transformers(tmp_path_factory, fields, batch):
    check_image(tmp_path_factory.mktemp("cfg"), fields, batch)
