"""``--chunk 1`` over millions of configs cannot take hours (issue 31, item 19): the chunk engine runs at most
``MAX_CHUNKS`` chunks, raising a smaller chunk to size / MAX_CHUNKS; the result is the same."""

from __future__ import annotations

from costmodel.formulas import chunks


class _Counted:
    size = 10**7

    def __init__(self) -> None:
        self.asked: list[int] = []

    def spans(self, chunk: int):
        self.asked.append(chunk)
        return [(i, min(i + chunk, self.size)) for i in range(0, self.size, chunk)]


def test_chunk_1_over_ten_million_configs_is_at_most_max_chunks():
    plan = _Counted()
    done = list(chunks.run(plan, lambda p, a, b: b - a, chunk=1))
    assert plan.asked == [10**7 // chunks.MAX_CHUNKS]
    assert len(done) == chunks.MAX_CHUNKS and sum(done) == 10**7  # every config, once


def test_a_sweep_is_the_same_at_any_chunk():
    import costmodel

    grid = {"d": list(range(64, 64 * 121, 64)), "L": list(range(1, 101))}  # 12,000 configs
    whole = costmodel.sweep("gpt2-small", grid, ["params.total"])
    tiny = costmodel.sweep("gpt2-small", grid, ["params.total"], chunk=1)
    assert list(tiny["params.total"]) == list(whole["params.total"])
