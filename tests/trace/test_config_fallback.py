"""A config.json whose model_type no built-in family reads is traced when torch is installed (issue 27): its
transformers model built from the config on meta, exported, counted; ``--via`` chooses family or trace.

The reference is PyTorch's own, never the engine: ``numel()`` of the model transformers builds from the same
file, and ``FlopCounterMode`` over its forward (tests/trace/models.py). helium is one of the 145 types the
measurement (shared notes, trace-reach.md) found tracing exactly, and no family reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import costmodel  # noqa: E402
from costmodel import CostModelError  # noqa: E402
from costmodel.families import hf as hf_config  # noqa: E402
from tests.trace.models import built, config, flop_counts  # noqa: E402

# helium's small config: d=64, L=2, h=4, n_kv=2, d_head=16, d_ff=128, V=128, embeddings untied.
# per layer: q, o 64·64 = 4,096 each; k, v 64·32 = 2,048 each; gate, up, down 64·128 = 8,192 each; 2 norms 64
#   = 12,288 + 24,576 + 128 = 36,992; × 2 layers = 73,984; embedding + head 2 · 128·64 = 16,384; final norm 64
PARAMS = 73_984 + 16_384 + 64  # = 90,432
# B=2, T=16: 32 tokens. matmuls 2 · 32 · (12,288 + 24,576) · 2 layers = 4,718,592; head 2 · 32 · 8,192 = 524,288;
# scores and context 2 · 2 · 2 · 4 · 16 · 16 · 16 · 2 layers = 262,144
FLOPS = 4_718_592 + 524_288 + 262_144  # = 5,505,024


@pytest.fixture(scope="module")
def helium(tmp_path_factory):
    path = tmp_path_factory.mktemp("helium") / "config.json"
    config("helium").save_pretrained(path.parent)
    return str(path)


def test_an_unknown_model_type_is_traced_and_exact(helium):
    r = costmodel.estimate(helium, batch=2, seq=16, precision="fp32")
    assert r["params"]["total"] == PARAMS == sum(p.numel() for p in built("helium").parameters())
    assert r["flops"]["matmul"]["forward"] == FLOPS == flop_counts("helium", 2, 16)[0]
    assert r["flops"]["matmul"]["training"] == flop_counts("helium", 2, 16)[1]
    assert r["source"] == "traced"
    assert any("helium: traced" in n and "HeliumForCausalLM" in n for n in r["notes"])
    # a second load of the same file is the process's traced graph (tracing took seconds)
    assert costmodel.load(helium).graph is costmodel.load(helium).graph


def test_via_family_keeps_todays_error(helium):
    with pytest.raises(CostModelError, match="unsupported model_type 'helium'.*--via trace"):
        costmodel.estimate(helium, via="family")


def test_without_torch_the_error_names_the_extra(helium, monkeypatch):
    monkeypatch.setattr(hf_config, "can_trace", lambda: False)
    with pytest.raises(CostModelError, match=r"unsupported model_type 'helium'.*pip install 'costmodel\[torch\]'"):
        costmodel.load(helium)
    with pytest.raises(CostModelError, match=r"tracing a config needs torch.*costmodel\[torch\]"):
        costmodel.load(helium, via="trace")


def test_via_trace_traces_a_type_a_family_reads(tmp_path):
    """llama has a family: --via trace counts the transformers model instead, and both equal numel."""
    config("llama").save_pretrained(tmp_path)
    path = str(tmp_path / "config.json")
    out = subprocess.run(
        [sys.executable, "-m", "costmodel", "estimate", path, "--via", "trace", "--json", "--precision", "fp32"],
        capture_output=True,
        text=True,
        check=True,
    )
    traced = json.loads(out.stdout)
    family = costmodel.estimate(path, precision="fp32")
    numel = sum(p.numel() for p in built("llama").parameters())
    assert traced["source"] == "traced" and family.get("source") != "traced"
    assert traced["params"]["total"] == family["params"]["total"] == numel


def test_via_trace_needs_a_config_and_settings_are_its_symbols(helium):
    with pytest.raises(CostModelError, match="via 'trace' traces a config.json"):
        costmodel.load("gpt2-small", via="trace")
    with pytest.raises(CostModelError, match="unknown setting 'd'; a traced config's sizes are the file's"):
        costmodel.load(helium, {"d": 128})
    assert costmodel.estimate(helium, settings={"T": 8}, batch=1)["config"]["T"] == 8
