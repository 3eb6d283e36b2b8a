"""A sweep streamed to a file or stdout, chunk by chunk: memory flat in the grid's size.

:func:`write` runs the chunk engine (:func:`~.chunks.run`: one process, local processes or a Dask cluster)
with :func:`chunk_task`, which evaluates a chunk and formats it where it ran, so only bytes travel back; the
chunks are written in the grid's order, so the output is byte-identical whatever spreads them. A file is
written beside its target and renamed into place when complete (an interrupted sweep leaves the old file).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np

from ..errors import CostModelError
from . import writers
from .chunks import CHUNK, Plan, evaluate, run

TEXT_FORMATS = ("table", "csv", "jsonl")


def dtype(plan: Plan, shown: Sequence[str], fmt: str) -> np.dtype:
    """The record of a binary format: int64 grid values (refused up front beyond int64), float64 metrics
    (int64 when exact), a bool ``valid``."""
    from .chunks import _fits

    for name, axis in zip(plan.names, plan.axes):
        if not _fits(axis):
            raise CostModelError(f"--format {fmt}: --grid {name} has values beyond int64; expected 64-bit "
                                 "integers (use --format csv or jsonl for sizes of any magnitude)")
    kinds = {**{k: "<i8" for k in plan.names}, **{k: "<i8" if plan.exact else "<f8" for k in plan.metrics},
             "valid": "?"}
    return np.dtype([(k, kinds[k]) for k in shown])


def chunk_task(plan: Plan, start: int, stop: int, fmt: str, shown: tuple[str, ...], budget: tuple | None,
               cell=str):
    """Evaluate configs ``start:stop`` and format them: (payload, (score, index) of the best config for a
    budget or None). ``cell``: how the table shows one value. A module-level function: it pickles to a local
    process or a Dask worker."""
    cols = evaluate(plan, start, stop)
    best = None
    if budget is not None and stop > start:
        from .sweep import _scores  # deferred: a worker imports sweep's derivation only when a budget asks

        score = _scores(cols, *budget)
        i = int(np.argmin(score))
        best = (float(score[i]), start + i)
    if fmt in ("csv", "jsonl"):
        payload = writers.text(cols, shown, fmt)
    elif fmt == "table":
        payload = _table_rows(cols, shown, cell)
    else:
        payload = writers.record(cols, shown, dtype(plan, shown, fmt), fmt)
        payload = payload.tobytes() if fmt == "npy" else payload
    return payload, best


def _table_rows(cols: dict, shown: Sequence[str], cell) -> bytes:
    from .results import Sweep

    s = Sweep(cols)
    rows = zip(*([f"{cell(v):>14}" for v in s.column(k)] for k in shown))
    return "".join("  ".join(r) + "\n" for r in rows).encode("utf-8")


def write(plan: Plan, shown: Sequence[str], fmt: str, *, output: str | None = None, stream=None,
          workers: int = 1, dask: object = None, chunk: int = CHUNK, budget: tuple | None = None, cell=str):
    """Write the sweep to ``output`` (atomically) or to the binary ``stream``; return (score, index) of the
    config closest to compute-optimal when ``budget`` = (C, r), else None."""
    shown = tuple(shown)
    if fmt not in (*TEXT_FORMATS, "npy", "parquet"):
        raise CostModelError(f"--format {fmt}: expected one of table, csv, jsonl, npy, parquet, json")
    if fmt in ("npy", "parquet"):
        dt = dtype(plan, shown, fmt)
    if fmt == "parquet" and output is None:
        raise CostModelError("--format parquet: expected --output FILE (Parquet is written to a file)")
    tmp = None
    if output is not None:
        target = os.path.abspath(output)
        if os.path.isdir(target):
            raise CostModelError(f"--output {output!r} is a directory; expected a file name")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                       dir=os.path.dirname(target))
        except OSError as exc:
            raise CostModelError(f"--output {output!r}: cannot write there ({exc.strerror or exc})") from None
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a user's file, not a secret: mkstemp's 0600 is not what they asked for
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
        if tmp is not None:
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        raise CostModelError(f"cannot write the sweep to {output or 'stdout'!r}: {exc.strerror or exc}") from None
    finally:
        if pq_writer is not None:
            pq_writer.close()
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return best


class _Task:
    """``chunk_task`` with the format fixed: a picklable callable ``(plan, start, stop)``."""

    def __init__(self, fmt: str, shown: tuple[str, ...], budget: tuple | None, cell) -> None:
        self.fmt, self.shown, self.budget, self.cell = fmt, shown, budget, cell

    def __call__(self, plan: Plan, start: int, stop: int):
        return chunk_task(plan, start, stop, self.fmt, self.shown, self.budget, self.cell)
