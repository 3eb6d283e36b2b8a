"""Issue 30, item 9: one answer to "how many users fit". ``roofline --decode`` said 8, ``fit --inference`` 5 (now
6, the engine's KV pool) and ``estimate --inference --batch 8`` "does not fit", each by its own rule. All three now
count the sequences a serving engine's KV pool holds (``costmodel.serving.memory.pool``), the estimate beside its
own reading (every prompt prefilled at once), in ``memory.serving``.

qwen3-32b on one h200 (141 GB), context 32,768, vLLM v1's profile (0.9 of the memory, 8,192-token chunks, 16-token
blocks, a 1.5 GB reserve): weights 65,524,246,528 B; one chunk's prefill 1,258,291,200 B; KV per token
2 (k, v) · 64 layers · 8 kv heads · 128 · 2 B = 262,144 B. Free: 0.9 · 141e9 − 65,524,246,528 − 1,258,291,200 −
1,500,000,000 = 58,617,462,272 B; blocks ⌊58,617,462,272 / (16 · 262,144)⌋ = 13,975; a sequence takes
32,768 / 16 = 2,048 blocks: ⌊13,975 / 2,048⌋ = 6 sequences.
"""

import contextlib
import io
import json

from costmodel.cli import main

ARGS = ["qwen3-32b", "--hardware", "h200", "--context", "32k"]


def cli_json(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


def test_three_doors_count_the_same_sequences():
    fit = cli_json("fit", *ARGS, "--inference")
    assert fit["largest"] == 6 and fit["engine"]["num_blocks"] == 13_975
    roof = cli_json("roofline", *ARGS, "--decode")["decode"]
    assert roof["max_batch_fits"] == 6  # was 8: weights + B·KV + the decode step's working set
    assert roof["inference_memory"] == fit["inference_memory"]
    assert [r["fits"] for r in roof["throughput"][:4]] == [True, True, True, False]  # B = 1, 2, 4, 8; bools
    for b, fits in ((6, True), (8, False)):
        est = cli_json("estimate", *ARGS, "--inference", "--batch", str(b))["memory"]
        assert est["serving"]["sequences"] == 6 and est["serving"]["fits"] is fits
        assert est["serving"]["engine"] == {k: fit["engine"][k] for k in est["serving"]["engine"]}
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["estimate", *ARGS, "--inference", "--batch", "8"]) == 0
    assert "holds 6 sequences of 32,768 tokens" in " ".join(text.getvalue().split())


def test_a_recurrent_state_keeps_the_prefill_reading():
    """mamba-130m keeps no KV cache: the pool holds nothing, and fit said it does not fit at all."""
    fit = cli_json("fit", "mamba-130m", "--hardware", "h100-sxm", "--inference", "--context", "4k")
    assert fit["fits"] and fit["largest"] > 1000
    roof = cli_json("roofline", "mamba-130m", "--hardware", "h100-sxm", "--decode", "--context", "4k")["decode"]
    assert roof["max_batch_fits"] > 1000 and "recurrent state" in roof["inference_memory"]
    assert "serving" not in cli_json("estimate", "mamba-130m", "--hardware", "h100-sxm", "--inference")["memory"]
