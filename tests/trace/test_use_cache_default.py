"""A transformers model left at use_cache=True traces (issue 27): the cache is turned off for the export."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_trace_with_use_cache_left_on():
    import costmodel
    from costmodel.tracer.hf import small_config

    config = small_config("llama")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    assert model.config.use_cache is True
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    m = costmodel.trace(model, {"input_ids": ids}, dynamic={"input_ids": {0: "B", 1: "T"}}, ranges={"T": (2, 512)})
    assert model.config.use_cache is True  # put back
    assert costmodel.estimate(m, batch=1, seq=8)["params"]["total"] == sum(p.numel() for p in model.parameters())
