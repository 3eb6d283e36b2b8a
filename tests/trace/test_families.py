"""Traced graphs give the formulas of the hand-written families, once the config's numbers are put in.

GPT-2, LLaMA, Mistral, Qwen2 and Mixtral, each from one small config: the traced model's formulas in B and
T (and the KV cache in C) against the family built from the same config's fields (its ``from_hf``, fp32 as
the traced model runs), with every symbol but B, T and C given its number. Compared exactly: parameters,
forward and training matmul FLOPs, and the KV-cache bytes (the tracer tags the keys after RoPE and the
values, found from each attention back through views and ``repeat_kv``).
"""

from __future__ import annotations

import pytest
import sympy
import torch  # noqa: F401  (the torch marker)

import costmodel
from costmodel.families import families
from costmodel.symbols import B, C, T
from tests.trace.models import config, traced

CASES = {"gpt2": "gpt", "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "mixtral": "mixtral"}
KEYS = ("params.total", "flops.matmul.forward", "flops.matmul.training", "memory_bytes.kv_cache")


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_traced_formulas_equal_the_family(model_type):
    fam = families()[CASES[model_type]]
    settings = fam.from_hf(config(model_type).to_dict())
    hand = costmodel.load(fam.name, {**settings, "dtype": "fp32"})
    numbers = {s: v for s, v in hand.values.items() if s not in (B, T, C)}
    expected = costmodel.derive(hand)["expressions"]
    got = costmodel.derive(traced(model_type))["expressions"]
    for key in KEYS:
        assert sympy.expand(got[key] - expected[key].xreplace(numbers)) == 0, (model_type, key, got[key])
