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
