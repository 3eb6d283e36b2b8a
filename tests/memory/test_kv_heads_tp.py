"""Issue 30, item 4: tensor parallelism gives each device whole KV heads; a tp above the kv-head count
replicates them (llama3-8b's 8 kv heads under tp 16: one head a device, as under tp 8), where the cache was
divided by 16: 1.07 GB a device instead of 2.15 GB."""

import contextlib
import io
import json

import pytest

from costmodel.cli import main

# k and v × L = 32 layers × C = 131,072 tokens × n_kv = 8 heads × d_head = 128 × 2 bytes (bf16), B = 1
KV = 2 * 32 * 131_072 * 8 * 128 * 2  # 17,179,869,184


def kv_per_device(tp: int) -> int:
    out = io.StringIO()
    argv = ["estimate", "llama3-8b", "--inference", "--context", "128k", "--tp", str(tp), "--flash", "--json"]
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())["memory_bytes"]["kv_cache"]


@pytest.mark.parametrize(
    "tp, heads_per_device",
    [(1, 8), (2, 4), (8, 1), (16, 1)],  # ⌈8 / tp⌉ of the 8 kv heads
)
def test_each_device_keeps_whole_kv_heads(tp, heads_per_device):
    assert kv_per_device(tp) == KV * heads_per_device // 8  # tp 16: 2,147,483,648 (2.15 GB), not 1.07 GB


def test_a_tp_that_divides_neither_way_is_refused():
    """phi3-medium-4k: 40 query heads, 10 kv heads, d_ff 17,920. tp 4 divides the query heads (40/4), the kv
    projection (10·128/4 = 320) and d_ff (4,480), but not the 10 kv heads, nor they it: each device's 10 query
    heads would straddle kv heads (device 1 holds query heads 10..19, kv heads 2 and 3 at 4 query heads a kv
    head). It kept ⌈10/4⌉ = 3 heads a device; vLLM refuses the layout, and so does the estimate now."""
    err = io.StringIO()
    argv = ["estimate", "phi3-medium-4k", "--inference", "--context", "4k", "--tp", "4"]
    with contextlib.redirect_stderr(err):
        assert main(argv) == 2
    assert "the 10 kv heads" in err.getvalue() and "divide neither" in err.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # tp 2 divides the 10 heads: 5 a device
        assert main([*argv[:-1], "2", "--json"]) == 0
    # k and v × L = 40 × C = 4,096 × 10 heads × 128 × 2 bytes, sliding window W = 2047 keeps its last W − 1 = 2046
    whole = 2 * 40 * 2046 * 10 * 128 * 2
    assert json.loads(out.getvalue())["memory_bytes"]["kv_cache"] == whole // 2
