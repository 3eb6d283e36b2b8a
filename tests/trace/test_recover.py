"""Formulas in a config's sizes, recovered by tracing a transformers config class at a few small configs.

LLaMA (in d, L, h, n_kv, d_head, d_ff, V) and GPT-2 (in d, L, h, V, T_max) must give the hand-written
families' symbolic formulas exactly: parameters, forward and training matmul FLOPs, activation memory is
not compared (the traced graph keeps what torch keeps, the family its own conventions), the KV cache.
Each recovery traces 5 configs to fit and 2 it checks the fit on.
"""

from __future__ import annotations

import sympy
import torch  # noqa: F401  (the torch marker)

import costmodel
from costmodel.tracer.fit import fit_sparse
from costmodel.tracer.recover import sample_configs

KEYS = ("params.total", "flops.matmul.forward", "flops.matmul.training", "memory_bytes.kv_cache")
LLAMA = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
]
GPT2 = ["n_embd", "n_layer", "n_head", "vocab_size", "n_positions"]


def same(recovered, family: str, settings: dict) -> None:
    got = costmodel.derive(recovered.model)["expressions"]
    expected = costmodel.derive(costmodel.load(family, {**settings, "dtype": "fp32"}))["expressions"]
    for key in KEYS:
        assert sympy.expand(got[key] - expected[key]) == 0, (family, key, got[key], expected[key])


def test_recovered_llama_equals_the_llama_family():
    r = costmodel.recover(
        "transformers:LlamaConfig", LLAMA, samples=5, checks=2, labels=False, base={"max_position_embeddings": 256}
    )
    assert not r.not_polynomial and len(r.checks) == 2
    same(r, "llama", {"d_head": "d_head"})  # the family with the head dim a size of its own, as the config has it


def test_recovered_gpt2_equals_the_gpt_family():
    r = costmodel.recover(
        "transformers:GPT2Config", GPT2, samples=5, checks=2, labels=False, base={"bos_token_id": 1, "eos_token_id": 2}
    )
    same(r, "gpt", {})


def test_samples_keep_models_buildable():
    for v in sample_configs(LLAMA + ["num_local_experts", "num_experts_per_tok"], 12):
        assert v["num_attention_heads"] % v["num_key_value_heads"] == 0
        assert v["num_attention_heads"] > v["num_key_value_heads"] and v["head_dim"] % 2 == 0
        assert v["hidden_size"] % v["num_attention_heads"] == 0
        assert 1 <= v["num_experts_per_tok"] < v["num_local_experts"] and min(v.values()) >= 1


def test_a_size_that_is_no_short_polynomial_is_not_fitted():
    points = [{"d": d} for d in (8, 12, 20, 28, 44, 52)]
    assert fit_sparse(["d"], points, [-(-d["d"] // 3) for d in points]) is None  # ceil(d/3)
    assert (
        fit_sparse(["d"], points, [3 * d["d"] ** 2 + 1 for d in points])
        == 3 * sympy.Symbol("d", positive=True, integer=True) ** 2 + 1
    )
