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

import sympy

from ..errors import CostModelError
from .analysis import as_int, evaluate


class maximum(sympy.Function):  # noqa: N801 (printed as a function of the formulas: maximum(a, b, ...))
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


class roundup(sympy.Function):  # noqa: N801
    """⌈x⌉, evaluated only for a number (a ZeRO shard or a per-iteration share rounded up to whole bytes)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_number:
            return sympy.ceiling(x)
        return None

    def _latex(self, printer):
        return r"\left\lceil " + printer._print(self.args[0]) + r" \right\rceil"


class choose(sympy.Function):  # noqa: N801
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

    def check(self, values: Mapping) -> None:
        """Raise the message of the first check that fails at ``values``."""
        subs = {k: sympy.Integer(v) if isinstance(v, int) else v for k, v in values.items()}
        for relation, message in self.checks:
            if relation.xreplace(subs) is sympy.false:
                raise CostModelError(message(values) if callable(message) else message)

    def value(self, key: str, values: Mapping, flat: Mapping[str, object] | None = None) -> object:
        """The number (or label) of one key at ``values`` (``flat``: keys already evaluated, for texts)."""
        if key in self.choices:
            cands, labels = self.choices[key]
            nums = [evaluate(c, values, key) for c in cands]
            if key in self.label_ties:
                return labels[max(range(len(nums)), key=lambda j: (nums[j], labels[j]))]
            return labels[max(range(len(nums)), key=lambda j: (nums[j], -j))]
        if key in self.info:
            v = self.info[key]
            return v(flat or {}, values) if callable(v) else v
        v = evaluate(self.exprs[key], values, key)
        if key in self.floats:
            return float(v)
        if key in self.numbers:
            return int(v) if v.q == 1 else float(v)
        return as_int(v, key)

    def evaluate(self, values: Mapping) -> dict[str, object]:
        """Every key at ``values`` (after the checks), in the order the keys were added."""
        self.check(values)
        out: dict[str, object] = {}
        for key in (*self.exprs, *self.choices, *self.info):
            out[key] = self.value(key, values, out)
        return out
