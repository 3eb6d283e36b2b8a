"""A discrete-event simulation of one replica under a vLLM-v1-like scheduler: :func:`simulate`.

**The model.** A request holds ``num_tokens`` known tokens (its prompt, then each output token as it is made) of
which ``computed`` are in its KV cache. Each step schedules ``num_tokens − computed`` new tokens for a request (a
decode is one; a prefill chunk is more), and when a step brings ``computed`` up to ``num_tokens`` the request emits
its next token at the end of that step: the first output token comes at the end of the step that finishes the
prefill, then one token a step. A request is done after ``output_tokens`` tokens (its last token's KV is never
written).

**One step** (the scheduler runs between steps; a request that arrives during a step waits for its end):

1. the running requests in admission order — decodes first (``decode_first``), then partial prefills; with
   ``decode_first=False`` the prefills (running, then waiting) come first and decodes take what budget is left;
   with ``mixed_batches=False`` (SGLang) a step that schedules any prompt tokens holds nothing else, and the
   decodes run in the next step no prompt is scheduled in;
2. then the waiting queue, first come first served, while fewer than ``max_num_seqs`` run, the token budget
   ``max_num_batched_tokens`` is not spent, and no request was preempted in this step; the queue stops at the
   first request that does not fit. With ``chunked_prefill`` a prompt takes what budget is left, and at most
   ``max_partial_prefills`` requests end a step partly prefilled (a waiting prompt that would be one more waits);
   without it a prompt is prefilled whole in one step (a prompt longer than the budget is an error, but a request
   resumed after preemption whose prompt and outputs exceed it is prefilled alone, over the budget);
3. KV blocks: a request holds ``ceil((computed + new) / block_size)`` blocks for the tokens scheduled; a waiting
   request is admitted only when its blocks fit. When a running request cannot get a block, the most recently
   admitted running request not yet scheduled in this step is **preempted by recompute**: its blocks are freed,
   it goes to the front of the waiting queue, and its prefill (prompt and the tokens made so far) is done again;
   the tokens already streamed stay streamed. A request that has to preempt itself waits for the next step.
4. **Prefix caching** (``prefix_caching``): the cache is warm, and the whole blocks of a request's
   ``prefix_tokens`` are hits when it is admitted (``floor(prefix / block_size) · block_size`` tokens, at most
   ``num_tokens − 1``: the last token is always computed, as vLLM does). Hit tokens are not computed (they appear
   as the ``past_kv`` of the first chunk) but their blocks count against the request as if it owned them: sharing
   between requests is not modelled, which overstates the KV in use.
5. The step takes ``step_time(batch)`` seconds, the batch holding one ``(new_tokens, past_kv)`` entry per
   scheduled request. A **decode-only** step of ``n`` requests runs as ``limits.padded(n)`` entries (the CUDA
   graph it was captured for): the pad entries are ``(1, 0)``, a token with no KV to read, which is what the
   padded slots of a captured graph compute. Mixed steps are not padded.

Time advances by step times; when nothing is running and nothing waits, the clock jumps to the next arrival. A
closed-loop workload issues its next request at the end of the step in which one finishes.

**Saturation.** An open-loop workload whose arrivals span some time (not ``rate=inf``) stops when more than
``max_waiting`` requests wait (default ``max(1024, 8·max_num_seqs)``): the result says ``saturated=True`` and why,
and holds the requests finished so far (:func:`~costmodel.serving.metrics.metrics` also calls a run saturated
when it served under 0.9 of the rate its requests were offered at). Any run stops after ``max_steps`` steps
(default ``MAX_STEPS``), saying so in ``reason`` (``saturated`` stays False).

**Speed.** Per step the work is O(running) with small constants (a decode is a few attribute updates); the token
times are kept as runs of consecutive steps per request (:attr:`Simulation.segments`) over one array of step end
times, not as a list per token.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import CostModelError
from .batch import Limits, Request, StepTime
from .workload import Workload

#: A run stops after this many steps (about a minute), whatever its lengths: a bounded cost before the work starts.
MAX_STEPS = 20_000_000


class _Seq:
    """A request's state in the scheduler."""

    __slots__ = ("idx", "req", "out", "num_tokens", "computed", "made", "blocks", "seg", "last", "step", "done")

    def __init__(self, idx: int, req: Request):
        self.idx, self.req, self.out = idx, req, req.output_tokens
        self.num_tokens, self.computed, self.made, self.blocks = req.input_tokens, 0, 0, 0
        self.seg, self.last, self.step, self.done = -1, -2, -1, False


@dataclass(frozen=True)
class Simulation:
    """What :func:`simulate` records. Arrays are indexed by request in the order issued (a closed loop's arrival
    times are those the simulator gave); an unfinished request (a saturated run) has NaN times. ``step_end_s`` is
    each step's end time, ``step_tokens`` the new tokens it computed (pads excluded), ``step_seqs`` the requests
    it ran; ``segments`` rows are ``(request, first step, past-the-last step)`` runs of consecutive steps in which
    the request emitted a token, so its token times are ``step_end_s[first:stop]`` concatenated; ``reason``: why
    the run stopped early ("" when every request finished); ``closed``: the workload was a closed loop."""

    requests: tuple[Request, ...]
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    step_end_s: np.ndarray
    step_tokens: np.ndarray
    step_seqs: np.ndarray
    segments: np.ndarray
    limits: Limits
    busy_s: float
    peak_blocks: int
    saturated: bool = False
    reason: str = ""
    closed: bool = False

    @property
    def input_tokens(self) -> np.ndarray:
        """Each request's prompt length."""
        return np.array([r.input_tokens for r in self.requests], dtype=np.int64)

    @property
    def output_tokens(self) -> np.ndarray:
        """Each request's output length."""
        return np.array([r.output_tokens for r in self.requests], dtype=np.int64)

    @property
    def finished(self) -> np.ndarray:
        """Which requests finished."""
        return ~np.isnan(self.finish_s)

    def token_times(self, i: int) -> np.ndarray:
        """The times request ``i``'s output tokens were emitted."""
        rows = self.segments[self.segments[:, 0] == i]
        return np.concatenate([self.step_end_s[a:b] for _, a, b in rows]) if len(rows) else np.empty(0)


def _check(requests: Sequence[Request], limits: Limits) -> None:
    bs, B = limits.block_size, limits.max_num_batched_tokens
    for i, r in enumerate(requests):
        blocks = -(-(r.input_tokens + r.output_tokens - 1) // bs)
        if blocks > limits.num_blocks:
            raise CostModelError(
                f"simulate: request {i} needs {blocks} KV blocks of {bs} tokens, the replica has {limits.num_blocks}"
            )
        if not limits.chunked_prefill and r.input_tokens > B:
            raise CostModelError(
                f"simulate: request {i}'s prompt of {r.input_tokens} tokens exceeds max_num_batched_tokens {B} "
                "without chunked prefill"
            )


class _Scheduler:
    """The queues and the KV blocks of one replica, and the plan of one step (:meth:`plan`)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.bs = limits.block_size
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.free = limits.num_blocks
        self.preemptions: dict[int, int] = {}

    def plan(self, k: int) -> None:
        """Choose step ``k``'s work: ``batch`` (its entries), ``decodes`` (requests making one token) and
        ``chunks`` (``(request, new tokens)`` of the others)."""
        self.k, self.budget, self.stopped, self.partial = k, self.limits.max_num_batched_tokens, False, 0
        self.batch: list[tuple[int, int]] = []
        self.decodes: list[_Seq] = []
        self.chunks: list[tuple[_Seq, int]] = []
        if not self.limits.mixed_batches:  # prompts alone when there are any, else the decodes
            self._prefill_running()
            self._admit()
            if not self.chunks:
                self._decode_running()
        elif self.limits.decode_first:
            self._decode_running()
            self._prefill_running()
            self._admit()
        else:
            self._prefill_running()
            self._admit()
            self._decode_running()

    def _preempt_for(self, s: _Seq, need: int) -> bool:
        """Free ``need`` blocks by preempting the latest admitted unscheduled requests; False when ``s`` itself
        was preempted (``s`` is unscheduled, so a victim always exists)."""
        running, k = self.running, self.k
        while self.free < need:
            victim = next(v for v in reversed(running) if v.step != k)
            running.remove(victim)
            self.free += victim.blocks
            victim.blocks, victim.computed = 0, 0
            self.preemptions[victim.idx] = self.preemptions.get(victim.idx, 0) + 1
            self.waiting.appendleft(victim)
            self.stopped = True
            if victim is s:
                return False
        return True

    def _decode_running(self) -> None:
        # the hot loop: the budget and free blocks in locals, written back before a preemption reads them
        bs, k, batch, decodes = self.bs, self.k, self.batch, self.decodes
        budget, free = self.budget, self.free
        for s in [s for s in self.running if s.num_tokens - s.computed == 1]:
            if budget <= 0:
                break
            if s.blocks == 0 or s.step == k:  # preempted earlier in this step, or admitted in it (a 1-token prompt)
                continue
            c = s.computed
            if c >= s.blocks * bs:  # the new token's KV starts a block
                if free < 1:
                    self.budget, self.free = budget, free
                    kept = self._preempt_for(s, 1)
                    free = self.free
                    if not kept:
                        continue
                free -= 1
                s.blocks += 1
            s.step = k
            batch.append((1, c))
            decodes.append(s)
            budget -= 1
        self.budget, self.free = budget, free

    def _prefill_running(self) -> None:
        bs = self.bs
        for s in [s for s in self.running if s.num_tokens - s.computed > 1]:
            left = s.num_tokens - s.computed
            if s.blocks == 0:  # preempted earlier in this step
                continue
            if self.budget <= 0:
                self.partial += 1
                continue
            new = min(left, self.budget)
            need = -(-(s.computed + new) // bs) - s.blocks
            if need > self.free and not self._preempt_for(s, need):
                continue
            self.free -= need
            s.blocks += need
            self._schedule(s, new, s.computed, left)

    def _admit(self) -> None:
        lim, waiting, B = self.limits, self.waiting, self.limits.max_num_batched_tokens
        while waiting and not self.stopped and self.budget > 0 and len(self.running) < lim.max_num_seqs:
            s = waiting[0]
            hit = min(s.req.prefix_tokens // self.bs * self.bs, s.num_tokens - 1) if lim.prefix_caching else 0
            left = s.num_tokens - hit
            if lim.chunked_prefill:
                if left > self.budget and self.partial >= lim.max_partial_prefills:
                    break
                new = min(left, self.budget)
            elif left <= self.budget or (left > B and self.budget == B):
                new = left
            else:
                break
            need = -(-(hit + new) // self.bs)
            if need > self.free:
                break
            waiting.popleft()
            self.free -= need
            s.blocks = need
            s.computed = hit
            self.running.append(s)
            self._schedule(s, new, hit, left)

    def _schedule(self, s: _Seq, new: int, past: int, left: int) -> None:
        s.step = self.k
        self.batch.append((new, past))
        self.chunks.append((s, new))
        self.budget -= new
        self.partial += new < left


def simulate(
    workload: Workload | Sequence[Request],
    step_time: StepTime,
    limits: Limits,
    *,
    max_waiting: int | None = None,
    max_steps: int = MAX_STEPS,
) -> Simulation:
    """Run ``workload`` (or a sequence of requests, an open loop) on one replica obeying ``limits``, each step
    taking ``step_time(batch)`` seconds; see the module's docstring for the rules."""
    if not isinstance(workload, Workload):
        workload = Workload(tuple(sorted(workload, key=lambda r: r.arrival_s)))
    reqs = workload.requests
    _check(reqs, limits)
    n, B, closed = len(reqs), limits.max_num_batched_tokens, workload.closed
    arrival = np.zeros(n) if closed else np.array([r.arrival_s for r in reqs])
    bound = max_waiting if max_waiting is not None else max(1024, 8 * limits.max_num_seqs)
    watch = not closed and arrival[-1] > arrival[0]
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    step_end: list[float] = []
    step_tok: list[int] = []
    step_seq: list[int] = []
    segs: list[tuple[int, int, int]] = []
    sched = _Scheduler(limits)
    waiting, padded = sched.waiting, bool(limits.cuda_graph_sizes)
    peak, clock, busy = 0, 0.0, 0.0
    nxt = min(n, workload.concurrency) if closed else 0  # the next request to issue
    waiting.extend(_Seq(i, reqs[i]) for i in range(nxt))
    done, k = 0, 0  # requests finished, the step's index
    saturated, reason = False, ""
    while done < n:
        if k >= max_steps:
            reason = f"stopped at the step limit: {max_steps:,} steps, {done:,} of {n:,} requests finished"
            break
        if not closed:
            while nxt < n and arrival[nxt] <= clock:
                waiting.append(_Seq(nxt, reqs[nxt]))
                nxt += 1
            if watch and len(waiting) > bound:
                saturated = True
                reason = (
                    f"rate past saturation: {len(waiting)} requests waiting (more than {bound}) at "
                    f"t = {clock:.3g} s with {n - nxt} still to arrive"
                )
                break
        if not sched.running and not waiting:
            clock = max(clock, float(arrival[nxt]))
            continue
        sched.plan(k)
        batch, decodes, chunks = sched.batch, sched.decodes, sched.chunks
        if not batch:
            raise RuntimeError(f"simulate: nothing scheduled at step {k} with {len(sched.running)} running")
        peak = max(peak, limits.num_blocks - sched.free)
        tokens, seqs = B - sched.budget, len(batch)  # budget -= new for every entry, even past the budget
        if padded and not chunks:
            batch.extend([(1, 0)] * (limits.padded(seqs) - seqs))
        dt = float(step_time(batch))
        if not 0 <= dt < math.inf:
            raise CostModelError(f"simulate: the step time of a batch of {seqs} requests is {dt} s; expected >= 0 s")
        clock += dt
        busy += dt
        step_end.append(clock)
        step_tok.append(tokens)
        step_seq.append(seqs)
        finished = False
        emitted = decodes + [s for s, new in chunks if _advance(s, new)]
        for s in emitted:  # every known token is now in the KV cache, and the next one is made
            s.computed = s.num_tokens
            s.num_tokens += 1
            s.made += 1
            if s.made == 1:
                first[s.idx] = clock
            if s.last != k - 1:  # a new run of consecutive steps
                if s.seg >= 0:
                    segs.append((s.idx, s.seg, s.last + 1))
                s.seg = k
            s.last = k
            if s.made == s.out:
                finished = s.done = True
        if finished:
            keep = []
            for s in sched.running:
                if not s.done:
                    keep.append(s)
                    continue
                segs.append((s.idx, s.seg, s.last + 1))
                finish[s.idx] = clock
                sched.free += s.blocks
                done += 1
                if closed and nxt < n:
                    arrival[nxt] = clock
                    waiting.append(_Seq(nxt, reqs[nxt]))
                    nxt += 1
            sched.running[:] = keep
        k += 1
    if closed:
        reqs = tuple(Request(float(t), r.input_tokens, r.output_tokens, r.prefix_tokens) for t, r in zip(arrival, reqs))
    preempt = np.zeros(n, dtype=np.int64)
    for i, count in sched.preemptions.items():
        preempt[i] = count
    return Simulation(
        requests=reqs,
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        preemptions=preempt,
        step_end_s=np.array(step_end),
        step_tokens=np.array(step_tok, dtype=np.int64),
        step_seqs=np.array(step_seq, dtype=np.int64),
        segments=np.array(sorted(segs), dtype=np.int64).reshape(-1, 3),
        limits=limits,
        busy_s=busy,
        peak_blocks=peak,
        saturated=saturated,
        reason=reason,
        closed=closed,
    )


def _advance(s: _Seq, new: int) -> bool:
    """Add a chunk's ``new`` tokens to ``s``'s KV; True when that finishes its known tokens (a token is made)."""
    s.computed += new
    return s.computed == s.num_tokens
