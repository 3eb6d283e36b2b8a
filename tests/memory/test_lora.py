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
