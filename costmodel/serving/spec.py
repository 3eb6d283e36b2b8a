"""What a user asks of a serving run, in one validated record: :class:`Serve`.

The model, the device, the layout (``tp``, ``pp``) and the weight and KV formats travel in
:class:`~costmodel.options.Options` as for every verb; :class:`Serve` holds what only serving has: expert
parallelism and attention data parallelism as serving maps them (:mod:`costmodel.serving.parallel`: ``ep`` over
the replica's tp × attention-dp devices, which training's layout, ep dividing dp, does not take), the engine
and its overrides, the replicas, the load (a rate, ``inf``, a concurrency or a trace), the request lengths, the
SLOs, speculative decoding, the number of requests simulated and the seed, and which solver answers.

>>> Serve(rate=4.0).load
'rate 4 requests/s'
>>> Serve(concurrency=8, solver="analytic").load
'closed loop of 8'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import CostModelError
from .workload import parse_length

SOLVERS = ("simulate", "analytic")


@dataclass(frozen=True)
class Serve:
    """A serving run's own choices (see the module notes). Exactly one of ``rate`` (requests/s; ``math.inf``:
    every request at once), ``concurrency`` and ``trace`` (a JSONL file); without any, ``rate=inf``."""

    engine: str = "vllm-v1"
    engine_set: tuple[tuple[str, str], ...] = ()
    engine_file: str | None = None
    replicas: int = 1
    rate: float | None = None
    concurrency: int | None = None
    trace: str | None = None
    burstiness: float = 1.0
    input_len: str = "2048"
    output_len: str = "256"
    prefix_tokens: int = 0
    requests: int = 1000
    seed: int = 0
    warmup: float = 0.0
    slo: str | None = None
    speculative: tuple[int, float] | None = None
    solver: str = "simulate"
    max_rate: bool = True  # with SLOs: search the largest rate that meets them
    disaggregate: object = None  # Pools (prefill:decode instances), or its text "P:D"
    prefill_tp: int | None = None  # the prefill pool's tp (default: the layout's)
    expert_imbalance: float = 1.0  # under expert parallelism: the busiest device's tokens over the mean
    ep: int | None = None  # expert parallelism over the replica's tp × attention_dp devices (serving.parallel)
    attention_dp: int = 1  # attention data-parallel ranks of a replica, each its own batch and KV pool
    formulas: bool = False  # TPOT(B, C), TTFT(P) and the critical batch as formulas (serving.formulas)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = [k for k in ("rate", "concurrency", "trace") if getattr(self, k) is not None]
        if len(given) > 1:
            raise CostModelError(
                f"serve: give one of --rate, --concurrency and --trace, received {' and '.join(given)}"
            )
        if self.rate is not None and not (self.rate > 0):
            raise CostModelError(f"serve: the rate must be > 0 requests/s (or inf), received {self.rate}")
        for name in ("replicas", "requests"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CostModelError(f"serve: {name} must be a whole number >= 1, received {v!r}")
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1
        ):
            raise CostModelError(f"serve: the concurrency must be a whole number >= 1, received {self.concurrency!r}")
        if self.requests > 1_000_000:
            raise CostModelError(f"serve: at most 1,000,000 requests are simulated, received {self.requests:,}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise CostModelError(f"serve: burstiness must be > 0, received {self.burstiness}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise CostModelError(f"serve: the seed must be a whole number >= 0, received {self.seed!r}")
        if not (0 <= self.warmup < 1):
            raise CostModelError(f"serve: warmup is the share of requests left out, in [0, 1), received {self.warmup}")
        if self.solver not in SOLVERS:
            raise CostModelError(f"serve: solver must be one of {', '.join(SOLVERS)}, received {self.solver!r}")
        if self.speculative is not None:
            k, alpha = self.speculative
            if isinstance(k, bool) or not isinstance(k, int) or k < 1 or not 0 <= alpha < 1:
                raise CostModelError(
                    f"serve: speculative decoding takes k,alpha with k >= 1 draft tokens and 0 <= alpha < 1, "
                    f"received {self.speculative}"
                )
        for name in ("input_len", "output_len"):
            try:
                parse_length(getattr(self, name))
            except CostModelError as exc:
                raise CostModelError(f"serve: {name} (--{name.replace('_', '-')}): {exc}") from None
        if not (self.expert_imbalance >= 1 and math.isfinite(self.expert_imbalance)):
            raise CostModelError(
                f"serve: expert_imbalance is the busiest device's load over the mean, >= 1; received {self.expert_imbalance}"
            )
        if self.disaggregate is not None:
            from .disagg import Pools  # the pools' record lives with the simulation that reads it

            pools = self.disaggregate if isinstance(self.disaggregate, Pools) else Pools.parse(self.disaggregate)
            object.__setattr__(self, "disaggregate", pools)
        for name in ("ep", "attention_dp"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise CostModelError(f"serve: {name} must be a whole number >= 1, received {v!r}")
        if self.prefill_tp is not None and (
            isinstance(self.prefill_tp, bool) or not isinstance(self.prefill_tp, int) or self.prefill_tp < 1
        ):
            raise CostModelError(f"serve: prefill_tp must be a whole number >= 1, received {self.prefill_tp!r}")
        if self.rate is None and self.concurrency is None and self.trace is None:
            object.__setattr__(self, "rate", math.inf)

    @staticmethod
    def parse(name: str, text: str) -> object:
        """A field's value from the text a user types: ``rate`` (requests/s or ``inf``), ``speculative``
        (``k,alpha``)."""
        readers = {"rate": parse_rate, "speculative": parse_speculative}
        if name not in readers:
            raise CostModelError(f"Serve.parse: no text form for {name!r}; fields read from text: {', '.join(readers)}")
        return readers[name](text)

    @property
    def load(self) -> str:
        """The load in words."""
        if self.trace is not None:
            return f"trace {self.trace}"
        if self.concurrency is not None:
            return f"closed loop of {self.concurrency}"
        if math.isinf(self.rate):
            return "every request at once (rate inf)"
        return f"rate {self.rate:g} requests/s"


def tokens_per_step(k: int, alpha: float) -> float:
    """Tokens one speculative step yields on average with ``k`` draft tokens each accepted with probability
    ``alpha`` (Leviathan et al. 2023): (1 − α^(k+1)) / (1 − α).

    >>> tokens_per_step(4, 0.0), round(tokens_per_step(4, 0.8), 4)
    (1.0, 3.3616)
    """
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def parse_speculative(text: str) -> tuple[int, float]:
    """``"k,alpha"`` → (k, α): ``"4,0.7"``."""
    parts = text.split(",")
    try:
        k, alpha = int(parts[0]), float(parts[1])
        if len(parts) != 2:
            raise ValueError
    except (ValueError, IndexError):
        raise CostModelError(f"--speculative: expected k,alpha (e.g. 4,0.7), received {text!r}") from None
    return k, alpha


def parse_rate(text: str) -> float:
    """A request rate: a positive number of requests/s or ``inf``."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise CostModelError(f"--rate: expected requests/s (a number > 0) or inf, received {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise CostModelError(f"--rate: expected requests/s (a number > 0) or inf, received {text!r}")
    return value
