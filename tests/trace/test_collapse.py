"""A module whose fixed-T traces differ op by op (a Python loop over positions: the op count grows with T) is
traced at several T, each trace's ops summed by kind and shape, and every size and count fitted in T
(costmodel/tracer/collapse.py, issue 27).

The reference is PyTorch's own: FlopCounterMode over one forward and one backward under a FakeTensorMode, at
sequence lengths the fit never saw, and ``numel()``.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

import costmodel  # noqa: E402
from costmodel import CostModelError  # noqa: E402


class Recurrent(torch.nn.Module):
    """x = E[ids], h_t = tanh(W x_t + a ⊙ h_{t-1}), one step per position in Python; the states stacked,
    projected and summed."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.e = torch.nn.Embedding(16, d)
        self.w = torch.nn.Linear(d, d)
        self.u = torch.nn.Linear(d, d, bias=False)
        self.a = torch.nn.Parameter(torch.ones(d))

    def forward(self, ids):
        x = self.e(ids)
        h = torch.zeros_like(x[:, 0])
        outs = []
        for i in range(x.shape[1]):
            h = torch.tanh(self.w(x[:, i]) + self.a * h)
            outs.append(h)
        return self.u(torch.stack(outs, 1)).sum()


@functools.cache
def traced():
    with torch.device("meta"):
        module = Recurrent()
    ids = torch.zeros(2, 6, dtype=torch.long, device="meta")
    return module, costmodel.trace(module, {"ids": ids}, {"ids": {0: "B", 1: "T"}}, t_step=1)


def torch_flops(module, batch: int, seq: int) -> tuple[int, int]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FakeTensorMode(allow_non_fake_inputs=True):
        with FlopCounterMode(display=False) as forward:
            loss = module(ids)
        with FlopCounterMode(display=False) as backward:
            loss.backward()
    return forward.get_total_flops(), forward.get_total_flops() + backward.get_total_flops()


@pytest.mark.parametrize("batch, seq", [(2, 9), (3, 23)])  # the fit saw T = 3, 4, 5, 6 and checked 7
def test_the_loop_fitted_in_t_is_exact_where_it_was_not_fitted(batch, seq):
    module, m = traced()
    r = costmodel.estimate(m, batch=batch, seq=seq)
    assert (r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]) == torch_flops(module, batch, seq)
    assert r["params"]["total"] == sum(p.numel() for p in module.parameters())  # 16·8 + 8·8 + 8 + 8·8 + 8 = 272


def test_the_fit_says_it_summed_the_ops():
    _, m = traced()
    fixed = m.graph.graph["traced"]["fixed_T"]
    assert fixed["fit"] == "collapsed" and fixed["flops_degree"] == 1
    assert "summed by kind and shape" in m.notes[0]
    counts = sorted(str(d["count"]) for _, d in m.graph.nodes(data=True) if "op" in d)
    assert "T - 1" in counts  # the steps after the first read the weight the first step counted


def test_without_a_loop_the_fit_is_op_by_op():
    """A module whose traces have one structure keeps the op-by-op fit (no op summed)."""
    from costmodel.tracer.collapse import collapse

    _, m = traced()
    entries, member = collapse(m.graph)
    assert len(entries) == sum(1 for n in m.graph if n in member)  # collapsing the collapsed graph merges nothing


def test_ops_that_differ_at_another_t_are_refused():
    class Grows(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Linear(8, 8)

        def forward(self, x):
            for i in range(1, x.shape[1]):  # a prefix of a growing length: a new shape at every step
                x = x + self.w(x[:, :i]).sum(1, keepdim=True)
            return x.sum()

    with torch.device("meta"):
        module = Grows()
    with pytest.raises(CostModelError, match="summed by kind and shape"):
        costmodel.trace(module, {"x": torch.zeros(2, 6, 8, device="meta")}, {"x": {0: "B", 1: "T"}}, t_step=1)
