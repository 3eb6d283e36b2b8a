"""Workloads: the requests a replica is offered, made deterministic by a seed.

A :class:`Workload` is a tuple of :class:`~costmodel.serving.batch.Request` sorted by arrival and, for a closed
loop, a ``concurrency``: the simulator then keeps that many requests in the system, issuing the next one (in the
tuple's order, its ``arrival_s`` ignored) at the moment one finishes — the ``--concurrency`` benchmark of
``vllm bench serve``.

Arrivals (:func:`workload`): Poisson at ``rate`` requests/s; gamma with a ``burstiness`` (the coefficient of
variation of the gaps: 1 is Poisson, above 1 burstier, below 1 smoother; the mean gap stays ``1/rate``);
``rate=inf``, every request at t = 0 (the offline maximum-throughput benchmark); a closed loop at ``concurrency``;
or a trace replayed from JSONL (:func:`from_trace`). The first arrival of a generated workload is at its first
gap, not at 0.

Lengths (:class:`Length`, read from text by :func:`parse_length`): ``2048`` (fixed), ``uniform:1024:4096``
(integers, both ends included), ``normal:2048:256`` (mean, standard deviation; rounded, at least 1) and
``lognormal:2048:512`` (the mean and standard deviation *of the length*, not of its logarithm; rounded, at
least 1). One ``numpy.random.default_rng(seed)`` draws the gaps, then the input lengths, then the output lengths,
so a seed fixes the whole workload.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CostModelError, closest
from ..files import read_capped
from .batch import Request

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")

#: The key spellings a trace line may use, matched without regard to case, first match wins (vllm bench serve and
#: its datasets, Mooncake's and Azure's LLM inference traces, and similar tools). ``TIME_MS_KEYS`` are milliseconds.
TIME_KEYS = ("timestamp", "arrival_time", "arrival_s", "time", "created")
TIME_MS_KEYS = ("timestamp_ms", "arrival_time_ms", "time_ms")
INPUT_KEYS = (
    "input_length",
    "input_tokens",
    "input_len",
    "prompt_len",
    "prompt_tokens",
    "num_prompt_tokens",
    "context_tokens",
    "contexttokens",
)
OUTPUT_KEYS = (
    "output_length",
    "output_tokens",
    "output_len",
    "completion_tokens",
    "num_output_tokens",
    "generated_tokens",
    "generatedtokens",
)
PREFIX_KEYS = ("prefix_tokens", "prefix_length", "cached_tokens")

#: Every input has a bounded cost before the work starts (docs/design.md): at most this many requests (about two
#: minutes of simulation), lengths of at most this many tokens, a trace of at most this many bytes.
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 100_000_000
TRACE_CAP = 256 << 20


@dataclass(frozen=True)
class Length:
    """A distribution of token lengths: ``dist`` is one of ``DISTRIBUTIONS``; ``a`` and ``b`` are the value (fixed), the
    ends (uniform) or the mean and standard deviation (normal, lognormal)."""

    dist: str
    a: float
    b: float = 0.0

    def __post_init__(self):
        if self.dist not in DISTRIBUTIONS:
            raise CostModelError(f"length: unknown distribution {self.dist!r}{closest(self.dist, DISTRIBUTIONS)}")
        if not (math.isfinite(self.a) and math.isfinite(self.b)):
            raise CostModelError(f"length: {self.dist} needs finite numbers, got {self.a} and {self.b}")
        if self.dist == "fixed" and (self.a < 1 or self.a != int(self.a)):
            raise CostModelError(f"length: a fixed length must be a whole number >= 1, got {self.a}")
        if self.dist == "uniform" and not (1 <= self.a <= self.b and self.a == int(self.a) and self.b == int(self.b)):
            raise CostModelError(f"length: uniform:a:b needs whole numbers 1 <= a <= b, got {self.a} and {self.b}")
        if self.dist in ("normal", "lognormal") and not (self.a >= 1 and self.b >= 0):
            raise CostModelError(f"length: {self.dist} needs a mean >= 1 and a deviation >= 0, got {self.a}, {self.b}")
        if max(self.a, self.b) > MAX_TOKENS:
            raise CostModelError(f"length: at most {MAX_TOKENS:,} tokens, got {self.dist} {self.a:g}:{self.b:g}")

    @property
    def mean(self) -> float:
        """The mean length (before rounding and truncation)."""
        return (self.a + self.b) / 2 if self.dist == "uniform" else self.a

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths (int64, each between 1 and ``MAX_TOKENS``) drawn from ``rng``."""
        if self.dist == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.dist == "uniform":
            return rng.integers(int(self.a), int(self.b), size=n, endpoint=True, dtype=np.int64)
        if self.dist == "normal":
            x = rng.normal(self.a, self.b, size=n)
        else:  # lognormal: sigma² = ln(1 + sd²/mean²), mu = ln(mean) − sigma²/2 give the length's own mean and sd
            s2 = math.log1p((self.b / self.a) ** 2)
            x = rng.lognormal(math.log(self.a) - s2 / 2, math.sqrt(s2), size=n)
        return np.clip(np.rint(x), 1, MAX_TOKENS).astype(np.int64)


def parse_length(text: str | int | Length) -> Length:
    """A length from the CLI's text: ``2048``, ``uniform:1024:4096``, ``normal:2048:256``, ``lognormal:2048:512``."""
    if isinstance(text, Length):
        return text
    if isinstance(text, int) and not isinstance(text, bool):
        return Length("fixed", text)
    parts = str(text).strip().split(":")
    dist = "fixed" if len(parts) == 1 else parts[0].strip().lower()
    args = parts if len(parts) == 1 else parts[1:]
    if dist not in DISTRIBUTIONS[1:] and len(parts) > 1:
        raise CostModelError(f"length {text!r}: unknown distribution {dist!r}{closest(dist, DISTRIBUTIONS[1:])}")
    want = 1 if dist == "fixed" else 2
    if len(args) != want:
        form = "N" if dist == "fixed" else f"{dist}:A:B"
        raise CostModelError(f"length {text!r}: expected {form}, got {len(args)} number(s)")
    try:
        values = [float(a) for a in args]
    except ValueError:
        raise CostModelError(f"length {text!r}: expected numbers, got {':'.join(args)!r}") from None
    try:
        return Length(dist, *values)
    except CostModelError as exc:
        raise CostModelError(f"length {text!r}: {str(exc).removeprefix('length: ')}") from None


@dataclass(frozen=True)
class Workload:
    """The requests (sorted by arrival) and, for a closed loop, how many are kept in the system."""

    requests: tuple[Request, ...]
    concurrency: int | None = None

    def __post_init__(self):
        if not self.requests:
            raise CostModelError("workload: no requests")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or self.concurrency < 1):
            raise CostModelError(f"workload: concurrency must be a whole number >= 1, got {self.concurrency!r}")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def closed(self) -> bool:
        """Whether the simulator issues a request when one finishes (a closed loop)."""
        return self.concurrency is not None


def workload(
    n: int,
    *,
    rate: float | None = None,
    concurrency: int | None = None,
    burstiness: float = 1.0,
    input_len: str | int | Length = 2048,
    output_len: str | int | Length = 256,
    prefix_tokens: int = 0,
    seed: int = 0,
) -> Workload:
    """``n`` requests arriving at ``rate`` requests/s (Poisson, or gamma of coefficient of variation ``burstiness``;
    ``math.inf``: all at t = 0) or as a closed loop of ``concurrency`` (exactly one of the two), with lengths drawn
    from ``input_len`` and ``output_len`` (text as :func:`parse_length` reads it, or a :class:`Length`) and a shared
    prefix of ``prefix_tokens`` (capped at each prompt's length)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise CostModelError(
            f"workload: the number of requests must be a whole number in 1..{MAX_REQUESTS:,}, got {n!r}"
        )
    if (rate is None) == (concurrency is None):
        raise CostModelError("workload: give a rate or a concurrency (exactly one)")
    if rate is not None and not rate > 0:
        raise CostModelError(f"workload: the rate must be > 0 requests/s (or inf), got {rate}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise CostModelError(f"workload: burstiness (the coefficient of variation) must be > 0, got {burstiness}")
    if prefix_tokens < 0:
        raise CostModelError(f"workload: prefix_tokens must be >= 0, got {prefix_tokens}")
    inputs, outputs = parse_length(input_len), parse_length(output_len)
    rng = np.random.default_rng(seed)
    if concurrency is not None or math.isinf(rate):
        arrivals = np.zeros(n)
    else:  # gamma gaps of shape k = 1/cv², scale = 1/(k·rate): mean 1/rate, cv = burstiness (k = 1: exponential)
        shape = 1.0 / burstiness**2
        arrivals = np.cumsum(rng.gamma(shape, 1.0 / (shape * rate), size=n))
    ins, outs = inputs.sample(rng, n), outputs.sample(rng, n)
    requests = tuple(
        Request(float(t), int(i), int(o), min(prefix_tokens, int(i)))
        for t, i, o in zip(arrivals.tolist(), ins.tolist(), outs.tolist())
    )
    return Workload(requests, concurrency)


def _pick(obj: dict, keys: tuple[str, ...], what: str, where: str):
    for key in keys:
        if key in obj:
            return obj[key]
    raise CostModelError(f"{where}: no {what} (expected one of the keys {', '.join(keys)})")


def _whole(value, what: str, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise CostModelError(f"{where}: {what} must be a whole number, got {value!r}")
    if not least <= value <= MAX_TOKENS:
        raise CostModelError(f"{where}: {what} must be between {least} and {MAX_TOKENS:,}, got {int(value)}")
    return int(value)


def from_trace(
    path: str | Path, *, limit: int | None = None, concurrency: int | None = None, time_unit: str = "s"
) -> Workload:
    """The requests of a JSONL trace, one object a line with an arrival time (relative or absolute: shifted so the
    first is at 0; a missing one is 0) in ``time_unit`` (``"s"`` or ``"ms"``; a ``TIME_MS_KEYS`` key is always
    milliseconds), input and output token counts, and optionally a prefix length (the key spellings are
    ``TIME_KEYS``, ``INPUT_KEYS``, ``OUTPUT_KEYS``, ``PREFIX_KEYS``). Blank lines are skipped; ``limit`` keeps the
    first requests by arrival; ``concurrency`` replays the lengths in a closed loop."""
    if time_unit not in ("s", "ms"):
        raise CostModelError(f"trace: the time unit is 's' or 'ms', got {time_unit!r}")
    text = read_capped(path, TRACE_CAP, "trace").decode("utf-8", errors="replace")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"trace {str(path)!r} line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CostModelError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise CostModelError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        obj = {str(k).lower(): v for k, v in obj.items()}
        ms = next((k for k in TIME_MS_KEYS if k in obj), None)
        t = obj[ms] if ms else next((obj[k] for k in TIME_KEYS if k in obj), 0.0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise CostModelError(f"{where}: the timestamp must be a number of {'ms' if ms else time_unit}, got {t!r}")
        t = t / 1000 if ms or time_unit == "ms" else t
        ins = _whole(_pick(obj, INPUT_KEYS, "input length", where), "the input length", where, 1)
        outs = _whole(_pick(obj, OUTPUT_KEYS, "output length", where), "the output length", where, 1)
        prefix = _whole(next((obj[k] for k in PREFIX_KEYS if k in obj), 0), "the prefix length", where, 0)
        rows.append((float(t), ins, outs, min(prefix, ins)))
        if len(rows) > MAX_REQUESTS:
            raise CostModelError(f"trace {str(path)!r}: more than {MAX_REQUESTS:,} requests (line {number})")
    if not rows:
        raise CostModelError(f"trace {str(path)!r}: no requests")
    rows.sort(key=lambda r: r[0])
    rows = rows[:limit] if limit else rows
    start = rows[0][0]
    return Workload(tuple(Request(t - start, i, o, p) for t, i, o, p in rows), concurrency)
