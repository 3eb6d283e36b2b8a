"""The predictors other simulators plug in (costmodel.serving.predictor), driven by small fake harnesses shaped like
SGLang's simulator loop and Vidur's replica stage (neither is a dependency)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import costmodel
from costmodel.devices.table import device
from costmodel.options import Options
from costmodel.serving.predictor import SGLangPredictor, VidurPredictor, replica_step
from costmodel.serving.profiles import profile


@pytest.fixture(scope="module")
def step():
    return replica_step(costmodel.load("llama3-8b"), device("h100-sxm"), Options.make(), profile("vllm-v1"))


def test_sglang_like_loop(step):
    """A fake SGLang simulator: two requests, one prefill step then decodes, the clock advanced by the predictor."""
    p = SGLangPredictor(step)
    running = [{"extend_input_len": 100, "prefix_len": 0}, SimpleNamespace(extend_input_len=50, prefix_len=20)]
    clock = p.predict_infer_time(running)
    assert clock == step([(100, 0), (50, 20)])
    past = [100, 70]
    for _ in range(5):  # each decode step: one new token per request after its past
        clock += p.predict_infer_time([(1, x) for x in past])
        past = [x + 1 for x in past]
    assert clock == pytest.approx(step([(100, 0), (50, 20)]) + sum(step([(1, 100 + i), (1, 70 + i)]) for i in range(5)))
    with pytest.raises(costmodel.CostModelError, match="new_tokens"):
        p.predict_infer_time([(0, 5)])


def test_vidur_like_stage(step):
    """A fake Vidur batch: requests with num_processed_tokens, num_tokens per request."""
    v = VidurPredictor(step)
    batch = SimpleNamespace(
        requests=[SimpleNamespace(num_processed_tokens=0), SimpleNamespace(num_processed_tokens=300)],
        num_tokens=[256, 1],
    )
    t = v.get_execution_time(batch, 0)
    assert t.model_time == pytest.approx(step([(256, 0), (1, 300)]), rel=1e-12)
    assert t.model_time_ms == pytest.approx(1e3 * t.model_time) and t.total_time == t.model_time
    assert t.num_layers == 32 and t.tensor_parallel_communication_time == 0
    with pytest.raises(costmodel.CostModelError, match="num_processed_tokens"):
        v.get_execution_time(SimpleNamespace(requests=[object()], num_tokens=[1]))
