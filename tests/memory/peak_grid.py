"""The grid of settings on which the engine's training peak is checked against MemTracker (``memtracker.py``), and
the engine's side of each: ``costmodel.estimate`` of the same config.json with the options that say the same.

Shared by ``test_peak_memtracker.py`` (a part of it, in CI) and ``scripts/memtracker_table.py`` (all of it,
written to ``tests/data/memtracker.json``, which docs/memory.md's table reads).
"""

from __future__ import annotations

import os
import tempfile

import costmodel

#: (family, setting changes) of the grid, from a base of B 2, T 64, autocast, SDPA, foreach.
GRID = [
    (family, changes)
    for family in ("llama", "qwen3", "gpt2")
    for changes in (
        {},
        {"seq": 256},
        {"batch": 4, "seq": 128},
        {"seq": 8},
        {"precision": "pure"},
        {"attention": "eager"},
        {"precision": "pure", "attention": "eager"},
        {"optimizer_impl": "fused"},
        {"optimizer_impl": "forloop"},
        {"checkpointing": True},
        {"micro_batches": 2},
        {"set_to_none": False},
    )
]

PRECISION = {"autocast": "bf16-autocast", "pure": "bf16-pure", "fp32": "fp32"}


def options(cfg, s, implementation: str = "transformers") -> dict:
    """The estimate options of MemTracker's setting ``s`` (``memtracker.Setting``) on ``cfg``."""
    attention = s.attention
    if attention == "eager" and cfg.model_type == "gpt2" and s.precision == "pure":
        attention = "unfused"  # GPT-2 softmaxes in the scores' dtype (test_transformers_saved.py)
    out = dict(
        batch=s.batch * s.micro_batches,
        seq=s.seq,
        precision=PRECISION[s.precision],
        attention=attention,
        recompute="full" if s.checkpointing else "none",
    )
    if s.micro_batches > 1:
        out["micro_batch"] = s.batch
    if implementation == "transformers":
        out.update(implementation="transformers", optimizer_impl=s.optimizer_impl)
        if not s.set_to_none:
            out["grads_resident"] = True
    return out


def engine(cfg, s, implementation: str = "transformers") -> tuple[int, str, dict]:
    """(peak bytes, memory.peak_at, memory_bytes.peak_breakdown) of the estimate of ``cfg`` under ``s``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        cfg.to_json_file(path)
        r = costmodel.estimate(path, **options(cfg, s, implementation))
    return r["memory_bytes"]["peak"], r["memory"]["peak_at"], r["memory_bytes"].get("peak_breakdown", {})


def phase(label: str) -> str:
    """The phase of a ``memory.peak_at`` label, in MemTracker's words (``memtracker.measure``'s phase)."""
    if label.startswith("forward"):
        return "forward"
    return "optimizer step" if label == "optimizer step" else "backward"
