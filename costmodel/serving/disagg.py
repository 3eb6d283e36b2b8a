"""Disaggregated serving: a pool of prefill instances and a pool of decode instances, the KV cache sent between them.

Each request is prefilled on one of ``p`` prefill instances (round robin; an instance runs prompts only, chunked as
its engine chunks, and emits the first token when the prompt is done), then its KV cache crosses the network tier,
``2·L·kv_heads·head_dim·P·bytes`` (:func:`kv_transfer_s`: the pool's KV bytes per token on each rank, each rank
sending its own share at once over its own link), and it joins one of ``d`` decode instances (round robin by the
time it is ready), which makes the other ``O − 1`` tokens. On the decode instance the request arrives with its prompt
and first token cached: the simulator sees ``P + 1`` tokens of which the whole blocks are prefix hits (the remainder
is computed once, the cost of a partial block), and ``O − 1`` outputs.

``overlap=True`` streams the KV layer by layer while the prefill runs (the transfer then adds only its last layer's
share, ``1/L`` of it); ``False`` (the default) sends it after the prefill.

One prefill instance and one decode instance are simulated per pool, each with the share of the requests round robin
gives it; the metrics are those of the decode instance's requests, their TTFT from their prefill (the first token),
their TPOT and E2E from the decode instance (the handoff included). :func:`balanced_ratio` is the p:d at which the two
pools' capacities match, from the analytic solver.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..errors import CostModelError
from .analytic import Shape, Solver
from .batch import Limits, Request, StepTime
from .simulate import Simulation, simulate


@dataclasses.dataclass(frozen=True)
class Pools:
    """How many prefill and decode instances, and whether the KV transfer overlaps the prefill."""

    prefill: int
    decode: int
    overlap: bool = False

    def __post_init__(self):
        for name in ("prefill", "decode"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CostModelError(f"disaggregation: {name} instances must be a whole number >= 1, received {v!r}")

    @staticmethod
    def parse(text: str) -> Pools:
        """``"P:D"`` (instances of each pool): ``"1:3"``; ``"1:3:overlap"`` streams the KV during the prefill."""
        text = str(text)
        overlap = text.endswith(":overlap")
        a, colon, b = text.removesuffix(":overlap").partition(":")
        if not colon or not a.strip().isdigit() or not b.strip().isdigit():
            raise CostModelError(f"--disaggregate: expected P:D instances (e.g. 1:3), received {text!r}")
        return Pools(int(a), int(b), overlap)


def kv_transfer_s(
    tokens: int, bytes_per_token_rank: int, link_bytes_per_s: float, latency_s: float, layers: int, overlap: bool
) -> float:
    """Seconds to send a request's KV of ``tokens`` tokens from the prefill to the decode instance (see the module)."""
    seconds = latency_s + tokens * bytes_per_token_rank / link_bytes_per_s
    return latency_s + (seconds - latency_s) / max(layers, 1) if overlap else seconds


def simulate_disaggregated(
    requests: Sequence[Request],
    prefill_step: StepTime,
    prefill_limits: Limits,
    decode_step: StepTime,
    decode_limits: Limits,
    pools: Pools,
    transfer_s,
) -> tuple[Simulation, Simulation]:
    """(the combined record of the decode instance's requests, the first prefill instance's record).

    ``transfer_s(tokens)`` gives a request's KV transfer time. The combined record holds the original requests, their
    arrival, their first token from the prefill pool and their finish from the decode pool, so
    :func:`~costmodel.serving.metrics.metrics` reads TTFT, TPOT and E2E as a user sees them."""
    reqs = sorted(requests, key=lambda r: r.arrival_s)
    n = len(reqs)
    first = np.full(n, np.nan)
    prefill_record = None
    for k in range(pools.prefill):  # each prefill instance's round-robin share
        idx = list(range(k, n, pools.prefill))
        if not idx:
            continue
        mine = [dataclasses.replace(reqs[i], output_tokens=1) for i in idx]
        sim = simulate(mine, prefill_step, prefill_limits)
        first[idx] = sim.first_token_s
        if prefill_record is None:
            prefill_record = sim
        if sim.saturated:
            raise CostModelError(f"disaggregation: the prefill pool is past saturation ({sim.reason})")
    ready = first + np.array([transfer_s(r.input_tokens) for r in reqs])
    order = np.argsort(ready, kind="stable")
    chosen = order[0 :: pools.decode]  # the first decode instance's share, in the order requests become ready
    if any(reqs[i].output_tokens < 2 for i in chosen):
        raise CostModelError(
            "disaggregation: every request needs at least 2 output tokens (the first is the prefill's)"
        )
    block = decode_limits.block_size
    moved = [
        Request(
            float(ready[i]),
            reqs[i].input_tokens + 1,
            reqs[i].output_tokens - 1,
            min(reqs[i].input_tokens + 1, (reqs[i].input_tokens + 1) // block * block),
        )
        for i in chosen
    ]
    dec = simulate(moved, decode_step, dataclasses.replace(decode_limits, prefix_caching=True))
    combined = dataclasses.replace(
        dec,
        requests=tuple(reqs[i] for i in chosen),
        arrival_s=np.array([reqs[i].arrival_s for i in chosen]),
        first_token_s=first[chosen],
    )
    return combined, prefill_record


def balanced_ratio(
    prefill_step: StepTime, prefill_limits: Limits, decode_step: StepTime, decode_limits: Limits, shape: Shape
) -> dict[str, float]:
    """Requests/s one prefill and one decode instance sustain, and the p:d that balances them (d/p instances)."""
    prefill = Solver(prefill_step, prefill_limits, Shape(shape.input_tokens, 1, shape.prefix_tokens)).capacity
    decode_shape = Shape(shape.input_tokens + 1, max(1, shape.output_tokens - 1), shape.input_tokens)
    decode = Solver(decode_step, dataclasses.replace(decode_limits, prefix_caching=True), decode_shape).capacity
    return {
        "prefill_requests_per_s": prefill,
        "decode_requests_per_s": decode,
        "decode_per_prefill": prefill / decode if decode > 0 else math.inf,
    }
