"""Sweep chunks written as CSV, JSON lines, ``.npy`` or Parquet, without a Python loop over rows.

Text is built a block of rows at a time (:data:`BLOCK`: the block's bytes stay in a core's cache): each column
is a body (:class:`_Body`) that writes its fixed-width bytes and a mask of the kept ones into its slice of the
block's byte matrix (integers four digits at a time from a table, right-aligned, the leading zeros masked off;
truth values from a table; other floats as ``repr`` of a list split at its separators); the constant separators
sit between them, and the kept bytes are read off row by row. Numbers are written as
:meth:`costmodel.render.results.Sweep.column` shows them: floats that are whole numbers under 2^53 as
integers, other floats as Python writes them (shortest round trip), non-finite floats as an empty CSV field or
``null`` (strict JSON), exact fractions as ``p/q`` (a string in JSON). Exact integers beyond int64
(:class:`~costmodel.formulas.wide.Exact`, which a sweep's text gets for a metric past 2^53 whose formula is
integer arithmetic) are written in full, as ``hi`` and ``lo`` of ``hi·10^16 + lo``.

>>> import numpy as np
>>> cols = {"d": np.array([64, 128]), "m": np.array([1.5e20, np.inf]), "valid": np.array([True, False])}
>>> text(cols, ["d", "m", "valid"], "csv").tobytes().decode()
'64,1.5e+20,True\\n128,,False\\n'
>>> text(cols, ["d", "m", "valid"], "jsonl").tobytes().decode()
'{"d":64,"m":1.5e+20,"valid":true}\\n{"d":128,"m":null,"valid":false}\\n'
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from ...errors import CostModelError
from ...formulas.wide import Exact

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


_TEN_THOUSAND = np.uint64(10000)
_DIGITS = np.array([list(f"{i:04d}".encode()) for i in range(10000)], np.uint8).view("<u4").ravel()  # "0000"…
_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)  # 10 … 10^18
BLOCK = 8192  # rows laid out at a time: a block's bytes and mask stay in a core's cache while its fields are written


class _Body:
    """One field of every row of a chunk: ``width`` bytes per row, written for rows ``a:b`` by :meth:`into` into
    a column slice of the block's byte matrix and of its mask of kept bytes."""

    width: int

    def into(self, m: np.ndarray, keep: np.ndarray, a: int, b: int) -> None:
        raise NotImplementedError

    def kept(self, n: int) -> int:
        """The bytes kept over all ``n`` rows."""
        raise NotImplementedError


class _Const(_Body):
    """The same bytes in every row (a separator, a JSON key)."""

    def __init__(self, s: str) -> None:
        self.b = np.frombuffer(s.encode("utf-8"), np.uint8)
        self.width = len(self.b)

    def into(self, m, keep, a, b):
        m[...], keep[...] = self.b, True

    def kept(self, n):
        return n * self.width


class _Matrix(_Body):
    """A field already laid out as a byte matrix and its mask (``repr`` split at its separators, strings)."""

    def __init__(self, m: np.ndarray, keep: np.ndarray) -> None:
        self.m, self.keep, self.width = m, keep, m.shape[1]

    def into(self, m, keep, a, b):
        m[...], keep[...] = self.m[a:b], self.keep[a:b]

    def kept(self, n):
        return int(np.count_nonzero(self.keep))


def _rows(table: np.ndarray) -> np.ndarray:
    """A 2-d table as one value per row (a void of its width), for ``np.take`` of whole rows."""
    return np.ascontiguousarray(table).view(f"V{table.shape[1]}").ravel() if table.shape[1] else table


def _take(table: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    """Rows ``table[index]`` written into the matrix ``out`` (same width) without a temporary."""
    if out.shape[1]:
        np.take(_rows(table), index, out=out.view(f"V{out.shape[1]}")[:, 0], mode="clip")


def _suffixes(w: int) -> np.ndarray:
    """Row ``k``: the mask of ``w`` bytes whose last ``k`` are kept."""
    return (np.arange(w) >= w - np.arange(w + 1)[:, None]).astype(np.uint8)


class _Digits(_Body):
    """Integers in decimal, right-aligned in ``width`` bytes, four digits at a time (one uint32 from a table of
    "0000" … "9999"), the leading zeros masked off, a minus sign before the first digit.

    ``limbs``: the absolute values as uint64 arrays, least significant first, each but the last holding
    ``count`` groups of four digits (:class:`~costmodel.formulas.wide.Exact`: ``lo``'s 16 digits, then ``hi``);
    ``digits``: each row's number of digits."""

    def __init__(self, limbs: list[tuple[np.ndarray, int]], neg: np.ndarray, digits: np.ndarray) -> None:
        self.limbs, self.neg = limbs, neg
        self.shown = digits + neg  # bytes kept per row
        self.groups = (int(self.shown.max()) + 3) // 4
        self.width = 4 * self.groups
        self.keeps = _suffixes(self.width)

    def into(self, m, keep, a, b):
        col = self.groups
        for i, (u, count) in enumerate(self.limbs):
            u = u[a:b]
            for _ in range(count if i + 1 < len(self.limbs) else col):
                col -= 1
                q = u // _TEN_THOUSAND  # unsigned division by a typed constant: a multiply and a shift
                r = (u - q * _TEN_THOUSAND).view(np.int64)
                np.take(_DIGITS, r, out=m[:, 4 * col : 4 * col + 4].view("<u4")[:, 0], mode="clip")
                u = q
        _take(self.keeps, self.shown[a:b], keep.view(np.uint8))
        minus = np.flatnonzero(self.neg[a:b])
        if len(minus):
            at = self.width - self.shown[a:b][minus]
            m[minus, at] = ord("-")

    def kept(self, n):
        return int(self.shown.sum())


def _digits(u: np.ndarray) -> np.ndarray:
    """The number of decimal digits of non-negative int64 values."""
    return np.searchsorted(_POWERS, u, side="right") + 1


def _ints(a: np.ndarray) -> _Body:
    """int64 values in decimal (:class:`_Digits`)."""
    a = np.asarray(a, dtype=np.int64)
    if not len(a):
        return _Matrix(*_empty(0))
    if a.min() == np.iinfo(np.int64).min:  # its absolute value is no int64
        return _Matrix(*_split(repr(a.tolist())[1:-1], len(a), ", "))
    u = np.abs(a)
    return _Digits([(u.view(np.uint64), 0)], a < 0, _digits(u))


def _exact(a: Exact) -> _Body:
    """Exact integers ``±(hi·10^16 + lo)`` in decimal as :func:`_ints` writes them: ``lo`` in the last four
    groups of four digits, ``hi`` in the groups before."""
    hi, lo, neg = a.hi, a.lo, a.neg
    if not (hi > 0).any():
        return _ints(np.where(neg, -lo, lo))
    digits = np.where(hi > 0, _digits(hi) + 16, _digits(lo))
    return _Digits([(lo.view(np.uint64), 4), (hi.view(np.uint64), 0)], neg, digits)


class _Choice(_Body):
    """One of a few strings per row (truth values), by index into a table of them."""

    def __init__(self, words: Sequence[bytes], index: np.ndarray) -> None:
        self.width = max(len(w) for w in words)
        self.table = np.array([list(w.ljust(self.width, b"\0")) for w in words], np.uint8)
        self.lengths = np.array([len(w) for w in words])
        self.keeps = (np.arange(self.width) < self.lengths[:, None]).astype(np.uint8)
        self.index = index

    def into(self, m, keep, a, b):
        _take(self.table, self.index[a:b], m)
        _take(self.keeps, self.index[a:b], keep.view(np.uint8))

    def kept(self, n):
        return int(np.bincount(self.index, minlength=len(self.lengths)) @ self.lengths)


def _empty(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, 0), np.uint8), np.zeros((n, 0), bool)


def _strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    return _split("\x1f".join(values), len(values), "\x1f") if len(values) else _empty(0)


def _laid_out(body: _Body, n: int) -> tuple[np.ndarray, np.ndarray]:
    m, keep = np.empty((n, body.width), np.uint8), np.empty((n, body.width), bool)
    body.into(m, keep, 0, n)
    return m, keep


def _scatter(n: int, parts: list[tuple[np.ndarray, _Body]]) -> _Matrix:
    """Rows of a column written by different bodies (whole floats, other floats, non-finite ones)."""
    w = max((b.width for _, b in parts), default=0)
    out, keep = np.zeros((n, w), np.uint8), np.zeros((n, w), bool)
    for rows, b in parts:
        m, k = _laid_out(b, int(rows.sum()))
        out[rows, : b.width] = m
        keep[rows, : b.width] = k
    return _Matrix(out, keep)


_TRUTH = {"csv": (b"False", b"True"), "jsonl": (b"false", b"true")}


def field(a: np.ndarray, fmt: str) -> _Body:
    """One column as a :class:`_Body` (see the module notes)."""
    n = len(a)
    if isinstance(a, Exact):
        return _exact(a)
    if a.dtype == bool:
        return _Choice(_TRUTH[fmt], a.view(np.uint8))
    if np.issubdtype(a.dtype, np.integer):
        return _ints(a)
    if np.issubdtype(a.dtype, np.floating):
        finite = np.isfinite(a)
        whole = finite & (np.floor(a) == a) & (np.abs(a) < 2.0**53)
        if whole.all():
            return _ints(a.astype(np.int64))
        rest = finite & ~whole
        floats = _split(repr(a[rest].tolist())[1:-1], int(rest.sum()), ", ") if rest.any() else _empty(0)
        parts = [(whole, _ints(a[whole].astype(np.int64))), (rest, _Matrix(*floats))]
        if not finite.all():
            parts.append((~finite, _Matrix(*_strings(["" if fmt == "csv" else "null"] * int((~finite).sum())))))
        return _scatter(n, parts)
    quote = fmt != "csv"  # exact values: Python ints, Fractions (a string in JSON), None
    cells = [
        str(v)
        if isinstance(v, int)
        else ("" if fmt == "csv" else "null")
        if v is None
        else (json.dumps(str(v)) if quote else str(v))
        for v in a.tolist()
    ]
    return _Matrix(*_strings(cells))


_SCRATCH = threading.local()  # one block's byte matrix and mask per thread, reused chunk after chunk


def _scratch(width: int) -> tuple[np.ndarray, np.ndarray]:
    m, keep = getattr(_SCRATCH, "buffers", (None, None))
    if m is None or m.shape != (BLOCK, width):
        m, keep = np.empty((BLOCK, width), np.uint8), np.empty((BLOCK, width), bool)
        _SCRATCH.buffers = (m, keep)
    return m, keep


def text(columns: Mapping[str, np.ndarray], shown: Sequence[str], fmt: str) -> np.ndarray:
    """The rows of ``columns`` as CSV (no header) or JSON lines: their bytes as a uint8 array, which a file's
    ``write`` takes as it is (no copy into a ``bytes``: numpy's large allocations are cheaper to fault in).

    Each field becomes a :class:`_Body`; a block of rows at a time, the bodies write side by side into one byte
    matrix and its mask, and the kept bytes are read off row by row."""
    n = len(columns[shown[0]]) if shown else 0
    if n == 0:
        return np.empty(0, np.uint8)
    bodies: list[_Body] = []
    for j, k in enumerate(shown):
        if fmt == "csv":
            if j:
                bodies.append(_Const(","))
        else:
            bodies.append(_Const(("{" if j == 0 else ",") + json.dumps(k) + ":"))
        bodies.append(field(columns[k], fmt))
    bodies.append(_Const("\n" if fmt == "csv" else "}\n"))
    m, keep = _scratch(sum(b.width for b in bodies))
    buf, pos = np.empty(sum(body.kept(n) for body in bodies), np.uint8), 0
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        at = 0
        for body in bodies:
            body.into(m[: b - a, at : at + body.width], keep[: b - a, at : at + body.width], a, b)
            at += body.width
        block = m[: b - a][keep[: b - a]]
        buf[pos : pos + len(block)] = block
        pos += len(block)
    assert pos == len(buf), "kept bytes miscounted"
    return buf


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
    """The records as a pyarrow table (``pa``: the pyarrow module, imported by the caller)."""
    return pa.table({k: records[k] for k in records.dtype.names})
