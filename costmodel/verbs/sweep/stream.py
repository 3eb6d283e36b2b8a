"""The ``sweep`` verb: a grid's metrics streamed to a file or stdout chunk by chunk (memory flat in the grid's
size), or collected into columns.

:func:`write` runs the chunk engine (:func:`~.chunks.run`: one process, local processes or a Dask cluster)
with :func:`chunk_task`, which evaluates a chunk and formats it where it ran, so only bytes travel back; the
chunks are written in the grid's order, so the output is byte-identical whatever spreads them. A file is
written beside its target and renamed into place when complete (an interrupted sweep leaves the old file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import CostModelError
from ...formulas.chunks import CHUNK, Plan, evaluate, run, widen
from ...options import Options, check_names, check_settings
from ...render.results import Sweep
from . import writers

TEXT_FORMATS = ("table", "csv", "jsonl")


def dtype(plan: Plan, shown: Sequence[str], fmt: str) -> np.dtype:
    """The record of a binary format: int64 grid values (refused up front beyond int64), float64 metrics
    (int64 when exact), a bool ``valid``."""
    from ...formulas.chunks import _fits  # a helper of the engine, not part of its interface

    for name, axis in zip(plan.names, plan.axes):
        if not _fits(axis):
            raise CostModelError(
                f"--format {fmt}: --grid {name} has values beyond int64; expected 64-bit "
                "integers (use --format csv or jsonl for sizes of any magnitude)"
            )
    kinds = {
        **{k: "<i8" for k in plan.names},
        **{k: "<i8" if plan.exact else "<f8" for k in plan.metrics},
        "valid": "?",
    }
    return np.dtype([(k, kinds[k]) for k in shown])


def chunk_task(plan: Plan, start: int, stop: int, fmt: str, shown: tuple[str, ...], budget: tuple | None, cell=str):
    """Evaluate configs ``start:stop`` and format them: (payload, (score, index) of the best config for a
    budget or None). ``cell``: how the table shows one value. A module-level function: it pickles to a local
    process or a Dask worker."""
    text = fmt in ("csv", "jsonl")
    cols = evaluate(plan, start, stop, wide=text)
    best = None
    if budget is not None and stop > start:
        from .derive import _scores  # deferred: a worker imports sweep's derivation only when a budget asks

        score = _scores(cols, *budget)
        i = int(np.argmin(score))
        best = (float(score[i]), start + i)
    if text:  # numbers past 2^53 written exactly where their formula is integer arithmetic
        payload = writers.text(cols if plan.exact else widen(plan, cols), shown, fmt)
    elif fmt == "table":
        payload = _table_rows(cols, shown, cell)
    else:
        payload = writers.record(cols, shown, dtype(plan, shown, fmt), fmt)
        payload = payload.tobytes() if fmt == "npy" else payload
    return payload, best


def _table_rows(cols: dict, shown: Sequence[str], cell) -> bytes:
    s = Sweep(cols)
    rows = zip(*([f"{cell(v):>14}" for v in s.column(k)] for k in shown))
    return "".join("  ".join(r) + "\n" for r in rows).encode("utf-8")


def write(
    plan: Plan,
    shown: Sequence[str],
    fmt: str,
    *,
    output: str | None = None,
    stream=None,
    workers: int = 1,
    dask: object = None,
    chunk: int = CHUNK,
    budget: tuple | None = None,
    cell=str,
):
    """Write the sweep to ``output`` (atomically) or to the binary ``stream``; return (score, index) of the
    config closest to compute-optimal when ``budget`` = (C, r), else None."""
    shown = tuple(shown)
    if fmt not in (*TEXT_FORMATS, "npy", "parquet"):
        raise CostModelError(f"--format {fmt}: expected one of table, csv, jsonl, npy, parquet, json")
    if fmt in ("npy", "parquet"):
        dt = dtype(plan, shown, fmt)
    if fmt == "parquet" and output is None:
        raise CostModelError("--format parquet: expected --output FILE (Parquet is written to a file)")
    tmp = pending = None
    if output is not None:
        if os.path.isdir(output):
            raise CostModelError(f"--output {output!r} is a directory; expected a file name")
        from ...files import prepare  # deferred: only a file output writes one

        pending = prepare(output, "the sweep")  # a device or a link is written through, never replaced
        tmp = pending.tmp
    best = None
    pq_writer = None
    try:
        fh = open(tmp, "wb") if tmp is not None else stream
        try:
            if fmt == "parquet":
                pq_writer, pa = writers.parquet_writer(tmp, dt)
            elif fmt == "npy":
                fh.write(writers.npy_header(dt, plan.size))
            elif fmt == "csv":
                fh.write(writers.header(shown))
            elif fmt == "table":
                fh.write(("  ".join(f"{k:>14}" for k in shown) + "\n").encode("utf-8"))
            task = _Task(fmt, shown, budget, cell)
            for payload, b in run(plan, task, workers=workers, dask=dask, chunk=chunk):
                if b is not None and (best is None or b[0] < best[0]):
                    best = b
                if pq_writer is not None:
                    pq_writer.write_table(writers.parquet_table(pa, payload))
                else:
                    fh.write(payload)
            if pq_writer is not None:
                pq_writer.close()
                pq_writer = None
        finally:
            if tmp is not None:
                fh.close()
        if pending is not None:
            pending.commit()  # the mode: the umask's for a new file (mkstemp's 0600 is not what they asked for)
            tmp = None
    except OSError as exc:
        raise CostModelError(f"cannot write the sweep to {output or 'stdout'!r}: {exc.strerror or exc}") from None
    finally:
        if pq_writer is not None:
            pq_writer.close()
        if pending is not None:
            pending.discard()
    return best


class _Task:
    """``chunk_task`` with the format fixed: a picklable callable ``(plan, start, stop)``."""

    def __init__(self, fmt: str, shown: tuple[str, ...], budget: tuple | None, cell) -> None:
        self.fmt, self.shown, self.budget, self.cell = fmt, shown, budget, cell

    def __call__(self, plan: Plan, start: int, stop: int):
        return chunk_task(plan, start, stop, self.fmt, self.shown, self.budget, self.cell)


EXTRA = ["params.non_embedding", "flops.training", "tokens.per_step"]  # what the compute-optimal point needs


def sweep(
    model: object,
    grid: Mapping[str, Sequence[int]] | Sequence[str],
    metrics: Sequence[str] = ("flops.training",),
    *,
    settings: Mapping[str, object] | None = None,
    exact: bool = False,
    budget: object = None,
    ratio: object = 20,
    workers: int = 1,
    dask: object = None,
    format: str | None = None,
    output: str | None = None,
    stream=None,
    chunk: int | None = None,
    cell=str,
    options: Options | None = None,
    **kwargs: object,
) -> Sweep:
    """Evaluate ``metrics`` over the Cartesian product of ``grid`` (symbol name → values, or
    ``"NAME=SPEC"`` strings as on the command line).

    Returns column name → 1-D array: the grid symbols, then the metrics, then ``valid`` (False where a
    config describes no model: an axis size such as d/h is not a whole number, a constraint fails, a
    layout does not divide). Symbols not in the grid keep the model's values (``settings`` on top);
    ``options`` are those of :func:`~costmodel.sections.run.estimate` and apply to every point.
    ``budget``: a FLOP budget C; the result's ``optimal`` gives the compute-optimal N and D
    (C = 6ND, D = ``ratio``·N) and the swept config closest to it. ``workers`` (local processes) and
    ``dask`` (a scheduler address or a ``distributed.Client``) spread the chunks; the result is the same.

    ``format`` (``table``, ``csv``, ``jsonl``, ``npy``, ``parquet``, ``json``) writes the sweep to ``output``
    (a file, atomically) or to the binary ``stream`` instead, chunk by chunk (``json``: in memory), and returns
    a result with no columns (its ``optimal`` when a budget was given); ``cell`` shows one value of a table.
    """
    metrics = list(dict.fromkeys(check_names(metrics, "sweep: metrics", "['flops.training']")))
    if not isinstance(grid, Mapping):
        check_names(grid, "sweep: grid", "{'d': [768, 1024]} or ['d=768:4096:256']")
    check_settings(settings)
    wanted = list(dict.fromkeys([*metrics, *(EXTRA if budget is not None else [])]))
    opts = Options.make(options, **kwargs)
    opt = None
    if budget is not None:
        from .derive import chinchilla_optimal  # deferred: exact square roots need sympy; a sweep does not

        opt = chinchilla_optimal(budget, ratio)
    if isinstance(model, str):  # cached formulas when there are (see .plans), else derived
        from .plans import cached_plan  # deferred: plans imports the estimate's cache keys

        p, name = cached_plan(model, grid, wanted, settings=settings, exact=exact, options=opts)
    else:
        from .derive import derive_plan as derive  # deferred: deriving needs sympy

        p, m = derive(model, grid, wanted, settings=settings, exact=exact, options=opts)
        name = m.name
    shown = [*p.names, *metrics, "valid"]
    if format not in (None, "json"):
        best = write(
            p,
            shown,
            format,
            output=output,
            stream=stream,
            workers=workers,
            dask=dask,
            chunk=chunk or CHUNK,
            budget=(float(opt["budget"]), float(opt["tokens_per_param"])) if opt is not None else None,
            cell=cell,
        )
        optimal = _optimal(opt, p, evaluate(p, best[1], best[1] + 1) if best is not None else None, 0)
        return Sweep({}, model=name, grid=list(p.names), metrics=metrics, exact=exact, optimal=optimal)
    parts = list(run(p, evaluate, workers=workers, dask=dask, chunk=chunk or CHUNK))
    out = {k: np.concatenate([c[k] for c in parts]) if parts else np.empty(0) for k in [*p.names, *wanted, "valid"]}
    i = None
    if opt is not None and p.size:
        from .derive import closest_to_optimal  # deferred: with chinchilla_optimal, above

        i = closest_to_optimal(out, opt["budget"], opt["tokens_per_param"])
    optimal = _optimal(opt, p, out, i)
    for k in wanted:
        if k not in metrics:
            del out[k]
    result = Sweep(out, model=name, grid=list(p.names), metrics=metrics, exact=exact, optimal=optimal)
    if format == "json":
        text = result.to_json() + "\n"
        if output is not None:
            from ...files import write_atomic  # deferred: only a file output writes one

            write_atomic(output, text, "sweep")
        elif stream is not None:
            stream.write(text.encode("utf-8"))
    return result


def _optimal(opt, p: Plan, cols, i) -> dict | None:
    if opt is None:
        return None
    from .derive import describe_optimal  # deferred: with chinchilla_optimal, above

    found = cols is not None and p.size and i is not None
    return describe_optimal(opt, {k: int(cols[k][i]) for k in p.names} if found else {})
