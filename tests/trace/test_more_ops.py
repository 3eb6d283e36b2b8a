"""ATen ops met in the reach sweep that had no mapping: ``concatenate`` (zamba2's shared transformer) is a
concatenation, ``detach_`` (gpt_neo's attention) a view with no gradient."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import costmodel  # noqa: E402


class Both(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(8, 8)
        self.u = torch.nn.Linear(16, 4, bias=False)

    def forward(self, x):
        y = self.w(x)
        mask = (y > 0).float()
        mask.detach_()  # in place, as gpt_neo's attention detaches its mask
        return self.u(torch.concatenate([y, y * mask], dim=-1)).sum()


def test_concatenate_and_detach_in_place_are_mapped():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        module = Both()
    m = costmodel.trace(module, {"x": torch.zeros(2, 5, 8, device="meta")}, "B,T")
    x = torch.zeros(3, 7, 8, device="meta")
    with FakeTensorMode(allow_non_fake_inputs=True):
        with FlopCounterMode(display=False) as forward:
            module(x)
    r = costmodel.estimate(m, batch=3, seq=7)
    assert r["flops"]["matmul"]["forward"] == forward.get_total_flops()
    assert r["params"]["total"] == sum(p.numel() for p in module.parameters())  # 8·8 + 8 + 16·4 = 136
