"""Exact arithmetic on int64 arrays with checked overflow: the fast exact mode of sweeps.

Generated formulas (:mod:`costmodel.formulas.python`) run on any numbers that support ``+ - * ** %`` and
comparisons, with the helpers of a mode for the rest. :func:`checked_mode` gives them :class:`Q`: rationals
``n/d`` held as two int64 arrays (``d > 0``, reduced), where every product and sum is first bounded in float64
and :class:`Int64OverflowError` is raised when a result could leave ±2^62 (float64's relative error is 2^-53, so a bound
under 2^62 proves the exact value under 2^63). Nothing ever wraps: a caller that catches :class:`Int64OverflowError`
evaluates the same chunk again with Python ints (:func:`costmodel.formulas.compiled.object_mode`), so a result is
always the exact value ``estimate`` computes, at numpy speed while the numbers fit.

>>> import numpy as np
>>> from costmodel.formulas.python import compile_exprs
>>> from costmodel.symbols import d, h
>>> import sympy
>>> f = compile_exprs([sympy.Eq(sympy.Mod(d / h, 1), 0), 8 * d / 3], (d, h))
>>> whole, d_ff = f(checked_mode(), Q(np.array([768, 770])), Q(np.array([12, 12])))
>>> whole.tolist(), exact_values(d_ff)
([True, False], [2048, Fraction(6160, 3)])
>>> f(checked_mode(), Q(np.array([2**61])), Q(np.array([1])))
Traceback (most recent call last):
...
costmodel.formulas.checked.Int64OverflowError: a value could leave int64
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

_LIMIT = 2.0**62


class Int64OverflowError(ArithmeticError):
    """A result could leave int64: evaluate the chunk with Python ints instead."""


def _bound(x: np.ndarray) -> None:
    if np.size(x) and float(np.max(x)) >= _LIMIT:
        raise Int64OverflowError("a value could leave int64")


def _magnitude(a) -> float:
    a = np.asarray(a)
    return float(max(a.max(), -a.min())) if a.size else 0.0  # two reductions, no temporary array


def _mul(a, b):
    if _magnitude(a) * _magnitude(b) >= _LIMIT:  # the products' bound; else element by element
        _bound(np.abs(np.asarray(a, dtype=np.float64)) * np.abs(np.asarray(b, dtype=np.float64)))
    return np.multiply(a, b, dtype=np.int64)


def _add(a, b):
    if _magnitude(a) + _magnitude(b) >= _LIMIT:
        _bound(np.abs(np.asarray(a, dtype=np.float64)) + np.abs(np.asarray(b, dtype=np.float64)))
    return np.add(a, b, dtype=np.int64)


def lift(x) -> Q:
    """A number as a :class:`Q`: Python ints and Fractions beyond int64 raise :class:`Int64OverflowError`."""
    if isinstance(x, Q):
        return x
    if isinstance(x, (bool, np.bool_)) or x is None:
        raise Int64OverflowError("a truth value or no value in arithmetic")  # the Python-int mode decides these
    if isinstance(x, Fraction):
        return Q(lift(x.numerator).n, lift(x.denominator).n)
    if isinstance(x, int):
        if abs(x) >= 2**62:
            raise Int64OverflowError("a value could leave int64")
        return Q(np.int64(x))
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.integer):
        raise Int64OverflowError("not whole numbers")
    return Q(a.astype(np.int64))


class Q:
    """Exact rationals ``n / d`` over int64 arrays (``d`` is None for whole numbers)."""

    __slots__ = ("d", "n")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, n, d=None) -> None:
        if d is not None:  # not reduced (comparisons cross-multiply; exact_values reduces), only signed
            d = np.asarray(d, dtype=np.int64)
            n = np.asarray(n, dtype=np.int64)
            if np.any(d <= 0):
                if np.any(d == 0):
                    raise Int64OverflowError("a division by zero")  # the Python-int mode raises it, element by element
                n, d = np.where(d < 0, -n, n), np.abs(d)
            if not np.any(d != 1):
                d = None
        self.n, self.d = n, d

    def _den(self):
        return 1 if self.d is None else self.d

    def __add__(self, other):
        o = lift(other)
        if self.d is None and o.d is None:
            return Q(_add(self.n, o.n))
        return Q(_add(_mul(self.n, o._den()), _mul(o.n, self._den())), _mul(self._den(), o._den()))

    __radd__ = __add__

    def __neg__(self):
        return Q(-np.asarray(self.n, dtype=np.int64), self.d)

    def __sub__(self, other):
        return self + (-lift(other))

    def __rsub__(self, other):
        return lift(other) + (-self)

    def __mul__(self, other):
        o = lift(other)
        if self.d is None and o.d is None:
            return Q(_mul(self.n, o.n))
        return Q(_mul(self.n, o.n), _mul(self._den(), o._den()))

    __rmul__ = __mul__

    def __truediv__(self, other):
        o = lift(other)
        return Q(_mul(self.n, o._den()), _mul(self._den(), o.n))

    def __rtruediv__(self, other):
        return lift(other) / self

    def __pow__(self, e):
        if not isinstance(e, int) or isinstance(e, bool) or e < 0:
            raise Int64OverflowError("a power that is not a whole number")
        out = Q(np.int64(1))
        for _ in range(e):
            out = out * self
        return out

    def floor(self) -> Q:
        return self if self.d is None else Q(np.floor_divide(self.n, self.d))

    def ceil(self) -> Q:
        return self if self.d is None else Q(-np.floor_divide(-self.n, self.d))

    def __mod__(self, other):  # Python's %: the sign of the divisor
        o = lift(other)
        if np.any(np.asarray(o.n) == 0):
            _raise()
        if o.d is None:  # (n/d) mod m = (n mod m·d) / d
            return Q(np.mod(self.n, _mul(o.n, self._den())), self.d)
        return self - o * (self / o).floor()

    def __rmod__(self, other):
        return lift(other) % self

    def _cmp(self, other):
        o = lift(other)
        return _mul(self.n, o._den()), _mul(o.n, self._den())

    def __eq__(self, other):  # type: ignore[override]
        a, b = self._cmp(other)
        return a == b

    def __ne__(self, other):  # type: ignore[override]
        a, b = self._cmp(other)
        return a != b

    def __lt__(self, other):
        a, b = self._cmp(other)
        return a < b

    def __le__(self, other):
        a, b = self._cmp(other)
        return a <= b

    def __gt__(self, other):
        a, b = self._cmp(other)
        return a > b

    def __ge__(self, other):
        a, b = self._cmp(other)
        return a >= b

    def __bool__(self):
        raise Int64OverflowError(
            "a truth value of arrays"
        )  # a formula branching in Python: the Python-int mode decides


def _raise():
    raise Int64OverflowError("a division by zero")


def _where(cond, a, b):
    if isinstance(cond, (bool, np.bool_)):
        return a if cond else b
    a, b = lift(a), lift(b)
    n = np.where(cond, a.n, b.n)
    return Q(n) if a.d is None and b.d is None else Q(n, np.where(cond, a._den(), b._den()))


def _max(*args):
    out = lift(args[0])
    for x in args[1:]:
        out = _where(out >= x, out, lift(x))
    return out


def _min(*args):
    out = lift(args[0])
    for x in args[1:]:
        out = _where(out <= x, out, lift(x))
    return out


def _and(*conds):
    return np.logical_and.reduce(np.broadcast_arrays(*conds)) if conds else True


_MODE = (
    lambda p, q: Q(lift(p).n, lift(q).n),
    lambda a, b: lift(a) / b,
    _max,
    _min,
    lambda x: lift(x).ceil(),
    lambda x: lift(x).floor(),
    _where,
    _and,
)


def checked_mode() -> tuple:
    """The helpers of :mod:`costmodel.formulas.python`'s generated functions for :class:`Q` values."""
    return _MODE


def exact_values(x: object) -> list:
    """A :class:`Q` (or a truth value, or a plain number) as Python ints and Fractions, element by element."""
    if isinstance(x, Q):
        if x.d is None:
            return np.asarray(x.n).ravel().tolist()
        n, d = np.broadcast_arrays(np.ravel(x.n), np.ravel(x.d))
        g = np.gcd(n, d)
        return [n if d == 1 else Fraction(n, d) for n, d in zip((n // g).tolist(), (d // g).tolist())]
    return np.asarray(x).ravel().tolist()
