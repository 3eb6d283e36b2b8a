"""The chunk engine: a Cartesian product of configs evaluated in chunks, in one process, in local processes or
on a Dask cluster, with results always in the product's order.

A :class:`Plan` is plain data (generated source, symbol names, the model's values, the grid's axes): it pickles
to a worker, which compiles the source once and never needs sympy. Axes stay ``range`` objects or short tuples;
a chunk's configs are computed from their flat indices (row-major: the last axis varies fastest), so no
product is ever materialised and memory is flat in the grid's size. Constants stay scalars.

Metrics are float64 (``exact=False``) or exact (Python ints and Fractions); validity — the checks
``estimate`` makes (:attr:`costmodel.formulas.compiled.Formulas.checks`) — is always exact: int64 with checked
overflow (:mod:`.checked`), falling back to Python ints for a chunk whose numbers could leave int64.

>>> plan = Plan(source=("def f(h, v_d, v_h):\\n    return [(v_d)*(v_h)]\\n",
...                     "def f(h, v_d, v_h):\\n    _F, _div, _max, _min, _ceil, _floor, _where, _and = h\\n"
...                     "    return [((_div(v_d, v_h)) % (1)) == (0)]\\n"),
...             symbols=("d", "h"), metrics=("m",), base={"d": 768, "h": 12}, names=("d",),
...             axes=(range(760, 770, 4),))
>>> out = evaluate(plan, 0, plan.size)
>>> out["d"].tolist(), out["m"].tolist(), out["valid"].tolist()
([760, 764, 768], [9120.0, 9168.0, 9216.0], [False, False, True])
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import CostModelError
from .checked import Int64OverflowError, Q, checked_mode, exact_values
from .compiled import float_mode, object_mode, run_source
from .wide import columns as wide_columns

#: Configs per chunk: a few MB per column, large enough that numpy's per-call cost vanishes.
CHUNK = 1 << 17
#: At most this many chunks: a chunk costs about 1.5 ms whatever its size, so ``--chunk 1`` over 10^7 configs
#: would take hours (and a list of 10^7 spans); a smaller chunk is raised to size / MAX_CHUNKS (same result).
MAX_CHUNKS = 10_000

_INT64 = 2**63


@dataclass(frozen=True)
class Plan:
    """What one sweep evaluates (see the module notes). ``source``: the generated functions of the metrics
    and of the checks, both ``f(h, *symbols)``; ``base``: every symbol's value outside the grid."""

    source: tuple[str, str]
    symbols: tuple[str, ...]
    metrics: tuple[str, ...]
    base: dict
    names: tuple[str, ...]
    axes: tuple
    exact: bool = False

    @property
    def size(self) -> int:
        return math.prod(len(a) for a in self.axes)

    def spans(self, chunk: int = CHUNK) -> list[tuple[int, int]]:
        """(start, stop) of each chunk, in order."""
        return [(i, min(i + chunk, self.size)) for i in range(0, self.size, chunk)]


_COMPILED: dict[str, object] = {}


def _fn(source: str):
    if source not in _COMPILED:
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        _COMPILED[source] = run_source(source)
    return _COMPILED[source]


def _fits(axis) -> bool:
    if isinstance(axis, range):
        return len(axis) == 0 or (-_INT64 <= min(axis[0], axis[-1]) and max(axis[0], axis[-1]) < _INT64)
    return all(-_INT64 <= v < _INT64 for v in axis)


def grid_columns(plan: Plan, start: int, stop: int) -> dict[str, np.ndarray]:
    """The grid's values at flat indices ``start:stop``: int64 arrays, or object arrays of Python ints
    for an axis beyond int64."""
    idx = np.arange(start, stop, dtype=np.int64)
    out = {}
    for name, axis in reversed(list(zip(plan.names, plan.axes))):
        k = len(axis)
        i = idx % k
        idx = idx // k
        if isinstance(axis, range) and _fits(axis):
            out[name] = axis.start + axis.step * i  # int64: the axis's ends fit, so every value does
        elif _fits(axis):
            out[name] = np.asarray(axis, dtype=np.int64)[i]
        else:
            values = np.empty(k, dtype=object)
            values[:] = list(axis)
            out[name] = values[i]
    return {name: out[name] for name in plan.names}


def evaluate(plan: Plan, start: int, stop: int, wide: bool = False) -> dict[str, np.ndarray]:
    """The grid columns, the metrics and ``valid`` of configs ``start:stop`` (numpy arrays of equal length).
    ``wide`` (exact plans): a chunk whose numbers leave int64 is first tried in int64 limbs
    (:mod:`.wide`), whose columns are :class:`~.wide.Exact`, and only then in Python ints."""
    n = stop - start
    cols = grid_columns(plan, start, stop)
    out: dict[str, np.ndarray] = dict(cols)
    metrics_src, checks_src = plan.source
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # inf and nan are values here, never warnings
        warnings.simplefilter("ignore")
        if plan.exact:
            values = _exact(_fn(metrics_src), plan, cols, n, wide=wide)
        else:
            args = [cols[s].astype(np.float64) if s in cols else float(plan.base[s]) for s in plan.symbols]
            values = [
                np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for v in _fn(metrics_src)(float_mode(), *args)
            ]
        checks = _exact(_fn(checks_src), plan, cols, n, truth=True)
    out.update(zip(plan.metrics, values))
    valid = np.ones(n, dtype=bool)
    for c in checks:
        valid &= c
    out["valid"] = valid
    return out


def _exact(fn: Callable, plan: Plan, cols: dict, n: int, truth: bool = False, wide: bool = False) -> list:
    """Exact values of ``fn`` at the chunk: int64 with checked overflow, else (``wide``) int64 limbs where every
    value is integer arithmetic, else Python ints."""
    try:
        if all(c.dtype != object for c in cols.values()):
            args = [Q(cols[s]) if s in cols else plan.base[s] for s in plan.symbols]
            res = fn(checked_mode(), *args)
            if truth:
                return [np.broadcast_to(np.asarray(r, dtype=bool), (n,)) for r in res]
            return [_objects(exact_values(r), n) for r in res]
    except Int64OverflowError:
        pass
    if wide and all(c.dtype != object for c in cols.values()):
        found = wide_columns(fn, plan.symbols, {**plan.base, **cols}, n, range(len(plan.metrics)))
        if len(found) == len(plan.metrics):
            return [found[i] for i in range(len(plan.metrics))]
    args = [np.asarray(cols[s], dtype=object) if s in cols else plan.base[s] for s in plan.symbols]
    try:
        res = fn(object_mode(), *args)
    except ZeroDivisionError:
        raise CostModelError(
            "sweep: a division by zero at some configs of the grid; expected sizes that are positive"
        ) from None
    if truth:
        return [np.broadcast_to(np.asarray(r, dtype=bool), (n,)) for r in res]
    return [_objects(np.broadcast_to(np.asarray(r, dtype=object), (n,)).tolist(), n) for r in res]


def widen(plan: Plan, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A float chunk's metrics that pass 2^53 (where float64 stops being exact), as their exact integers
    (:class:`~.wide.Exact`) where the formula is integer arithmetic; other columns as they are."""
    big = [
        i
        for i, k in enumerate(plan.metrics)
        if cols[k].dtype == np.float64 and np.any(np.abs(cols[k][np.isfinite(cols[k])]) >= 2.0**53)
    ]
    if not big or any(c.dtype == object for c in cols.values()):
        return cols
    n = len(cols["valid"])
    found = wide_columns(_fn(plan.source[0]), plan.symbols, {**plan.base, **cols}, n, big)
    return {**cols, **{plan.metrics[i]: v for i, v in found.items()}}


def _objects(values: list, n: int) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out[:] = values if len(values) == n else values * n
    return out


# -- running chunks, in order ------------------------------------------------------------------------


def run(plan: Plan, task: Callable, *, workers: int = 1, dask: object = None, chunk: int = CHUNK) -> Iterator:
    """``task(plan, start, stop)`` for every chunk, yielded in order. ``plan``: a :class:`Plan`, or any picklable
    object with its ``spans(chunk)`` (the planner's :class:`~costmodel.verbs.plan.search.Search`). ``workers > 1``: local processes;
    ``dask``: a scheduler address or a ``distributed.Client``. At most two chunks per worker are in flight,
    so memory stays flat however many chunks there are."""
    size = getattr(plan, "size", 0)
    spans = plan.spans(max(chunk, -(-size // MAX_CHUNKS)))
    if dask is not None:
        yield from _run_dask(plan, task, spans, dask)
    elif workers > 1 and len(spans) > 1:
        from concurrent.futures import ProcessPoolExecutor  # deferred: one process needs no pool

        with ProcessPoolExecutor(max_workers=workers) as pool:
            yield from _windowed(lambda s: pool.submit(task, plan, *s), spans, 2 * workers, lambda f: f.result())
    else:
        for s in spans:
            yield task(plan, *s)


def _windowed(submit: Callable, spans: Sequence, window: int, result: Callable) -> Iterator:
    pending: deque = deque()
    todo = iter(spans)
    for s in todo:
        pending.append(submit(s))
        if len(pending) >= window:
            break
    while pending:
        done = pending.popleft()
        nxt = next(todo, None)
        if nxt is not None:
            pending.append(submit(nxt))
        yield result(done)


def _run_dask(plan: Plan, task: Callable, spans: Sequence, dask: object) -> Iterator:
    try:
        import distributed  # an optional package: pip install 'costmodel[dask]'
    except ModuleNotFoundError:
        raise CostModelError("--dask needs dask.distributed: pip install 'costmodel[dask]'") from None
    client = dask if isinstance(dask, distributed.Client) else None
    own = client is None
    if own:
        try:
            client = distributed.Client(str(dask), timeout=30)
        except (OSError, TimeoutError, ValueError) as exc:
            raise CostModelError(
                f"--dask {dask!r}: cannot reach the scheduler ({exc}); expected an address such as tcp://127.0.0.1:8786"
            ) from None
    try:
        [remote] = client.scatter([plan], broadcast=True)  # the plan travels once, not with every chunk
        window = 2 * max(1, len(client.scheduler_info().get("workers", {})))
        yield from _windowed(lambda s: client.submit(task, remote, *s, pure=False), spans, window, lambda f: f.result())
    finally:
        if own:
            client.close()
