"""Configs cannot drive memory or time past their bounds (issue 31, item 18): layer counts and lists are
bounded before a family builds per-layer patterns, an error quotes no 200,000-entry list, and a long
``mlp_only_layers`` is read in O(L + n), not O(L·n)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from costmodel.families.hf import MAX_LAYERS

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 100,
    "max_position_embeddings": 64,
}
MOE = {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}


def _cli(cfg: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.run(
        [sys.executable, "-m", "costmodel", "estimate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"COSTMODEL_CACHE_DIR": "off", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_a_200000_entry_layer_types_is_one_short_line(tmp_path):
    cfg = {**BASE, "model_type": "gemma3_text", "num_hidden_layers": 4, "sliding_window": 16}
    cfg["layer_types"] = ["full_attention"] * 200_000
    done = _cli(cfg, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 400, done.stderr[:400]
    assert "'layer_types' lists 200,000 entries; expected at most 100,000" in done.stderr


def test_200000_mlp_only_layers_are_refused(tmp_path):
    done = _cli({**BASE, **MOE, "num_hidden_layers": 8, "mlp_only_layers": list(range(200_000))}, tmp_path)
    assert done.returncode == 2 and "'mlp_only_layers' lists 200,000 entries" in done.stderr, done.stderr[:400]


def test_mlp_only_layers_at_the_bound_are_linear(tmp_path):
    """L = 100,000 with 50,000 dense layers listed: 5·10^9 list look-ups before, a set's 10^5 now."""
    cfg = {**BASE, **MOE, "num_hidden_layers": MAX_LAYERS, "mlp_only_layers": list(range(0, MAX_LAYERS, 2))}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    start = time.monotonic()
    from costmodel.families import load

    m = load(str(path))
    assert time.monotonic() - start < 30  # a hang guard, not a benchmark
    assert m.values  # it built


def test_every_dense_layer_listed_is_one_short_line(tmp_path):
    cfg = {**BASE, **MOE, "num_hidden_layers": 1000, "mlp_only_layers": list(range(1000))}
    done = _cli(cfg, tmp_path)
    assert done.returncode == 2 and "mlp_only_layers = 1,000 layers" in done.stderr, done.stderr[:400]
    assert len(done.stderr) < 400
