"""Sweep chunks written as CSV, JSON lines, ``.npy`` or Parquet, without a Python loop over rows.

Text is built column by column: a column's values become one fixed-width byte matrix (``repr`` of a list, split
at its separators, or a table for truth values) with a mask of the bytes that are kept; the columns and the
constant separators are laid side by side and the masked bytes read off row by row. Numbers are written as
:meth:`costmodel.reports.results.Sweep.column` shows them: floats that are whole numbers under 2^53 as
integers, other floats as Python writes them (shortest round trip), non-finite floats as an empty CSV field or
``null`` (strict JSON), exact fractions as ``p/q`` (a string in JSON). Exact integers beyond int64
(:class:`~costmodel.reports.wide.Exact`, which a sweep's text gets for a metric past 2^53 whose formula is
integer arithmetic) are written in full, as ``hi`` and ``lo`` of ``hi·10^16 + lo``.

>>> import numpy as np
>>> cols = {"d": np.array([64, 128]), "m": np.array([1.5e20, np.inf]), "valid": np.array([True, False])}
>>> text(cols, ["d", "m", "valid"], "csv").decode()
'64,1.5e+20,True\\n128,,False\\n'
>>> text(cols, ["d", "m", "valid"], "jsonl").decode()
'{"d":64,"m":1.5e+20,"valid":true}\\n{"d":128,"m":null,"valid":false}\\n'
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from ..errors import CostModelError
from .wide import Exact

FORMATS = ("csv", "jsonl", "npy", "parquet")


def _matrix(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = int(lengths.max()) if len(lengths) else 0
    cols = np.arange(w)
    keep = cols < lengths[:, None]
    idx = np.minimum(starts[:, None] + cols, max(len(buf) - 1, 0))
    return (buf[idx] if len(buf) else np.zeros((len(lengths), w), np.uint8)), keep


def _split(joined: str, n: int, sep: str) -> tuple[np.ndarray, np.ndarray]:
    """n fields joined by ``sep`` (whose first character occurs nowhere else) → byte matrix and mask."""
    buf = np.frombuffer(joined.encode("utf-8"), np.uint8)
    at = np.flatnonzero(buf == ord(sep[0]))
    starts = np.concatenate(([0], at + len(sep))).astype(np.int64)
    ends = np.concatenate((at, [len(buf)])).astype(np.int64)
    assert len(starts) == n, "a separator inside a field"
    return _matrix(buf, starts, ends - starts)


def _by_10000(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u // 10^4, u % 10^4) of non-negative int64 values, by unsigned division by a typed constant: numpy
    divides by it with a multiply and shift, where a signed ``divmod`` by a Python int divides each value."""
    v = np.ascontiguousarray(u, dtype=np.int64).view(np.uint64)  # non-negative: the same bits
    q = v // _TEN_THOUSAND
    return q.view(np.int64), (v - q * _TEN_THOUSAND).view(np.int64)


_TEN_THOUSAND = np.uint64(10000)
_DIGITS = np.array([list(f"{i:04d}".encode()) for i in range(10000)], np.uint8).view("<u4").ravel()  # "0000"…
_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)  # 10 … 10^18


def _ints(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 values in decimal, four digits (one uint32 of a table) at a time; leading zeros masked off."""
    a = np.asarray(a, dtype=np.int64)
    if not len(a):
        return _empty(0)
    if a.min() == np.iinfo(np.int64).min:  # its absolute value is no int64
        return _split(repr(a.tolist())[1:-1], len(a), ", ")
    neg = a < 0
    u = np.abs(a)
    digits = np.searchsorted(_POWERS, u, side="right") + 1
    width = digits + neg  # a minus sign takes a leading zero's place
    groups = (int(width.max()) + 3) // 4
    m = np.empty((len(a), groups), "<u4")
    for g in range(groups - 1, -1, -1):
        q, r = _by_10000(u)
        m[:, g] = _DIGITS[r]
        u = q
    m = m.view(np.uint8)  # (n, 4·groups) bytes, in order
    w = 4 * groups
    if neg.any():
        rows = np.flatnonzero(neg)
        m[rows, w - width[rows]] = ord("-")
    return m, np.arange(w) >= (w - width)[:, None]


def _empty(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, 0), np.uint8), np.zeros((n, 0), bool)


def _strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    return _split("\x1f".join(values), len(values), "\x1f") if len(values) else _empty(0)


def _scatter(n: int, parts: list[tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]]) -> tuple[np.ndarray, np.ndarray]:
    w = max((m.shape[1] for _, (m, _) in parts), default=0)
    out, keep = np.zeros((n, w), np.uint8), np.zeros((n, w), bool)
    for rows, (m, k) in parts:
        out[rows, : m.shape[1]] = m
        keep[rows, : k.shape[1]] = k
    return out, keep


_TRUTH = {"csv": (b"False", b"True"), "jsonl": (b"false", b"true")}


def _exact(a: Exact) -> tuple[np.ndarray, np.ndarray]:
    """Exact integers ``±(hi·10^16 + lo)`` in decimal as :func:`_ints` writes them: ``lo`` in the last four
    groups of four digits, ``hi`` in the groups before."""
    hi, lo, neg = a.hi, a.lo, a.neg
    big = hi > 0
    if not big.any():
        return _ints(np.where(neg, -lo, lo))
    digits = np.where(
        big, np.searchsorted(_POWERS, hi, side="right") + 17, np.searchsorted(_POWERS, lo, side="right") + 1
    )
    width = digits + neg
    groups = max((int(width.max()) + 3) // 4, 5)
    m = np.empty((len(lo), groups), "<u4")
    u = lo
    for g in range(groups - 1, -1, -1):
        if g == groups - 5:
            u = hi  # lo's 16 digits written: hi's next
        u, r = _by_10000(u)
        m[:, g] = _DIGITS[r]
    m = m.view(np.uint8)
    w = 4 * groups
    if neg.any():
        rows = np.flatnonzero(neg)
        m[rows, w - width[rows]] = ord("-")
    return m, np.arange(w) >= (w - width)[:, None]


def field(a: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """One column as a byte matrix and the mask of its kept bytes (see the module notes)."""
    n = len(a)
    if isinstance(a, Exact):
        return _exact(a)
    if a.dtype == bool:
        no, yes = _TRUTH[fmt]
        table = np.zeros((2, max(len(no), len(yes))), np.uint8)
        table[0, : len(no)] = np.frombuffer(no, np.uint8)
        table[1, : len(yes)] = np.frombuffer(yes, np.uint8)
        i = a.astype(np.intp)
        return table[i], np.arange(table.shape[1]) < np.array([len(no), len(yes)])[i][:, None]
    if np.issubdtype(a.dtype, np.integer):
        return _ints(a)
    if np.issubdtype(a.dtype, np.floating):
        finite = np.isfinite(a)
        whole = finite & (np.floor(a) == a) & (np.abs(a) < 2.0**53)
        if whole.all():
            return _ints(a.astype(np.int64))
        rest = finite & ~whole
        parts = [
            (whole, _ints(a[whole].astype(np.int64))),
            (rest, _split(repr(a[rest].tolist())[1:-1], int(rest.sum()), ", ") if rest.any() else _empty(0)),
        ]
        null = "" if fmt == "csv" else "null"
        if not finite.all():
            parts.append((~finite, _strings([null] * int((~finite).sum()))))
        return _scatter(n, parts)
    quote = fmt != "csv"  # exact values: Python ints, Fractions (a string in JSON), None
    return _strings(
        [
            str(v)
            if isinstance(v, int)
            else ("" if fmt == "csv" else "null")
            if v is None
            else (json.dumps(str(v)) if quote else str(v))
            for v in a.tolist()
        ]
    )


def text(columns: Mapping[str, np.ndarray], shown: Sequence[str], fmt: str) -> bytes:
    """The rows of ``columns`` as CSV (no header) or JSON lines."""
    n = len(columns[shown[0]]) if shown else 0
    if n == 0:
        return b""
    pieces: list[tuple[np.ndarray, np.ndarray]] = []

    def const(s: str) -> None:
        b = np.frombuffer(s.encode("utf-8"), np.uint8)
        pieces.append((np.broadcast_to(b, (n, len(b))), np.broadcast_to(True, (n, len(b)))))

    for j, k in enumerate(shown):
        if fmt == "csv":
            if j:
                const(",")
        else:
            const(("{" if j == 0 else ",") + json.dumps(k) + ":")
        pieces.append(field(columns[k], fmt))
    const("\n" if fmt == "csv" else "}\n")
    m = np.concatenate([p[0] for p in pieces], axis=1)
    keep = np.concatenate([p[1] for p in pieces], axis=1)
    return m[keep].tobytes()


def header(shown: Sequence[str]) -> bytes:
    """The CSV header line."""
    return (",".join(shown) + "\n").encode("utf-8")


# -- binary formats -------------------------------------------------------------------------------------


def npy_dtype(columns: Mapping[str, np.ndarray], shown: Sequence[str]) -> np.dtype:
    """One record per config: int64 grid values and exact numbers, float64 metrics, a bool ``valid``."""
    return np.dtype([(k, _kind(columns[k])) for k in shown])


def _kind(a: np.ndarray) -> str:
    return "?" if a.dtype == bool else "<f8" if np.issubdtype(a.dtype, np.floating) else "<i8"


def record(columns: Mapping[str, np.ndarray], shown: Sequence[str], dtype: np.dtype, fmt: str) -> np.ndarray:
    """The chunk as records of ``dtype``; an exact value beyond int64 or a fraction is refused."""
    out = np.empty(len(columns["valid"]), dtype=dtype)
    for k in shown:
        a = columns[k]
        if a.dtype == object:
            bad = [v for v in a.tolist() if not isinstance(v, int) or not -(2**63) <= v < 2**63]
            if bad:
                what = "a fraction" if isinstance(bad[0], Fraction) else "beyond int64"
                raise CostModelError(
                    f"--format {fmt}: {k} = {bad[0]} is {what}; expected 64-bit integers "
                    "(use --format csv or jsonl for exact numbers of any size)"
                )
            a = np.asarray(a.tolist(), dtype=np.int64)
        out[k] = a
    return out


def npy_header(dtype: np.dtype, n: int) -> bytes:
    """The ``.npy`` header of ``n`` records of ``dtype`` (the records follow it, chunk by chunk)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)}
    )
    return buf.getvalue()


def parquet_writer(path: str, dtype: np.dtype):
    """A ``pyarrow.parquet.ParquetWriter`` for records of ``dtype`` (pyarrow: the ``parquet`` extra)."""
    try:
        import pyarrow as pa  # an optional package: pip install 'costmodel[parquet]'
        import pyarrow.parquet as pq  # (the same)
    except ModuleNotFoundError:
        raise CostModelError("--format parquet needs pyarrow: pip install 'costmodel[parquet]'") from None
    schema = pa.schema([(k, pa.from_numpy_dtype(dtype[k])) for k in dtype.names])
    return pq.ParquetWriter(path, schema), pa


def parquet_table(pa, records: np.ndarray):
    return pa.table({k: records[k] for k in records.dtype.names})
