"""Exact integers beyond int64 at numpy speed: generated formulas evaluated over signed int64 limbs in base
10^9, for the text of sweeps whose metrics pass 2^53 (float64) or 2^63 (int64).

A :class:`W` is ``sum(limb[i] * 10^(9 i))``: each limb an int64 array (or a Python int) with a bound on its
magnitude (a float, kept with a margin: float64's relative error is 2^-53). Sums and products work limb by
limb and leave the limbs unnormalised while the bounds stay under 2^62, so a formula whose intermediate
values fit int64 costs what int64 costs; a limb that could pass 2^62 is first carried into the next one, and
a product of normalised limbs is a short convolution. Only integer arithmetic is exact here (``+ - *`` and
whole powers): a division, a comparison or any helper of the mode gives :data:`INEXACT`, which every later
operation propagates, and the caller keeps its own path for that metric.

:func:`digits` turns a result into (``hi``, ``lo``, ``neg``) int64 arrays with ``|value| = hi·10^16 + lo``,
which :mod:`.writers` prints without a Python loop.

>>> import numpy as np
>>> x = W.of(np.array([2**55, -(2**55), 7]))
>>> hi, lo, neg = digits(3 - x * x, 3)
>>> [(-1 if s else 1) * (h * 10**16 + l) for h, l, s in zip(hi.tolist(), lo.tolist(), neg.tolist())]
[-1298074214633706907132624082305021, -1298074214633706907132624082305021, -46]
>>> W.of(np.array([1])) / 2 is INEXACT
True
"""

from __future__ import annotations

import numpy as np

BASE = 10**9
_TOP = 92_233_720 - 1  # a fourth limb under this keeps hi = |value| // 10^16 in int64
_LIMIT = 2.0**62
_SLACK = 1 + 2.0**-40  # a bound computed in float64 is raised by this much: it stays a bound


class _Inexact:
    """Not integer arithmetic: every operation gives itself."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]
    __array_ufunc__ = None  # (as W's)

    def _self(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _self
    __pow__ = __mod__ = __rmod__ = __neg__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _self  # type: ignore[assignment]

    def __bool__(self):
        raise TypeError("an inexact value has no truth")

    def __repr__(self) -> str:
        return "INEXACT"


INEXACT = _Inexact()


def _abs_max(a) -> float:
    if isinstance(a, int):
        return float(abs(a)) * _SLACK
    return float(max(a.max(), -a.min())) * _SLACK if a.size else 0.0


class W:
    """An exact integer array as signed int64 limbs in base 10^9 (see the module notes)."""

    __slots__ = ("bounds", "limbs")
    __hash__ = None  # type: ignore[assignment]
    __array_ufunc__ = None  # numpy defers to these operators: an array never turns a W into an object array

    def __init__(self, limbs: list, bounds: list[float]) -> None:
        self.limbs, self.bounds = limbs, bounds

    @staticmethod
    def of(x) -> W | _Inexact:
        """A Python int, an int64 array or a :class:`W` as a :class:`W`; anything else is :data:`INEXACT`."""
        if isinstance(x, (W, _Inexact)):
            return x
        if isinstance(x, (bool, np.bool_)) or x is None:
            return INEXACT
        if isinstance(x, int):
            limbs = []
            while True:  # base-10^9 digits of |x|, the sign on each
                q, r = divmod(abs(x), BASE)
                limbs.append(r if x >= 0 else -r)
                if not q:
                    break
                x = q if x >= 0 else -q
            return W(limbs, [_abs_max(v) for v in limbs])
        a = np.asarray(x)
        if not np.issubdtype(a.dtype, np.integer):
            return INEXACT
        a = a.astype(np.int64)
        if a.size and a.min() == np.iinfo(np.int64).min:
            return INEXACT  # its magnitude is no int64
        return W([a], [_abs_max(a)])

    def _carried(self) -> W:
        """The same value with every limb but the last in [0, 10^9), the last one signed and under 10^9 (the
        carries moved up, limbs added as needed): the sign of the value is the last limb's."""
        limbs, bounds = list(self.limbs), list(self.bounds)
        i = 0
        while i < len(limbs) - 1 or bounds[i] >= BASE:
            carry = limbs[i] // BASE  # floor: the limb left is in [0, 10^9)
            limbs[i] = limbs[i] - carry * BASE
            if i + 1 == len(limbs):
                limbs.append(0)
                bounds.append(0.0)
            limbs[i + 1] = limbs[i + 1] + carry
            bounds[i + 1] = (bounds[i + 1] + bounds[i] / BASE + 1) * _SLACK
            bounds[i] = float(BASE)
            i += 1
        return W(limbs, bounds)

    def __add__(self, other):
        o = W.of(other)
        if o is INEXACT:
            return INEXACT
        a, b = self, o
        n = max(len(a.limbs), len(b.limbs))
        if any(i < len(a.bounds) and i < len(b.bounds) and a.bounds[i] + b.bounds[i] >= _LIMIT for i in range(n)):
            a, b = a._carried(), b._carried()
            n = max(len(a.limbs), len(b.limbs))
        limbs, bounds = [], []
        for i in range(n):
            x = a.limbs[i] if i < len(a.limbs) else 0
            y = b.limbs[i] if i < len(b.limbs) else 0
            limbs.append(x + y)
            bounds.append(
                ((a.bounds[i] if i < len(a.bounds) else 0.0) + (b.bounds[i] if i < len(b.bounds) else 0.0)) * _SLACK
            )
        return W(limbs, bounds)

    __radd__ = __add__

    def __neg__(self):
        return W([-x for x in self.limbs], list(self.bounds))

    def __sub__(self, other):
        o = W.of(other)
        return INEXACT if o is INEXACT else self + (-o)

    def __rsub__(self, other):
        o = W.of(other)
        return INEXACT if o is INEXACT else o + (-self)

    def _conv_bounds(self, o: W) -> list[float]:
        out = [0.0] * (len(self.limbs) + len(o.limbs) - 1)
        for i, x in enumerate(self.bounds):
            for j, y in enumerate(o.bounds):
                out[i + j] += x * y
        return [b * _SLACK for b in out]

    def __mul__(self, other):
        o = W.of(other)
        if o is INEXACT:
            return INEXACT
        a, b = self, o
        if max(a._conv_bounds(b)) >= _LIMIT:
            a, b = a._carried(), b._carried()
            if max(a._conv_bounds(b)) >= _LIMIT:
                return INEXACT  # more limbs than a product of 10^9-limbs can sum in int64 (about 10^72)
        bounds = a._conv_bounds(b)
        limbs = [0] * len(bounds)
        for i, x in enumerate(a.limbs):
            for j, y in enumerate(b.limbs):
                limbs[i + j] = limbs[i + j] + x * y
        return W(limbs, bounds)

    __rmul__ = __mul__

    def __pow__(self, e):
        if not isinstance(e, int) or isinstance(e, bool) or e < 0:
            return INEXACT
        out: W = W.of(1)  # type: ignore[assignment]
        for _ in range(e):
            out = out * self
        return out

    def _inexact(self, *args):
        return INEXACT

    __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _inexact
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _inexact  # type: ignore[assignment]

    def __bool__(self):
        raise TypeError("an exact array has no truth")


def _inexact(*args):
    return INEXACT


#: The helpers of generated formulas (:mod:`costmodel.formulas.python`) for :class:`W` values: only integer
#: arithmetic is exact here, every helper is not.
MODE = (_inexact,) * 8


def digits(x, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(hi, lo, neg) of ``n`` values with ``|value| = hi·10^16 + lo`` (int64, ``0 <= lo < 10^16``), or None
    where ``x`` is :data:`INEXACT` or some magnitude reaches 9·10^34."""
    if not isinstance(x, W):
        return None
    w = x._carried()
    limbs = [np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)) for v in w.limbs]
    neg = limbs[-1] < 0  # lower limbs are in [0, 10^9): the last one carries the sign
    if neg.any():  # |x| of the negative ones, normalised again
        w = W([np.where(neg, -v, v) for v in limbs], [float(BASE)] * (len(limbs) - 1) + [w.bounds[-1]])._carried()
        limbs = [np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)) for v in w.limbs]
    limbs += [np.zeros(n, np.int64)] * (4 - len(limbs))
    if any(np.any(v != 0) for v in limbs[4:]) or np.any(limbs[3] >= _TOP):
        return None  # 9·10^34 or more: the caller's Python ints
    low = limbs[0] + limbs[1] * BASE  # under 10^18
    carry, lo = np.divmod(low, 10**16)
    hi = (limbs[2] + limbs[3] * BASE) * 100 + carry  # under 2^63: limbs[3] < _TOP
    return hi, lo, neg


class Exact:
    """A column of exact integers as (hi, lo, neg) (see :func:`digits`): what :mod:`.writers` prints at numpy
    speed; ``tolist()`` and ``numpy.asarray`` give its Python ints (or their correctly rounded floats)."""

    __slots__ = ("hi", "lo", "neg")

    def __init__(self, hi: np.ndarray, lo: np.ndarray, neg: np.ndarray) -> None:
        self.hi, self.lo, self.neg = hi, lo, neg

    def __len__(self) -> int:
        return len(self.lo)

    def tolist(self) -> list[int]:
        return [
            (-1 if s else 1) * (h * 10**16 + v)
            for h, v, s in zip(self.hi.tolist(), self.lo.tolist(), self.neg.tolist())
        ]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if dtype is None or np.dtype(dtype) == object:
            out = np.empty(len(self), dtype=object)
            out[:] = self.tolist()
            return out
        return np.array(self.tolist(), dtype=dtype)  # Python ints: correctly rounded


def columns(fn, symbols, values: dict, n: int, wanted) -> dict[int, Exact]:
    """The exact values of the generated ``fn`` at ``values`` (symbol → int64 array or Python int) for the
    outputs ``wanted`` (positions) that are integer arithmetic and under 9·10^34, as :class:`Exact` columns."""
    out = fn(MODE, *(W.of(values[s]) for s in symbols))
    found = {}
    for i in wanted:
        d = digits(out[i], n)
        if d is not None:
            found[i] = Exact(*d)
    return found
