"""Einops patterns: the one place that touches einops' parser.

A pattern such as ``"b t d, d f -> b t f"`` names the axes of each operand and of
the result. costmodel reads costs off it: a contraction's FLOPs are 2 × the
product of its distinct axes, a tensor's elements the product of its axes.

Composite axes ``(h k)`` and literal axes ``3`` are allowed (``"b t (3 h k)"``);
ellipses are not, because an ellipsis has no size to count.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import sympy
from einops import EinopsError
from einops.parsing import AnonymousAxis, ParsedExpression

from .errors import CostModelError

Axes = tuple[str, ...]


@dataclass(frozen=True)
class Pattern:
    """A parsed pattern: the axes of each input operand and of the output.

    Literal axes such as ``3`` appear as the string ``"3"``.
    """

    text: str
    inputs: tuple[Axes, ...]
    output: Axes

    @property
    def axes(self) -> Axes:
        """Every distinct axis, in order of first appearance."""
        seen: dict[str, None] = {}
        for operand in (*self.inputs, self.output):
            seen.update(dict.fromkeys(operand))
        return tuple(seen)

    @property
    def named_axes(self) -> Axes:
        return tuple(a for a in self.axes if not a.isdigit())


def _operand(text: str, pattern: str) -> Axes:
    text = text.strip()
    try:
        parsed = ParsedExpression(text)
    except EinopsError as exc:
        raise CostModelError(f"malformed einops pattern {pattern!r}: {exc}") from None
    if parsed.has_ellipsis:
        raise CostModelError(
            f"pattern {pattern!r}: an ellipsis '...' has no size to count; name every axis"
        )
    axes: list[str] = []
    for group in parsed.composition:
        for axis in group:
            axes.append(str(axis.value) if isinstance(axis, AnonymousAxis) else axis)
    if len(set(axes)) != len(axes) and not any(a.isdigit() for a in axes):
        raise CostModelError(f"pattern {pattern!r}: operand {text!r} repeats an axis")
    return tuple(axes)


@functools.lru_cache(maxsize=4096)
def parse(pattern: str) -> Pattern:
    """Parse ``"in1, in2 -> out"`` (or a single operand ``"b t d"``, its own output).

    >>> parse("b t d, d f -> b t f").inputs
    (('b', 't', 'd'), ('d', 'f'))
    >>> parse("b t (3 h k)").output
    ('b', 't', '3', 'h', 'k')
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise CostModelError(f"expected an einops pattern such as 'b t d -> b t f', received {pattern!r}")
    if pattern.count("->") > 1:
        raise CostModelError(f"pattern {pattern!r}: more than one '->'")
    left, arrow, right = pattern.partition("->")
    inputs = tuple(_operand(part, pattern) for part in left.split(","))
    if any(not operand for operand in inputs):
        raise CostModelError(f"pattern {pattern!r}: an input operand has no axes")
    output = _operand(right, pattern) if arrow else inputs[0]
    return Pattern(pattern, inputs, output)


def resolve_sizes(pattern: Pattern, sizes: Mapping[str, sympy.Expr], where: str) -> dict[str, sympy.Expr]:
    """Give every axis of ``pattern`` its size, or raise naming the unsized axes.

    Literal axes size themselves; a named axis takes its size from ``sizes``.
    """
    resolved: dict[str, sympy.Expr] = {}
    missing = []
    for axis in pattern.axes:
        if axis.isdigit():
            resolved[axis] = sympy.Integer(int(axis))
        elif axis in sizes:
            resolved[axis] = check_size(sizes[axis], f"axis {axis!r} of {where}")
        else:
            missing.append(axis)
    if missing:
        known = ", ".join(sorted(sizes)) or "none"
        raise CostModelError(
            f"{where}: unsized axis {', '.join(map(repr, missing))} in pattern {pattern.text!r}; "
            f"expected a size for it (e.g. {missing[0]}=d), sized axes are: {known}"
        )
    return resolved


def check_size(value: object, where: str) -> sympy.Expr:
    """A size as a sympy expression; numbers must be positive integers."""
    if isinstance(value, bool):
        raise CostModelError(f"{where}: expected a positive integer or a symbolic size, received {value!r}")
    expr = sympy.Integer(value) if isinstance(value, int) else value
    if not isinstance(expr, sympy.Expr):
        raise CostModelError(f"{where}: expected a positive integer or a symbolic size, received {value!r}")
    if expr.is_number:
        if not (expr.is_integer and expr.is_positive):
            raise CostModelError(f"{where}: expected a positive integer size, received {expr}")
    elif expr.is_positive is False:
        raise CostModelError(f"{where}: expected a positive size, received {expr}")
    return expr


def elements(axes: Axes, sizes: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """Number of elements of a tensor with these axes."""
    return sympy.Mul(*(sizes[a] for a in axes))
