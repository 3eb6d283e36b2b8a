"""The tracer's contract on small ``nn.Module`` s: what it returns, folds, refuses, and that torch stays optional."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

import costmodel
from costmodel import CostModelError
from costmodel.cli import main
from costmodel.symbols import B, T

D, F = 16, 48


class Block(nn.Module):
    """A pre-norm attention + MLP block: every kind of op the tracer maps to a core kind."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D, bias=False)
        self.up, self.down = nn.Linear(D, F), nn.Linear(F, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 2, D // 2).unbind(2)
        y = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.out(y.transpose(1, 2).reshape(b, t, D))
        return x + self.down(nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, D)
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(D, 50, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def traced(layers: int = 3):
    with torch.device("meta"):
        net = Net(layers)
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    return net, costmodel.trace(net, {"ids": ids}, dynamic={"ids": {0: "B", 1: "T"}})


def test_every_verb_accepts_a_traced_model():
    net, m = traced()
    r = costmodel.estimate(m, batch=4, seq=32)
    preset = costmodel.estimate("gpt2-small", batch=4, seq=32)
    assert set(r.flat) >= {k for k in preset.flat if not k.startswith(("source", "config."))}  # the JSON contract
    assert r["params"]["total"] == sum(p.numel() for p in net.parameters())
    forward = costmodel.derive(m)["expressions"]["flops.matmul.forward"]
    assert forward.free_symbols == {B, T} and r["flops"]["matmul"]["forward"] == forward.subs({B: 4, T: 32})
    assert costmodel.sweep(m, {"B": [1, 2], "T": [16, 32]}, ["flops.matmul.forward"])["flops.matmul.forward"][0] > 0
    assert costmodel.roofline(m, "h100-sxm", batch=1, seq=32)
    assert costmodel.derive(m)["expressions"]["memory_bytes.kv_cache"] != 0  # keys and values tagged
    assert "B" in costmodel.report(m, batch=2, seq=16).to_markdown()


def test_repeated_layers_fold_into_one_block():
    small, big = traced(2)[1], traced(6)[1]
    assert small.graph.number_of_nodes() == big.graph.number_of_nodes()
    assert big.graph.graph["traced"]["folded"] == {"layers": 6}


def test_an_unmapped_aten_op_is_named_not_counted_as_zero():
    class Spectral(nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    with pytest.raises(CostModelError, match=r"aten\.fft_rfft\.default"):
        costmodel.trace(Spectral(), {"x": torch.zeros(2, 8, device="meta")}, dynamic="B,T")


def test_example_sizes_must_not_be_specialised():
    with pytest.raises(CostModelError, match="at least 2"):
        costmodel.trace(nn.Linear(4, 4), {"input": torch.zeros(1, 4, device="meta")}, dynamic="B")


def test_cli_trace_prints_json_of_the_traced_model(tmp_path, capsys):
    path = tmp_path / "net.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\ndef factory():\n    with torch.device('meta'):\n"
        "        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))\n"
        "    return m, {'input': torch.zeros(2, 5, 8, device='meta')}\n"
    )
    assert main(["trace", f"{path}:factory", "--dynamic", "B,T", "--format", "json", "--batch", "2", "--seq", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimate"]["flops"]["matmul"]["forward"] == 2 * 2 * 5 * (8 * 16 + 16 * 8)  # 2·B·T·(8·16 + 16·8)
    assert out["derive"]["expressions"]["flops.matmul.forward"] == "512*B*T"


def test_cli_derive_from_config_class_needs_sizes(capsys):
    assert main(["derive", "--from-config-class", "transformers:LlamaConfig"]) == 2
    assert main(["derive"]) == 2
    assert "expected MODEL" in capsys.readouterr().err


def test_the_engine_imports_torch_only_inside_the_tracer():
    code = (
        "import sys, costmodel, costmodel.tracer, costmodel.tracer.aten, costmodel.tracer.recover, "
        "costmodel.cli.trace; costmodel.trace; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
