"""Issue 30, item 8: inference defaults to fused attention (no serving engine runs unfused attention) and says
so; training keeps the scores-materialised default; a choice made stays made."""

import costmodel
from costmodel.options import Options


def test_inference_defaults_to_fused_attention_and_says_so():
    r = costmodel.estimate("qwen3-32b", inference=True, context=32768)
    assert r["conventions"]["attention"] == "flash" and r["conventions"]["attention_default"] is True
    assert "inference default" in r["memory"]["attention_implementation"]
    fused = costmodel.estimate("qwen3-32b", inference=True, context=32768, flash=True)
    unfused = costmodel.estimate("qwen3-32b", inference=True, context=32768, attention="unfused")
    # the default is the fused kernel's number: the prefill's working set without the 64 × 32k × 32k scores
    assert r["memory_bytes"]["activations"] == fused["memory_bytes"]["activations"]
    assert r["memory_bytes"]["activations"] < unfused["memory_bytes"]["activations"]
    # unfused keeps at least one B·h·P² score tensor in bf16: 64 heads × 32,768² × 2 bytes = 137.4 GB
    assert unfused["memory_bytes"]["activations"] >= 64 * 32768**2 * 2


def test_the_default_follows_the_choice_of_inference():
    o = Options.make(inference=True)
    assert (o.attention, o.attention_default) == ("flash", True)
    assert Options.make(o, inference=False).attention == "unfused"  # training: scores materialised
    assert Options.make(inference=True, flash=False).attention == "unfused"  # --no-flash is a choice
    assert Options.make(inference=True, attention="eager").attention == "eager"
    assert Options().attention == "unfused" and Options.make(flash=True).attention_default is False
