"""Every decoder-only model type the tracer covers, traced once and checked against PyTorch itself.

For each type (a small config built in code, on meta; see ``tests/trace/models.py``), the traced graph's
formulas in B and T, substituted at two (B, T), must equal exactly:

* ``flops.matmul.forward`` and ``flops.matmul.training``: ``FlopCounterMode`` over a forward, and over a
  forward plus the backward of the loss (labels given, so the loss is in both graphs);
* ``params.total``: the sum of ``numel()`` of the model's parameters (tied weights once; parameters the
  forward never reads, such as a decoder's cross-attention without an encoder, are counted too).

Each type costs a torch.export (seconds), so the default run checks :data:`CORE`, one type of each kind
of structure, and ``COSTMODEL_SLOW=1`` checks all of :data:`MODEL_TYPES`. The types the tracer cannot
trace, and why, are listed in docs/tracer.md (its list of traced types is checked against this one).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch  # noqa: F401  (the torch marker)

from costmodel.graph.analysis import totals
from costmodel.symbols import B, T
from tests.trace.models import built, flop_counts, traced

#: Model types traced and checked (a mixture of experts runs its ``batched_mm`` experts).
MODEL_TYPES = (
    "afmoe",
    "apertus",
    "arcee",
    "bart",
    "bert",
    "biogpt",
    "bitnet",
    "bloom",
    "codegen",
    "cohere",
    "cohere2",
    "cohere2_moe",
    "ctrl",
    "cwm",
    "diffllama",
    "gemma",
    "gemma2",
    "gemma3_text",
    "glm",
    "glm4",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "gptj",
    "granite",
    "helium",
    "lfm2",
    "llama",
    "ministral",
    "mistral",
    "mixtral",
    "nemotron",
    "olmo",
    "olmo2",
    "olmo3",
    "olmoe",
    "opt",
    "persimmon",
    "phi",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "seed_oss",
    "smollm3",
    "stablelm",
    "starcoder2",
)
#: Checked in every run: the five types of test_families (traced once for both), a decoder of an
#: encoder-decoder (cross-attention never read), ALiBi, soft-capped logits with sliding windows, and
#: depthwise short convolutions (``conv1d`` with groups).
CORE = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "bart", "bloom", "gemma2", "lfm2")
POINTS = ((2, 8), (3, 13))


@pytest.mark.parametrize(
    "model_type", [t if t in CORE else pytest.param(t, marks=pytest.mark.slow) for t in MODEL_TYPES]
)
def test_traced_counts_equal_pytorch(model_type):
    m = traced(model_type)
    t = totals(m.graph)
    assert t.params == sum(p.numel() for p in built(model_type).parameters())
    for batch, seq in POINTS:
        at = {B: batch, T: seq}
        ours = (int(t.forward.matmul_flops.subs(at)), int(t.training.matmul_flops.subs(at)))
        assert ours == flop_counts(model_type, batch, seq), (model_type, batch, seq)


def test_the_docs_list_the_traced_types():
    doc = (Path(__file__).parents[2] / "docs" / "tracer.md").read_text(encoding="utf-8")
    listed = doc.split("<!-- traced-types -->")[1].split("<!-- end traced-types -->")[0]
    assert tuple(sorted(re.findall(r"`([\w-]+)`", listed))) == tuple(sorted(MODEL_TYPES))
    assert set(CORE) <= set(MODEL_TYPES)
