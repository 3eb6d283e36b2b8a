"""A module torch.export cannot export with a symbolic T is exported at several fixed T and T is fitted back
exactly (issue 27): aria_text fails with "Constraints violated (T)" (a guard on ``min(64, 64·T)``).

The reference is PyTorch's own: FlopCounterMode over one forward and one backward under a FakeTensorMode, at
sequence lengths the fit never saw, and ``numel()``.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import costmodel  # noqa: E402
from costmodel import CostModelError  # noqa: E402
from costmodel.symbols import T  # noqa: E402
from costmodel.tracer.hf import causal_lm, example_inputs, small_config, trace_causal_lm  # noqa: E402


@functools.cache
def aria():
    config = small_config("aria_text", max_position_embeddings=4096)
    return config, causal_lm(config), trace_causal_lm(config)


def torch_flops(model, batch: int, seq: int) -> tuple[int, int]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FakeTensorMode(allow_non_fake_inputs=True):
        with FlopCounterMode(display=False) as forward:
            out = model(input_ids=ids, labels=ids.clone())
        with FlopCounterMode(display=False) as backward:
            out.loss.backward()
    return forward.get_total_flops(), forward.get_total_flops() + backward.get_total_flops()


@pytest.mark.parametrize("batch, seq", [(2, 64), (3, 200)])  # neither T is one the fit saw (48, 80, 96, 112; 144)
def test_the_fit_in_t_is_exact_where_it_was_not_fitted(batch, seq):
    _, model, m = aria()
    r = costmodel.estimate(m, batch=batch, seq=seq)
    forward, training = torch_flops(model, batch, seq)
    assert (r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]) == (forward, training)
    assert r["params"]["total"] == sum(p.numel() for p in model.parameters())


def test_the_fit_says_what_it_did():
    _, _, m = aria()
    fixed = m.graph.graph["traced"]["fixed_T"]
    assert fixed["fitted"] == [48, 80, 96, 112] and fixed["checked"] == [144]  # 16·k, skipping 32, 64, 128: sizes
    assert fixed["flops_degree"] == 2  # T×T attention scores
    assert "T fitted" in m.notes[0] and "degree 2" in m.notes[0] and "checked at T = 144" in m.notes[0]
    formula = costmodel.derive(m)["expressions"]["flops.matmul.forward"]
    assert "T**2" in str(formula)
    assert m.values[T] == 4096  # the position table, as a symbolic trace's range gives


def test_without_the_fit_torchs_error_stays():
    config, model, _ = aria()
    inputs, dynamic, ranges = example_inputs(config)
    with pytest.raises(CostModelError, match=r"Constraints violated \(T\)"):
        costmodel.trace(model, inputs, dynamic, ranges=ranges, t_step=None)
