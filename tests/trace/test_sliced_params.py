"""A parameter read in slices (hy_v4's ``scale.unbind(0)``, ``base.split(4)``) is counted whole: its first reader counts its
slice, later readers are tied to it, and the rest is a ``parameter`` op of its own (costmodel/tracer/aten.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import costmodel  # noqa: E402


class Sliced(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(8, 8, bias=False)
        self.scale = torch.nn.Parameter(torch.ones(2))
        self.base = torch.nn.Parameter(torch.zeros(8))

    def forward(self, x):
        y = self.w(x)
        pre_b, post_b = self.base.split(4, dim=-1)  # as hy_v4's hyper-connections read theirs
        pre_scale, post_scale = self.scale.unbind(0)
        a = y[..., :4] * pre_scale + pre_b
        b = y[..., 4:] * post_scale + post_b
        return (a + b).sum()


def test_a_parameter_read_in_slices_is_counted_whole():
    with torch.device("meta"):
        module = Sliced()
    m = costmodel.trace(module, {"x": torch.zeros(2, 5, 8, device="meta")}, "B,T")
    numel = sum(p.numel() for p in module.parameters())  # 8·8 + 2 + 8 = 74
    assert costmodel.estimate(m, batch=2, seq=5)["params"]["total"] == numel
