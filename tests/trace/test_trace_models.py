"""Every decoder-only model type the tracer covers, traced once and checked against PyTorch itself.

For each type (a small config built in code, on meta; see ``tests/trace/models.py``), the traced graph's
formulas in B and T, substituted at two (B, T), must equal exactly:

* ``flops.matmul.forward`` and ``flops.matmul.training``: ``FlopCounterMode`` over a forward, and over a
  forward plus the backward of the loss (labels given, so the loss is in both graphs);
* ``params.total``: the sum of ``numel()`` of the model's parameters (tied weights once; parameters the
  forward never reads, such as a decoder's cross-attention without an encoder, are counted too).

Types the tracer cannot trace, and why, are listed in docs/tracer.md.
"""

from __future__ import annotations

import pytest
import torch  # noqa: F401  (the torch marker)

from costmodel.graph.analysis import totals
from costmodel.symbols import B, T
from tests.trace.models import built, flop_counts, traced

#: Model types traced and checked (a mixture of experts runs its ``batched_mm`` experts).
MODEL_TYPES = (
    "afmoe", "apertus", "arcee", "bart", "bert", "biogpt", "bitnet", "bloom", "codegen", "cohere", "cohere2",
    "cohere2_moe", "ctrl", "cwm", "diffllama", "gemma", "gemma2", "gemma3_text", "gpt2", "llama", "mistral",
    "mixtral", "qwen2", "qwen3",
)
POINTS = ((2, 8), (3, 13))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_traced_counts_equal_pytorch(model_type):
    m = traced(model_type)
    t = totals(m.graph)
    assert t.params == sum(p.numel() for p in built(model_type).parameters())
    for batch, seq in POINTS:
        at = {B: batch, T: seq}
        ours = (int(t.forward.matmul_flops.subs(at)), int(t.training.matmul_flops.subs(at)))
        assert ours == flop_counts(model_type, batch, seq), (model_type, batch, seq)
