"""Einops patterns: the one place that touches einops' parser.

A pattern such as ``"b t d, d f -> b t f"`` names the axes of each operand and of
the result. costmodel reads costs off it: a contraction's FLOPs are 2 × the
product of its distinct axes, a tensor's elements the product of its axes.

Composite axes ``(h k)`` and literal axes ``3`` are allowed (``"b t (3 h k)"``);
ellipses are not, because an ellipsis has no size to count. A literal repeated within an operand is a
distinct axis each time (``"3 3 d"`` has nine rows): its later occurrences are named ``3#2``, ``3#3``...,
and the k-th occurrence in one operand is the k-th in another.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import sympy
from einops import EinopsError
from einops.parsing import AnonymousAxis, ParsedExpression

from ..errors import CostModelError
from ..expr import MAX_GRAPH_DEGREE, MAX_GRAPH_TERMS, check_budget
from ..sizes import MAX_DIGITS

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
        return tuple(a for a in self.axes if literal(a) is None)


def literal(axis: str) -> int | None:
    """The size of a literal axis (``"3"``, or ``"3#2"`` for a repeat), ``None`` for a named one."""
    head = axis.split("#")[0]
    return int(head) if head.isdigit() else None


def _operand(text: str, pattern: str) -> Axes:
    text = text.strip()
    try:
        parsed = ParsedExpression(text)
    except EinopsError as exc:
        raise CostModelError(f"malformed einops pattern {pattern!r}: {exc}") from None
    if parsed.has_ellipsis:
        raise CostModelError(f"pattern {pattern!r}: an ellipsis '...' has no size to count; name every axis")
    axes: list[str] = []
    seen: dict[str, int] = {}
    for group in parsed.composition:
        for axis in group:
            if isinstance(axis, AnonymousAxis):
                name = str(axis.value)
                seen[name] = seen.get(name, 0) + 1
                axes.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
            else:
                axes.append(axis)
    if len(set(axes)) != len(axes):
        raise CostModelError(f"pattern {pattern!r}: operand {text!r} repeats an axis")
    return tuple(axes)


@functools.lru_cache(maxsize=4096)
def parse(pattern: str) -> Pattern:
    """Parse ``"in1, in2 -> out"`` (or a single operand ``"b t d"``, its own output).

    >>> parse("b t d, d f -> b t f").inputs
    (('b', 't', 'd'), ('d', 'f'))
    >>> parse("b t (3 h k)").output
    ('b', 't', '3', 'h', 'k')
    >>> parse("3 3 d, d f -> 3 3 f").axes
    ('3', '3#2', 'd', 'f')
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
        if literal(axis) is not None:
            resolved[axis] = sympy.Integer(literal(axis))
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
        if expr.is_Integer and expr > 10**MAX_DIGITS:  # bounded before any product of sizes is formed
            raise CostModelError(
                f"{where}: a size of about 10^{len(str(expr)) - 1} is out of range; expected at most 10^{MAX_DIGITS}"
            )
    elif expr.is_positive is False:
        raise CostModelError(f"{where}: expected a positive size, received {expr}")
    else:
        check_budget(expr, where, max_degree=MAX_GRAPH_DEGREE, max_terms=MAX_GRAPH_TERMS)  # no (d+T)**64 axis
    return expr


def elements(axes: Axes, sizes: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """Number of elements of a tensor with these axes."""
    return sympy.Mul(*(sizes[a] for a in axes))
