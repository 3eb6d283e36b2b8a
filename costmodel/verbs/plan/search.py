"""The planner's search through the chunk engine: layouts enumerated by flat index, evaluated chunk by chunk (in
one process, local processes or on a Dask cluster, :func:`~.chunks.run`) and reduced to what a plan shows.

A :class:`Search` is plain data (the compiled step, which pickles as its generated source, the device's memory
and the enumeration's parameters): a chunk's layouts are computed from their flat indices, so no list of every
layout is ever built. Layouts are grouped by (tp, cp, pp, dp, ep), in :func:`~.plan.layouts`' order; the
rows of a group (micro-batch × schedule × recompute × ZeRO, :func:`schedule_rows`) are made when a chunk
needs them.

Two passes, each chunk reduced where it ran, so only small results travel:

1. per chunk: the number of fitting layouts, their distinct steps with counts, the chunk's Pareto front and
   the fastest step of a layout matching the reference. Merged: the distinct steps (the tie groups,
   :data:`~.rank.TIE`, chain through them: a layout's ``step_rank`` needs every step below it), the
   global Pareto front (the front of the chunks' fronts) and the reference's fastest step.
2. per chunk: every fitting layout of the tie groups a plan shows (the first ones up to ``need`` layouts, those
   of the Pareto front and of the reference), which the ranking of :func:`~.rank.rank` then orders.

Memory is that of the distinct fitting steps (16 bytes each: a step and its count, which the dense step rank
needs) and of the layouts shown, not of the layouts searched. Every order breaks ties by the flat index, and
chunks are merged in order, so the result is the same for every chunk size and number of workers.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ...formulas import chunks
from ...memory.schedules import SCHEDULES
from .rank import TIE, matches, pareto

#: The columns of a layout (plan.layouts' order).
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "b", "m", "recompute", "zero", "schedule")

#: Layouts per chunk of a plan's search.
CHUNK = 1 << 16


def schedule_rows(tp, pp, dp, cp, ep, batch, layers, micro, vpps) -> list[tuple[int, ...]]:
    """The rows of one (tp, pp, dp, cp, ep): every schedule, micro-batch, recompute and ZeRO stage that holds."""
    rows = []
    scheds = (
        [("1f1b", 1)]
        if pp == 1
        else [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1)]
        + [("interleaved", v) for v in vpps if layers % (pp * v) == 0]
        + ([("dualpipe", 1)] if pp % 2 == 0 else [])
    )
    for b in micro:
        if (batch // dp) % b:
            continue
        mb = batch // dp // b
        if pp > 1 and mb < pp:  # a pipeline with fewer micro-batches than stages idles most of the step
            continue
        for (sched, v), r, z in itertools.product(scheds, range(3), range(4)):
            if (z == 3 and pp > 1) or (z and dp == 1):  # ZeRO shards over dp; FSDP runs without a pipeline
                continue
            if (sched == "interleaved" and mb % pp) or (sched == "dualpipe" and mb < 2 * pp):
                continue  # Megatron's interleaving needs m % p = 0; DualPipe needs m >= 2p
            rows.append((tp, pp, dp, cp, ep, v, b, mb, r, z, SCHEDULES.index(sched)))
    return rows


@dataclass(frozen=True)
class Space:
    """Every layout that divides, by flat index: ``groups`` (tp, pp, dp, cp, ep) in order and the number of
    rows of each; ``rest`` the arguments of :func:`schedule_rows` after the group's."""

    groups: tuple[tuple[int, ...], ...]
    counts: tuple[int, ...]
    rest: tuple
    only: tuple = ()  # (field, value or tuple of values) pairs a layout must have (plan --only); () keeps all

    def rows(self, g: int) -> np.ndarray:
        """The rows of group ``g`` (those with :attr:`only`'s fields)."""
        return _kept(_rows(*self.groups[g], *self.rest), self.only)

    @property
    def size(self) -> int:
        return sum(self.counts)

    def spans(self, chunk: int = CHUNK) -> list[tuple[int, int]]:
        """(start, stop) of each chunk, in order."""
        return [(i, min(i + chunk, self.size)) for i in range(0, self.size, chunk)]

    def columns(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The layouts ``start:stop`` as int64 columns (:data:`COLUMNS`)."""
        ends = np.cumsum(self.counts)
        g = int(np.searchsorted(ends, start, side="right"))
        blocks = []
        at = int(ends[g - 1]) if g else 0  # the flat index of group g's first row
        while at < stop and g < len(self.groups):
            part = self.rows(g)
            blocks.append(part[max(start - at, 0) : stop - at])
            at += len(part)
            g += 1
        a = np.concatenate(blocks) if blocks else np.zeros((0, len(COLUMNS)), np.int64)
        return dict(zip(COLUMNS, a.T))


def _rows(tp, pp, dp, cp, ep, *rest) -> np.ndarray:
    """:func:`schedule_rows` as an int64 array, the rows of a (pp, dp) made once (tp, cp and ep only fill
    their columns)."""
    a = _template(pp, dp, *rest).copy()
    a[:, 0], a[:, 3], a[:, 4] = tp, cp, ep
    return a


def _kept(rows: np.ndarray, only: tuple) -> np.ndarray:
    return rows[matches(dict(zip(COLUMNS, rows.T)), dict(only))] if only else rows


@functools.lru_cache(maxsize=256)  # bounded: a plan has a few hundred (pp, dp) at most
def _template(pp, dp, batch, layers, micro, vpps) -> np.ndarray:
    rows = schedule_rows(1, pp, dp, 1, 1, batch, layers, micro, vpps)
    return np.array(rows, dtype=np.int64).reshape(-1, len(COLUMNS))


def space(devices, batch, layers, seq, node, heads, micro, vpps, cps, experts, eps, only=None) -> Space:
    """The :class:`Space` of :func:`~.plan.layouts`' arguments; ``only``: fields a layout must have."""
    only = tuple(sorted(only.items())) if only else ()
    if eps is None:
        eps = tuple(1 << i for i in range(experts.bit_length()))
    eps = tuple(e for e in eps if experts % e == 0) or (1,)
    groups, counts = [], []
    pows = [x for x in (1, 2, 4, 8, 16) if x <= 2 * node]
    rest = (batch, layers, tuple(micro), tuple(vpps))
    for tp, cp in itertools.product(pows, cps):
        if heads and heads % tp or seq % cp:
            continue
        for pp in range(1, min(devices, layers) + 1):
            if devices % (tp * cp * pp) or layers % pp:
                continue
            dp = devices // (tp * cp * pp)
            if batch % dp:
                continue
            for ep in (e for e in eps if dp % e == 0):
                n = len(_kept(_rows(tp, pp, dp, cp, ep, *rest), only) if only else _template(pp, dp, *rest))
                if n:
                    groups.append((tp, pp, dp, cp, ep))
                    counts.append(n)
    return Space(tuple(groups), tuple(counts), rest, only)


@dataclass(frozen=True)
class Search:
    """One plan's search: the layouts, the compiled step (``evaluate(compiled, columns)`` gives step seconds and
    screened memory), the device's memory and the reference's fields (or None)."""

    layouts: Space
    compiled: object
    evaluate: Callable
    capacity: float
    reference: Mapping | None = None
    _last: dict = field(default_factory=dict, compare=False, repr=False)  # the last chunk, for pass 2

    def __reduce__(self):  # travels without the last chunk's arrays
        return (Search, (self.layouts, self.compiled, self.evaluate, self.capacity, self.reference))

    @property
    def size(self) -> int:
        return self.layouts.size

    def spans(self, chunk: int = CHUNK) -> list[tuple[int, int]]:
        return self.layouts.spans(chunk)

    def fitting(self, start: int, stop: int):
        """(columns, flat indices, steps, memory) of the fitting layouts ``start:stop``. The last chunk is
        kept: a search of one chunk in one process evaluates it once for both passes."""
        last = self._last.get("chunk")  # one slot, replaced whole: threads of a Dask worker may share it
        if last is not None and last[0] == (start, stop):
            return last[1]
        lay = self.layouts.columns(start, stop)
        t, mem = self.evaluate(self.compiled, lay)
        out = lay, np.flatnonzero(mem <= self.capacity), t, mem
        self._last["chunk"] = ((start, stop), out)
        return out


def summary(search: Search, start: int, stop: int) -> tuple:
    """Pass 1 over ``start:stop``: (fitting, distinct steps, their counts, Pareto front as (index, step,
    memory), the fastest step of a fitting layout matching the reference or None)."""
    lay, fits, t, mem = search.fitting(start, stop)
    steps, counts = np.unique(t[fits], return_counts=True)
    front = np.sort(pareto(t[fits], mem[fits])) if len(fits) else np.zeros(0, np.int64)
    front = fits[front]
    ref = None
    if search.reference and len(fits):
        hit = fits[matches({k: v[fits] for k, v in lay.items()}, search.reference)]
        ref = float(t[hit].min()) if len(hit) else None
    return len(fits), steps, counts, (start + front, t[front], mem[front]), ref


class Collect:
    """Pass 2: every fitting layout of ``start:stop`` whose step lies in one of the closed intervals
    [``lo``, ``hi``] (sorted, disjoint), with its flat index, step and memory. Picklable."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, search: Search, start: int, stop: int) -> dict[str, np.ndarray]:
        lay, fits, t, mem = search.fitting(start, stop)
        i = np.searchsorted(self.lo, t[fits], side="right") - 1
        keep = fits[(i >= 0) & (t[fits] <= self.hi[np.maximum(i, 0)])]
        out = {k: v[keep] for k, v in lay.items()}
        out.update(index=start + keep, step_s=t[keep], memory=mem[keep])
        return out


def _merge(steps: list, counts: list) -> tuple[np.ndarray, np.ndarray]:
    s, c = np.concatenate(steps), np.concatenate(counts)
    u, inv = np.unique(s, return_inverse=True)
    return u, np.bincount(inv.ravel(), weights=c, minlength=len(u)).astype(np.int64)


@dataclass
class Found:
    """A search's result: ``searched``, ``fitting``; ``rows``: the layouts a plan shows (columns, ``index``,
    ``step_s``, ``memory``, ``place``, ``step_rank``, ``tie_size``, ``tie_position``) in ranking order;
    ``front``: positions in ``rows`` of the Pareto front, fastest first; ``reference``: the position of the
    best-placed fitting layout matching the reference, or None."""

    searched: int
    fitting: int
    rows: dict
    front: np.ndarray
    reference: int | None


def search(
    s: Search,
    need: int,
    *,
    workers: int = 1,
    dask: object = None,
    chunk: int = CHUNK,
    progress: Callable[[int], None] | None = None,
) -> Found:
    """Run the two passes (see the module notes) through the chunk engine (:func:`~.chunks.run`: ``workers``
    local processes or a Dask cluster at ``dask``); ``need``: the first layouts of the ranking to give;
    ``progress(done)``: told the layouts searched after each chunk."""

    def run(task):
        return chunks.run(s, task, workers=workers, dask=dask, chunk=chunk)

    fitting, steps, counts = 0, [], []
    front = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    ref = None
    for (_, stop), (n_fit, u, c, f, r) in zip(s.spans(chunk), run(summary)):
        fitting += n_fit
        steps.append(u)
        counts.append(c)
        if sum(len(x) for x in steps[1:]) > max(1 << 15, len(steps[0])):  # merged when the new ones are as many
            merged = _merge(steps, counts)
            steps, counts = [merged[0]], [merged[1]]
        idx, t, m = (np.concatenate(p) for p in zip(front, f))  # in index order: ties go to the first
        keep = np.sort(pareto(t, m)) if len(idx) else idx
        front = (idx[keep], t[keep], m[keep])
        if r is not None and (ref is None or r < ref):
            ref = r
        if progress is not None:
            progress(stop)
    if not fitting:
        keys = (*COLUMNS, "index", "place", "step_rank", "tie_size", "tie_position")
        empty = {k: np.zeros(0, np.int64) for k in keys} | {"step_s": np.zeros(0), "memory": np.zeros(0)}
        return Found(s.size, 0, empty, np.zeros(0, np.int64), None)
    u, c = _merge(steps, counts)
    # tie groups: a step within TIE of the one below joins its group (rank.rank's chain)
    gid = np.cumsum(np.r_[True, u[1:] > u[:-1] * (1 + TIE)])
    size = np.bincount(gid, weights=c).astype(np.int64)  # layouts per group (index 0 unused)
    before = np.cumsum(size) - size  # fitting layouts in the groups before
    wanted = set(range(1, int(np.searchsorted(before[1:], need, side="left")) + 1))  # groups placed before need
    wanted.update(int(gid[np.searchsorted(u, t)]) for t in front[1])
    if ref is not None:
        wanted.add(int(gid[np.searchsorted(u, ref)]))
    g = np.array(sorted(wanted))
    lo = u[np.searchsorted(gid, g, side="left")]
    hi = u[np.searchsorted(gid, g, side="right") - 1]
    parts = list(run(Collect(lo, hi)))
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    rg = gid[np.searchsorted(u, rows["step_s"])]
    group = rows["tp"] * rows["cp"] * rows["pp"]
    keys = (rows["schedule"], rows["zero"], rows["recompute"], group, rows["memory"], rg)
    order = np.lexsort(keys)  # rows are in index order, and lexsort is stable: ties go to the first
    rows = {k: v[order] for k, v in rows.items()}
    rg = rg[order]
    first = np.searchsorted(rg, rg, side="left")  # the position of each group's first row
    rows.update(
        place=before[rg] + np.arange(len(rg)) - first + 1,
        step_rank=rg,
        tie_size=size[rg],
        tie_position=np.arange(len(rg)) - first + 1,
    )
    by_index = np.argsort(rows["index"])
    pos = by_index[np.searchsorted(rows["index"], front[0], sorter=by_index)]
    fastest = pos[np.lexsort((front[2], front[1]))]  # rank.pareto's order: fastest, then smallest memory
    best_ref = None
    if ref is not None:
        hit = np.flatnonzero(matches(rows, s.reference) & (rg == gid[np.searchsorted(u, ref)]))
        best_ref = int(hit[0])  # rows are in ranking order
    return Found(s.size, fitting, rows, fastest, best_ref)
