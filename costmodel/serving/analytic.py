"""The analytic solver: request-level latencies and throughput from the steady-state mixed step, vectorised over
concurrencies (:func:`closed_loop`) or rates (:func:`open_loop`).

Every request has the same shape (:class:`Shape`: prompt ``P``, output ``O``, prefix hits ``h``; take a
distribution's means). At ``n`` requests running, with a token budget ``B`` per step:

- a **decode step** holds ``n`` decodes ``(1, P + (O − 2)/2)`` (the mean past of a decode), padded as
  :meth:`Limits.padded` says; its time is ``T_d(n)``;
- a **prefill** computes ``P' = P − h`` tokens in ``k = ceil(P' / c)`` chunks of ``c = min(P', B − (n − 1))``
  tokens; a **mixed step** holds ``n − 1`` decodes and one chunk of the mean size ``P'/k`` at the mean past
  ``h + (P' − P'/k)/2``; its time is ``T_m(n)``;
- a request lives ``L = k + O − 1`` steps (``k`` prefill steps, the first token at the end of the last, then
  ``O − 1`` decodes); a decoding request shares a fraction ``f = min(1, (n − 1)·k/L)`` of its steps with another's
  prefill (Little's law over the others' prefills), so its mean step is ``T̄ = (1 − f)·T_d + f·T_m``: the prompt
  tokens amortised over the output steps;
- TPOT (after the first token) = ITL = ``T̄``; the running time ``R = k·T_m + (O − 1)·T̄``; throughput
  ``X(n) = min(n / R, X_p)``, where ``X_p = c / (P'·T_f)`` is the rate of prefills when every step is full (``T_f``:
  ``n − 1`` decodes and a chunk of ``c``; the next prompt fills what a last chunk leaves). Where prefills bind
  (``X_p < n/R``) the scheduler admits no faster than the budget allows, so the running set shrinks to the ``n`` that
  serves most: ``X`` and TPOT at ``C`` are those of the best ``n ≤ C`` (TPOT ``T_f`` there).

Closed loop at concurrency ``C``: ``n = min(C, n_max)``, with ``n_max`` the least of ``max_num_seqs``, the budget
``B`` and the KV limit ``num_blocks / ((P + O/2) / block_size + ½)`` (a request's mean blocks, half a block lost to
rounding); E2E ``= C / X`` (Little), so the requests past ``n_max`` wait in the queue, and TTFT = E2E − (O − 1)·T̄.
Below ``n_max`` there is no prefill-queue term: requests that finish together and wait for each other's prefills
make the DES's mean TTFT up to about 2× this at mid concurrency with fixed lengths (1.5× with lengths ±50 %).

Open loop at rate ``λ``: the time-average running concurrency is the fixed point ``n = λ·R(n + c_a²)`` (Little),
found by bisection on the grid's interpolation. An arrival's steps hold ``n + c_a²`` requests: Poisson arrivals see
time averages and add themselves (``c_a = 1``); with burstiness ``c_a`` the count of recent arrivals has a variance
of about ``c_a²·n``, and an arrival is likelier in a burst (the size-biased mean ``n + Var/n``). The rate is
**saturated** (NaN latencies) at or past the capacity ``max X``. Before admission a request waits for the step in
progress (``min(n, 1)·T̄/2``: the system is busy a fraction ``min(n, 1)`` of the time) and in the prefill queue,
Kingman's G/D/1 wait ``ρ/(1 − ρ)·S·c_a²/2`` with ``S = 1/X_p`` and ``ρ = λ·S`` (M/D/1 for Poisson arrivals).

Approximations: one shape of request (a distribution's variance only enters through the DES); the step times at
fractional ``n`` are interpolated linearly between the evaluated grid (every ``n`` to 32, then 96 geometric points);
preemption (where the KV cache binds the DES serves up to about 12 % less), the tail of a closed loop, the
decode-side queue near ``n_max`` and ``decode_first=False`` are not modelled (``mixed_batches=False`` is:
SGLang's prompts in steps of their own, :meth:`Solver.closed_loop` and :meth:`Solver.open_loop` say how); without chunked prefill a prompt is
one chunk (``k = 1``, ``c = P'``); Kingman's wait is short for bursty arrivals (over 10,000 requests at ρ = 0.3–0.6
the DES's mean TTFT is 1.1–1.5× this at burstiness 2, 1.2–1.8× at 4; E2E within 7 %, TPOT within 16 % at 2 and
29 % at 4), so bursts want the DES for TTFT; prefills are spread evenly over steps, so where a step holding a prompt is
compute-bound (a roofline is a max of terms) prompts that arrive together cost more than assumed (about 4.5 %
optimistic in a closed loop of a 70B-like roofline); TPOT is the mean step, so percentiles need the DES. Tested against :func:`~costmodel.serving.simulate.simulate`
(tests/serving/test_agreement.py states the tolerances).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import CostModelError
from .batch import Limits, StepTime


@dataclass(frozen=True)
class Shape:
    """The request every request is taken to be: prompt and output tokens, and prefix tokens the cache may hold."""

    input_tokens: int
    output_tokens: int
    prefix_tokens: int = 0

    def __post_init__(self):
        if self.input_tokens < 1 or self.output_tokens < 1 or not 0 <= self.prefix_tokens <= self.input_tokens:
            raise CostModelError(
                f"analytic: a request shape needs input, output >= 1 and 0 <= prefix <= input, got {self}"
            )


class Solver:
    """The step times of one shape on one replica, evaluated once on a grid of running concurrencies."""

    def __init__(self, step_time: StepTime | None, limits: Limits, shape: Shape, *, points=(), times=None):
        """``points``: running concurrencies to evaluate exactly, besides the grid (a closed loop's ``C``: the
        step times jump at CUDA-graph sizes, where an interpolated throughput and TPOT disagree and TTFT, their
        difference, is far off); ``times``: the step times of :meth:`batches` already evaluated (``(t_d, t_m,
        t_f)``, arrays over the grid), in place of calling ``step_time`` (a fit evaluates many step times of the
        same batches)."""
        self.limits, self.shape = limits, shape
        P, O, bs, B = shape.input_tokens, shape.output_tokens, limits.block_size, limits.max_num_batched_tokens
        hit = min(shape.prefix_tokens // bs * bs, P - 1) if limits.prefix_caching else 0
        work = P - hit  # prompt tokens computed
        kv = int(limits.num_blocks / ((P + O / 2) / bs + 0.5))
        self.n_max = max(1, min(limits.max_num_seqs, B, kv))
        #: what sets ``n_max``: "max_num_seqs", "max_num_batched_tokens" or "kv_cache" (where the DES preempts and
        #: the analytic answer is optimistic)
        self.bound = min(
            [(limits.max_num_seqs, "max_num_seqs"), (B, "max_num_batched_tokens"), (kv, "kv_cache")], key=lambda b: b[0]
        )[1]
        extra = np.clip(np.asarray(points, dtype=float), 1, self.n_max)
        grid = np.concatenate([np.arange(1, min(32, self.n_max) + 1), np.geomspace(1, self.n_max, 96), extra])
        self.grid = np.unique(np.round(grid).astype(np.int64))
        self.work, self._hit = work, hit
        # a prompt's chunk shares the budget with the decodes of a mixed step; alone (mixed_batches off) it has all
        others = (lambda n: n - 1) if limits.mixed_batches else (lambda n: 0)
        cs = [max(1, min(work, B - others(n))) if limits.chunked_prefill else work for n in self.grid.tolist()]
        self.k, self.c = np.array([-(-work // c) for c in cs], dtype=float), np.array(cs, dtype=float)
        if times is None:
            times = list(zip(*((float(step_time(b)) for b in three) for three in self.batches())))
        self.t_d, self.t_m, self.t_f = (np.asarray(t, dtype=float) for t in times)
        L = self.k + O - 1
        f = np.minimum(1.0, (self.grid - 1) * self.k / L)  # the steps of a decoding request with another's prefill
        self.t_bar = (1 - f) * self.t_d + f * self.t_m
        self.running = self.k * self.t_m + (O - 1) * self.t_bar
        self.x_p = self.c / (work * self.t_f)  # full steps: the next prompt fills the rest of a last chunk
        self.x = np.minimum(self.grid / self.running, self.x_p)
        bound = self.x_p < self.grid / self.running  # prefills bind: every step is full
        # where prefills bind, the running set shrinks to the n that serves most (the scheduler admits no more
        # than the budget prefills): the best n up to each grid point; elsewhere every request admitted runs
        own = np.arange(len(self.x))
        best = np.maximum.accumulate(np.where(self.x >= np.maximum.accumulate(self.x), own, 0))
        best = np.where(bound, best, own)
        self.x_best, self.t_best = self.x[best], np.where(bound, self.t_f, self.t_bar)[best]
        if not limits.mixed_batches:
            # prompts in steps of their own: a prompt's prefill takes tau = k·T_m (T_m its chunk alone), and n
            # running requests all decoding serve at most n / ((O − 1)·T_d + n·tau) a second
            self.tau = self.k * self.t_m
            self.x = self.grid / ((O - 1) * self.t_d + self.grid * self.tau)

    def batches(self):
        """The steps the solver times, per grid point: ``(decode, mixed, full)`` batches (see the module notes)."""
        P, O, limits, work, hit = self.shape.input_tokens, self.shape.output_tokens, self.limits, self.work, self._hit
        past = P + max(O - 2, 0) // 2
        for n, k, c in zip(self.grid.tolist(), self.k.tolist(), self.c.tolist()):
            chunk, c = round(work / k), int(c)
            if not limits.mixed_batches:  # (decode, a prompt's chunk alone, a full prefill step alone)
                yield (
                    [(1, past)] * n + [(1, 0)] * (limits.padded(n) - n),
                    [(chunk, hit + round((work - chunk) / 2))],
                    [(c, hit + round((work - c) / 2))],
                )
                continue
            decode = [(1, past)] * n
            yield (
                decode + [(1, 0)] * (limits.padded(n) - n),
                decode[: n - 1] + [(chunk, hit + round((work - chunk) / 2))],
                decode[: n - 1] + [(c, hit + round((work - c) / 2))],
            )

    def _at(self, table: np.ndarray, n: np.ndarray) -> np.ndarray:
        return np.interp(np.clip(n, 1, self.n_max), self.grid, table)

    @property
    def capacity(self) -> float:
        """The largest throughput, requests/s: at ``n_max`` running, or where prefills bind."""
        return float(np.max(self.x))

    def _result(self, n, ttft, tpot, e2e, x, saturated) -> dict:
        P, O = self.shape.input_tokens, self.shape.output_tokens
        out = {
            "concurrency": n,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "itl_s": tpot,
            "tpot_incl_first_s": e2e / O,
            "e2e_s": e2e,
            "requests_per_s": x,
            "input_tokens_per_s": x * P,
            "output_tokens_per_s": x * O,
            "saturated": saturated,
            "bound": self.bound,
        }
        # a number in, numbers out (plain Python ones, which JSON takes)
        return {
            key: value.item() if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0 else value
            for key, value in out.items()
        }

    def closed_loop(self, concurrency, queue_share: float = 0.0) -> dict:
        """Means at each concurrency (an array or a number): see the module. ``queue_share`` (``q``, in [0, 1]):
        a new request also waits for ``q·(C − 1)`` other users' prompts computed ahead of its own, each the
        marginal time of its tokens in a full step, ``P'·(T_f − T_d)/c`` (0: users' requests spread evenly, the
        default; ½: they arrive together, as a synchronized closed loop with fixed lengths does); the throughput
        is then ``C / E2E``."""
        C = np.asarray(concurrency, dtype=float)
        if np.any(~(C >= 1)):
            raise CostModelError(f"analytic: a concurrency must be >= 1, got {concurrency}")
        if not 0 <= queue_share <= 1:
            raise CostModelError(f"analytic: queue_share must be in [0, 1], got {queue_share}")
        over = self.limits.request_overhead_s
        n = np.minimum(C, self.n_max)
        if not self.limits.mixed_batches:
            return self._closed_loop_separate(C, n, queue_share, over)
        x = self._at(self.x_best, n)
        tpot = self._at(self.t_best, n)
        e2e = C / x
        if queue_share:
            per_prompt = self.work * np.maximum(self._at(self.t_f, n) - self._at(self.t_d, n), 0) / self._at(self.c, n)
            e2e = e2e + queue_share * (C - 1) * per_prompt
            x = C / e2e
        ttft = e2e - (self.shape.output_tokens - 1) * tpot
        return self._result(n, ttft + over, tpot, e2e + over, x, np.zeros(C.shape, dtype=bool))

    def _closed_loop_separate(self, C, n, q, over) -> dict:
        """The closed loop where prompts run in steps of their own (see the module notes). Over one request's
        life the replica computes every running request's prompt once, ``tau`` each; a share ``q`` of the other
        ``n − 1`` falls before this request's first token (``q`` = ½: users in waves, as a simulated closed loop
        of fixed lengths runs), the rest between its tokens. So TTFT ``= T_d/2 + tau + q·(n − 1)·tau`` (the step
        in progress, where others run), TPOT ``= T_d(n_d) + (1 − q)·(n − 1)·tau/(O − 1)``, and
        ``E = n·tau + (O − 1)·T_d + T_d/2``; ``n_d``, the requests decoding, is ``n·(O − 1)·TPOT/E`` (Little),
        found by iteration. Past ``n_max`` the others wait in the queue: E2E ``= C/X``."""
        O = self.shape.output_tokens
        tau = self._at(self.tau, n)
        others = n - 1
        n_d = np.array(n, dtype=float)
        for _ in range(20):
            t_d = self._at(self.t_d, n_d)
            wait = np.minimum(others, 1) * t_d / 2 + tau + q * others * tau
            tpot = t_d + (1 - q) * others * tau / max(O - 1, 1)
            e = wait + (O - 1) * tpot
            n_d = np.clip(n * (O - 1) * tpot / e, 1, n)
        x = n / e
        e2e = C / x
        ttft = e2e - (O - 1) * tpot
        return self._result(n, ttft + over, tpot, e2e + over, x, np.zeros(np.shape(C), dtype=bool))

    def _open_loop_separate(self, lam, burstiness) -> dict:
        """The open loop where prompts run in steps of their own: a share ``u = λ·tau`` of the time computes
        prompts, so a decode waits ``TPOT = T_d(n)/(1 − u)`` a token, ``n = λ·(tau + (O − 1)·TPOT)`` running (the
        fixed point, by bisection); a new request waits for the step in progress (``T_d/2``) and, before its own
        prefill, Kingman's wait for the prompts ahead, ``u/(1 − u)·tau·c_a²/2``."""
        O = self.shape.output_tokens
        seen = burstiness**2
        lo, hi = np.zeros(lam.shape), np.full(lam.shape, float(self.n_max))
        with np.errstate(divide="ignore", invalid="ignore"):
            for _ in range(60):
                mid = (lo + hi) / 2
                tau = self._at(self.tau, mid + seen)
                r = tau + (O - 1) * self._at(self.t_d, mid + seen) / np.maximum(1 - lam * tau, 1e-12)
                below = mid < lam * r
                lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
            n = (lo + hi) / 2
            tau, t_d = self._at(self.tau, n + seen), self._at(self.t_d, n + seen)
            u = lam * tau
            saturated = (lam >= self.capacity) | (u >= 1)
            tpot = t_d / (1 - u)
            queue = np.where(u < 1, u / (1 - u) * tau * burstiness**2 / 2, np.inf)
        ttft = np.minimum(n, 1) * t_d / 2 + queue + tau
        return self._open_result(lam, n, ttft, tpot, ttft + (O - 1) * tpot, saturated)

    def open_loop(self, rate, burstiness: float = 1.0) -> dict:
        """Means at each rate, requests/s (an array or a number; ``inf`` is saturated): see the module."""
        lam = np.asarray(rate, dtype=float)
        if np.any(~(lam > 0)):
            raise CostModelError(f"analytic: a rate must be > 0 requests/s, got {rate}")
        if not burstiness > 0:
            raise CostModelError(f"analytic: burstiness must be > 0, got {burstiness}")
        if not self.limits.mixed_batches:
            return self._open_loop_separate(lam, burstiness)
        lo, hi = np.zeros(lam.shape), np.full(lam.shape, float(self.n_max))
        seen = burstiness**2  # others an arrival finds beyond the time average: 1 for Poisson, c_a² for bursts
        for _ in range(60):  # bisection on n − λ·R(n): negative below the fixed point
            mid = (lo + hi) / 2
            below = mid < lam * self._at(self.running, mid + seen)
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        n = (lo + hi) / 2
        saturated = lam >= self.capacity
        tbar, x_p, t_m, k = (self._at(t, n + seen) for t in (self.t_bar, self.x_p, self.t_m, self.k))
        rho = lam / x_p
        saturated |= rho >= 1
        with np.errstate(divide="ignore", invalid="ignore"):
            queue = np.where(rho < 1, rho / (1 - rho) / x_p * burstiness**2 / 2, np.inf)
        ttft = np.minimum(n, 1) * tbar / 2 + queue + k * t_m
        return self._open_result(lam, n, ttft, tbar, ttft + (self.shape.output_tokens - 1) * tbar, saturated)

    def _open_result(self, lam, n, ttft, tpot, e2e, saturated) -> dict:
        """An open loop's means, the per-request overhead added; NaN latencies and the capacity where saturated."""
        nan = np.full(lam.shape, math.nan)
        over = self.limits.request_overhead_s
        return self._result(
            np.where(saturated, self.n_max, n),
            np.where(saturated, nan, ttft + over),
            np.where(saturated, nan, tpot),
            np.where(saturated, nan, e2e + over),
            np.where(saturated, self.capacity, lam),
            saturated,
        )


def closed_loop(step_time: StepTime, limits: Limits, shape: Shape, concurrency) -> dict:
    """:meth:`Solver.closed_loop` in one call."""
    return Solver(step_time, limits, shape).closed_loop(concurrency)


def open_loop(step_time: StepTime, limits: Limits, shape: Shape, rate, burstiness: float = 1.0) -> dict:
    """:meth:`Solver.open_loop` in one call."""
    return Solver(step_time, limits, shape).open_loop(rate, burstiness)


def capacity(step_time: StepTime, limits: Limits, shape: Shape) -> float:
    """The largest request rate one replica sustains, requests/s."""
    return Solver(step_time, limits, shape).capacity
