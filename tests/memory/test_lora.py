"""Issue 30, item 6: LoRA and frozen weights as options of every verb (``lora``, ``lora_targets``, ``freeze``;
``--lora RANK --lora-targets q,v --freeze PATTERNS``), checked against ``numel()`` of real torch modules.

LoRA r = 16 on q and v of LLaMA-2-7B: 32 layers × 2 matmuls × 16 × (4,096 + 4,096) = 8,388,608 trainable
parameters (what peft reports for ``LoraConfig(r=16, target_modules=["q_proj", "v_proj"])``). An estimate of a
LoRA graph failed with "memory_bytes.activations_per_layer is not a whole number": the first layer of a frozen
model keeps less than the later ones (an average over the layers, now rounded up).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch  # the test extra pins torch and transformers
import transformers

import costmodel
from costmodel.cli import main
from costmodel.errors import CostModelError

LLAMA2_7B = dict(
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    vocab_size=32000,
    tie_word_embeddings=False,
)


def torch_lora(rank: int, targets: tuple[str, ...]) -> tuple[int, int]:
    """(trainable, all) parameters of LLaMA-2-7B built by transformers on the meta device, every weight frozen,
    with LoRA's A (in → r) and B (r → out) beside each target projection, as peft adds them."""
    cfg = transformers.LlamaConfig(**LLAMA2_7B)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
        model.requires_grad_(False)
        for layer in model.model.layers:
            for t in targets:
                proj = getattr(layer.self_attn, f"{t}_proj")
                proj.lora_A = torch.nn.Linear(proj.in_features, rank, bias=False)
                proj.lora_B = torch.nn.Linear(rank, proj.out_features, bias=False)
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def cli_json(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("targets", [("q", "v"), ("q", "k", "v", "o")])
def test_lora_trainable_parameters_are_torch_numel(targets):
    trainable, total = torch_lora(16, targets)
    assert trainable == 32 * len(targets) * 16 * (4096 + 4096)  # q, v: 8,388,608
    r = costmodel.estimate("llama2-7b", lora=16, lora_targets=targets)
    assert r["memory"]["parameters_trainable"] == trainable
    assert r["params"]["total"] == total  # 6,738,415,616 + the adapters
    # bf16-mixed AdamW: 2-byte gradients and 12 bytes of optimizer state (fp32 master, m, v) per trainable one
    assert r["memory_bytes"]["grads"] == 2 * trainable
    assert r["memory_bytes"]["optimizer"] == 12 * trainable
    cli = cli_json("estimate", "llama2-7b", "--lora", "16", "--lora-targets", ",".join(targets))
    assert cli["memory"]["parameters_trainable"] == trainable == 8_388_608 * len(targets) // 2


def test_freeze_patterns_match_torch_requires_grad():
    cfg = transformers.LlamaConfig(**LLAMA2_7B)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    for layer in model.model.layers:
        layer.requires_grad_(False)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)  # embeddings, final norm, head
    assert trainable == 2 * 32000 * 4096 + 4096  # 262,148,096
    assert costmodel.estimate("llama2-7b", freeze="layers.*")["memory"]["parameters_trainable"] == trainable
    cli = cli_json("estimate", "llama2-7b", "--freeze", "layers.*")
    assert cli["memory"]["parameters_trainable"] == trainable


@pytest.mark.parametrize("model", ["gpt2-small", "qwen3-0.6b", "llama2-13b"])
def test_a_lora_estimate_is_whole_bytes(model):
    r = costmodel.estimate(model, lora=16, batch=1)  # was: activations_per_layer is not a whole number
    assert isinstance(r["memory_bytes"]["activations_per_layer"], int)
    assert r["memory"]["parameters_trainable"] > 0


def test_lora_options_are_checked():
    with pytest.raises(CostModelError, match="give the rank"):
        costmodel.estimate("gpt2-small", lora_targets="q,k")
    with pytest.raises(CostModelError, match="no dense matmul op matches"):
        costmodel.estimate("gpt2-small", lora=8, lora_targets="nope")
    with pytest.raises(CostModelError, match="positive|whole|expected"):
        costmodel.estimate("gpt2-small", lora=0)


SMALL = {"L": "2", "d": "64", "h": "4", "n_kv": "2", "d_ff": "128", "V": "100"}
#: the same Llama as transformers' config names it
TORCH_SMALL = {
    **LLAMA2_7B,
    **dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "vocab_size": 100,
}


@pytest.mark.parametrize("targets", [("q", "v"), ("q", "k", "v", "o", "gate", "up", "down")])
def test_lora_trainable_parameters_are_peft_s(targets):
    """peft's own count: ``LoraConfig(r=16, target_modules=[...])`` on transformers' Llama built from a config."""
    peft = pytest.importorskip("peft")  # in the test extra
    cfg = transformers.LlamaConfig(**TORCH_SMALL)
    names = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    model = peft.get_peft_model(
        transformers.LlamaForCausalLM(cfg),
        peft.LoraConfig(r=16, target_modules=[names.get(t, f"{t}_proj") for t in targets]),
    )
    trainable, total = model.get_nb_trainable_parameters()
    # q, v: 2 layers × 16 × ((64 + 64) + (64 + 32)) = 7,168 (v projects to 2 kv heads × 16)
    assert targets != ("q", "v") or trainable == 7_168
    r = costmodel.estimate("llama", settings=SMALL, lora=16, lora_targets=targets)
    assert r["memory"]["parameters_trainable"] == trainable
    assert r["memory"]["parameters_trainable"] + r["memory"]["parameters_frozen"] == total


def test_lora_on_llama2_7b_is_peft_s_count():
    peft = pytest.importorskip("peft")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA2_7B))
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
    assert model.get_nb_trainable_parameters()[0] == 8_388_608  # 32 × 2 × 16 × (4,096 + 4,096)
    assert costmodel.estimate("llama2-7b", lora=16)["memory"]["parameters_trainable"] == 8_388_608


def test_qlora_stores_the_frozen_layers_in_nf4():
    """QLoRA (Dettmers et al. 2023, Sec. 3): NF4 weights, an 8-bit absmax per block of 64 and, double-quantised, an
    fp32 constant per 256 absmax: 4 + 8/64 + 32/(64·256) = 2113/512 bits = 2113/4096 bytes a weight (the paper's
    0.127 bits of constants per parameter)."""
    from fractions import Fraction

    from costmodel.options.policies import NF4

    per = Fraction(NF4.bits, 8) + Fraction(NF4.scale_bytes) / NF4.group
    assert per == Fraction(2113, 4096) and round(float(per * 8 - 4), 3) == 0.127
    lora_ = costmodel.estimate("llama2-7b", lora=16)
    q = costmodel.estimate("llama2-7b", lora=16, qlora=True)
    assert q["memory"]["parameters_trainable"] == lora_["memory"]["parameters_trainable"] == 8_388_608
    for k in ("grads", "optimizer", "activations"):
        assert q["memory_bytes"][k] == lora_["memory_bytes"][k]  # only the frozen base's bytes change
    # the layers' linear weights: 32 × (4 × 4,096² + 3 × 4,096 × 11,008) = 6,476,005,376, in NF4: 3,340,771,328 B;
    # the rest in bf16: embeddings and head 2 × 32,000 × 4,096, norms 65 × 4,096 = 262,410,240 weights, and the
    # adapters 8,388,608: 3,340,771,328 + 2 × (262,410,240 + 8,388,608) = 3,882,369,024 bytes
    assert 6_476_005_376 * Fraction(2113, 4096) == 3_340_771_328
    assert q["memory_bytes"]["params"] == 3_340_771_328 + 2 * (262_410_240 + 8_388_608) == 3_882_369_024
    assert costmodel.estimate("llama2-7b", lora=16, base_dtype="nf4")["memory_bytes"] == q["memory_bytes"]


def test_qlora_from_every_training_verb(capsys):
    e = cli_json("estimate", "llama2-7b", "--lora", "16", "--qlora")
    assert e["memory_bytes"]["params"] == 3_882_369_024
    f = cli_json("fit", "llama2-7b", "--hardware", "a100-40gb", "--lora", "16", "--qlora", "--seq", "4096", "--flash")
    plain = cli_json("fit", "llama2-7b", "--hardware", "a100-40gb", "--lora", "16", "--seq", "4096", "--flash")
    assert f["largest"] > plain["largest"] >= 1  # 9.6 GB less of weights: more sequences fit
    argv = ["plan", "llama2-7b", "--hardware", "a100-40gb", "--devices", "1", "--batch", "8", "--seq", "4096"]
    assert cli_json(*argv)["fitting"] == 0  # full fine-tuning: 16 bytes a parameter do not fit 40 GB
    assert cli_json(*argv, "--lora", "16", "--qlora")["fitting"] > 0


def test_qlora_options_are_checked(capsys):
    with pytest.raises(CostModelError, match="give the rank"):
        costmodel.estimate("gpt2-small", qlora=True)
    with pytest.raises(CostModelError, match="stores the frozen weights"):
        costmodel.estimate("gpt2-small", base_dtype="nf4")
    assert main(["estimate", "gpt2-small", "--qlora"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("model", ["llama3-70b", "llama2-13b", "qwen3-0.6b", "gpt2-small"])
def test_an_estimate_of_a_kit_lora_graph_is_whole_bytes(model):
    """The issue's Python path: ``kit.lora(m.graph, ["*.q", "*.v"], 16)`` then ``costmodel.estimate`` at batch 1."""
    import dataclasses

    from costmodel import kit
    from costmodel.families import load

    m = load(model)
    m = dataclasses.replace(m, graph=kit.lora(m.graph, ["*.q", "*.v"], 16), key=None)
    r = costmodel.estimate(m, batch=1)
    assert isinstance(r["memory_bytes"]["activations_per_layer"], int)
    assert r["memory"]["parameters_trainable"] == costmodel.estimate(model, lora=16)["memory"]["parameters_trainable"]
