"""Quantities: the numbers of a report as named expressions of a graph's symbols, derived once.

Every numeric key of an estimate (``flops.training``, ``memory_bytes.peak``, ``time.step_s``...) is an
expression; ``estimate`` substitutes numbers into it, ``sweep`` compiles it, ``derive`` prints it. One
derivation per number, so the doors cannot disagree.

Keys are shown as exact whole numbers unless listed in ``floats`` (seconds, rates, shares: a float) or
``numbers`` (an int when whole, else a float). A *choice* is a key whose value is the label of the largest
of several expressions (where the peak is, which pipeline stage is fuller); of equal ones the first wins,
or for keys in ``label_ties`` the alphabetically last label. ``info`` holds keys that are not numbers of
the model (strings, flags, the layout); a callable there is called with the evaluated keys and the values
(a text that names a chosen stage). ``checks`` are relations that must hold for a config (the global
batch divides into micro-batches) with the message (or a callable of the values) to give when one fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from ..errors import CostModelError
from .codegen import EXACT, compile_exprs


class maximum(sympy.Function):
    """The largest of its arguments, evaluated only when they are all numbers.

    sympy's ``Max`` compares symbolic arguments pairwise to drop dominated ones: quadratic, and slow for
    the hundred polynomials of a liveness peak. This one stays as written until numbers come in.
    """

    @classmethod
    def eval(cls, *args):
        if len(args) == 1:
            return args[0]
        if all(a.is_number for a in args):
            return max(args)
        return None

    def _latex(self, printer):
        return r"\max\left(" + ", ".join(printer._print(a) for a in self.args) + r"\right)"


class roundup(sympy.Function):
    """⌈x⌉, evaluated only for a number (a ZeRO shard or a per-iteration share rounded up to whole bytes)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_number:
            return sympy.ceiling(x)
        return None

    def _latex(self, printer):
        return r"\left\lceil " + printer._print(self.args[0]) + r" \right\rceil"


class choose(sympy.Function):
    """``choose(x, y, a, b)``: ``a`` where x ≥ y, else ``b`` (the fuller pipeline stage's numbers)."""

    nargs = 4

    @classmethod
    def eval(cls, x, y, a, b):
        if x.is_number and y.is_number:
            return a if x >= y else b
        return None


def whole(expr: sympy.Expr, *, force: bool = False) -> sympy.Expr:
    """Whole bytes: ``expr`` rounded up where a numeric fraction makes it fractional (a ZeRO shard of an odd
    count, 8-bit Adam's 513/512 bytes per parameter).

    A ratio of symbols (``d·n_kv/h``) is left as it is: it is a product of axis sizes, whole for every
    config ``check_values`` accepts. ``force``: round up whatever the expression (a per-iteration share
    ``(L − 1)/L`` of a tensor).
    """
    expr = sympy.expand(expr)
    if force:
        return expr if expr.is_Integer else roundup(expr)
    if any(not coeff.is_Integer for coeff in expr.as_coefficients_dict().values()):
        return roundup(expr)
    return expr


def _largest(values: list, labels: tuple[str, ...], by_label: bool) -> int:
    """The index of the largest value: of equal ones the first, or (``by_label``) the last label alphabetically."""
    if by_label:
        return max(range(len(values)), key=lambda j: (values[j], labels[j]))
    return max(range(len(values)), key=lambda j: (values[j], -j))


@dataclass
class Quantities:
    """Named expressions and how each is shown (see the module notes)."""

    exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    floats: set[str] = field(default_factory=set)
    numbers: set[str] = field(default_factory=set)
    choices: dict[str, tuple[tuple[sympy.Expr, ...], tuple[str, ...]]] = field(default_factory=dict)
    label_ties: set[str] = field(default_factory=set)
    info: dict[str, object] = field(default_factory=dict)
    checks: list[tuple[sympy.Basic, object]] = field(default_factory=list)

    def add(self, key: str, expr: object, show: str = "int") -> None:
        """Add ``key``: ``show`` is ``"int"`` (exact whole number), ``"float"`` or ``"number"``."""
        self.exprs[key] = sympy.sympify(expr) if not isinstance(expr, sympy.Basic) else expr
        self.floats.discard(key)
        self.numbers.discard(key)
        if show == "float":
            self.floats.add(key)
        elif show == "number":
            self.numbers.add(key)
        elif show != "int":
            raise ValueError(f"show must be int, float or number, not {show!r}")
        self.info.pop(key, None)

    def update(self, other: Quantities) -> None:
        """Add every key of ``other`` (its keys win)."""
        for key in other.exprs:
            self.info.pop(key, None)
        for key in other.info:
            self.exprs.pop(key, None)
        self.exprs.update(other.exprs)
        self.floats = (self.floats - set(other.exprs)) | other.floats
        self.numbers = (self.numbers - set(other.exprs)) | other.numbers
        self.choices.update(other.choices)
        self.label_ties |= other.label_ties
        self.info.update(other.info)
        self.checks += other.checks

    # -- numbers ---------------------------------------------------------------------------------------

    def compiled(self):
        """Every expression, candidate and check as one plain-Python function of the symbols (exact mode:
        Python ints and fractions), compiled once (:mod:`costmodel.graph.codegen`). Returns
        ``(symbols, function)``; the function returns the values in the order of :meth:`_layout`."""
        if getattr(self, "_compiled", None) is None:
            exprs = self._layout()
            symbols = tuple(sorted(set().union(*(e.free_symbols for e in exprs)), key=str))
            object.__setattr__(self, "_compiled", (symbols, compile_exprs(exprs, symbols)))
        return self._compiled

    def _layout(self) -> list[sympy.Basic]:
        out = list(self.exprs.values())
        for cands, _ in self.choices.values():
            out += cands
        out += [relation for relation, _ in self.checks]
        return out

    def _numbers(self, values: Mapping) -> list[object]:
        symbols, fn = self.compiled()
        missing = sorted(str(s) for s in symbols if s not in values)
        if missing:
            raise CostModelError(f"cannot evaluate: no value for {', '.join(missing)}; expected values for every "
                                 f"symbol, received {sorted(map(str, values))}")
        for s in symbols:
            v = values[s]
            if isinstance(v, bool) or not isinstance(v, int) and not getattr(v, "is_Integer", False):
                raise CostModelError(f"cannot evaluate: {s} = {v!r}; expected a whole number")
        try:
            return fn(EXACT, *(int(values[s]) for s in symbols))
        except ZeroDivisionError:
            raise CostModelError("cannot evaluate: a division by zero at these values") from None

    def check(self, values: Mapping) -> None:
        """Raise the message of the first check that fails at ``values``."""
        nums = self._numbers(values)
        self._check(nums, values)

    def _check(self, nums: list, values: Mapping) -> None:
        first = len(nums) - len(self.checks)
        for (_, message), holds in zip(self.checks, nums[first:]):
            if not holds:
                raise CostModelError(message(values) if callable(message) else message)

    def value(self, key: str, values: Mapping, flat: Mapping[str, object] | None = None) -> object:
        """The number (or label) of one key at ``values`` (``flat``: keys already evaluated, for texts)."""
        return self.evaluate(values, keys=(key,))[key] if flat is None else self._value(key, values, flat)

    def _value(self, key, values, flat):
        v = self.info[key]
        return v(flat, values) if callable(v) else v

    def evaluate(self, values: Mapping, keys: tuple[str, ...] | None = None) -> dict[str, object]:
        """Every key (or ``keys``) at ``values``, after the checks: exprs, then choices, then info."""
        nums = self._numbers(values)
        self._check(nums, values)
        out: dict[str, object] = {}
        i = 0
        for key in self.exprs:
            v = nums[i]
            i += 1
            if isinstance(v, Fraction) and v.denominator == 1:
                v = v.numerator
            if key in self.floats:
                out[key] = float(v)
            elif key in self.numbers:
                out[key] = v if isinstance(v, int) else float(v)
            elif isinstance(v, int):
                out[key] = v
            else:
                raise CostModelError(f"{key} is not a whole number: {v}")
        for key, (cands, labels) in self.choices.items():
            n = len(cands)
            got = nums[i:i + n]
            i += n
            out[key] = labels[_largest(got, labels, key in self.label_ties)]
        for key in self.info:
            out[key] = self._value(key, values, out)
        if keys is not None:
            return {k: out[k] for k in keys}
        return out
