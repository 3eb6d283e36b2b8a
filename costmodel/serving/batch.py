"""What every part of serving agrees on: a request, a scheduler's limits, and the step-time function.

A **batch** is what one engine step runs: a sequence of ``(new_tokens, past_kv)`` pairs, one per scheduled request
(a decode is ``(1, p)``; a prefill chunk of ``c`` tokens after ``p`` cached ones is ``(c, p)``). This is the shape
SGLang's and TensorRT-LLM's simulators hand their predictor, so any step-time predictor plugs in.

A **step time** is any callable from a batch to seconds (:class:`StepTime`); :mod:`costmodel.serving.step`
derives one from a model's graph, and tests use hand-written ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import CostModelError

#: One scheduled request in a step: (new tokens computed this step, tokens already in its KV cache).
Entry = tuple[int, int]


class StepTime(Protocol):
    """Seconds one engine step takes for ``batch``, a sequence of ``(new_tokens, past_kv)`` pairs."""

    def __call__(self, batch: Sequence[Entry]) -> float: ...


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (seconds), its prompt and output lengths (tokens), and how many of the prompt's
    leading tokens a prefix cache may already hold (``prefix_tokens``, shared with other requests)."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix_tokens: int = 0

    def __post_init__(self):
        if not self.arrival_s >= 0:
            raise CostModelError(f"request: arrival time must be >= 0 s, got {self.arrival_s}")
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise CostModelError(
                f"request: input and output lengths must be >= 1 token, got {self.input_tokens} and {self.output_tokens}"
            )
        if not 0 <= self.prefix_tokens <= self.input_tokens:
            raise CostModelError(
                f"request: prefix_tokens must be between 0 and input_tokens ({self.input_tokens}), got {self.prefix_tokens}"
            )


@dataclass(frozen=True)
class Limits:
    """What one replica's scheduler obeys, filled from an engine profile (:mod:`costmodel.serving.profiles`).

    ``num_blocks`` KV blocks of ``block_size`` tokens each are what the engine allocated after weights, activations
    and reserves (:mod:`costmodel.serving.memory`). ``cuda_graph_sizes``: a decode-only step of ``n`` sequences runs
    as the smallest listed size >= n (empty: no padding). ``mixed_batches`` False: a step that computes any prompt
    computes only prompts (SGLang's default: a prefill batch runs alone, the decodes wait). Overheads are seconds: per step (scheduler, sampler) is in
    the step time already; per request (API, detokenise) is added to a request's TTFT and E2E here.
    """

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_blocks: int
    chunked_prefill: bool = True
    max_partial_prefills: int = 1
    decode_first: bool = True
    mixed_batches: bool = True
    prefix_caching: bool = False
    cuda_graph_sizes: tuple[int, ...] = ()
    request_overhead_s: float = 0.0

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks", "max_partial_prefills"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CostModelError(f"serving limits: {name} must be a whole number >= 1, got {value!r}")
        if self.request_overhead_s < 0:
            raise CostModelError(f"serving limits: request_overhead_s must be >= 0, got {self.request_overhead_s}")
        if any(b < 1 for b in self.cuda_graph_sizes) or list(self.cuda_graph_sizes) != sorted(self.cuda_graph_sizes):
            raise CostModelError(
                f"serving limits: cuda_graph_sizes must be increasing sizes >= 1, got {self.cuda_graph_sizes}"
            )

    def padded(self, n: int) -> int:
        """The decode batch a CUDA-graph engine runs for ``n`` sequences: the smallest captured size >= n (n itself
        past the largest, where the engine runs eagerly)."""
        for size in self.cuda_graph_sizes:
            if size >= n:
                return size
        return n
