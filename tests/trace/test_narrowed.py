"""A module torch.export refuses only at the edge of T's range (a guard ``T != T_max``, gpt_neo's at 4096) is
exported with the range one shorter, T kept symbolic, and the note says so (costmodel/tracer/__init__.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import costmodel  # noqa: E402
from costmodel.symbols import T  # noqa: E402


class Edge(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.w(x)
        if x.shape[1] == 32:  # a branch only the last position of the table takes
            y = y * 2
        return y.sum()


def test_a_guard_at_the_edge_narrows_the_range():
    with torch.device("meta"):
        module = Edge()
    x = torch.zeros(2, 5, 8, device="meta")
    m = costmodel.trace(module, {"x": x}, {"x": {0: "B", 1: "T"}}, ranges={"T": (2, 32)})
    assert "fixed_T" not in m.graph.graph["traced"]  # T stayed symbolic
    assert m.values[T] == 31 and "narrowed by one" in m.notes[0]
    flops = costmodel.estimate(m, batch=3, seq=20)["flops"]["matmul"]["forward"]
    assert flops == 2 * 3 * 20 * 8 * 8  # FlopCounterMode's 2·B·T·d_in·d_out for one linear
