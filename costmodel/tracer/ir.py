"""The traced graph before it is written: ops with local axis ids and sizes, then written with GraphBuilder.

A :class:`TOp` is one costmodel op read off one ATen node: its kind, its pattern operands as tuples of
local axis ids (``"a0"``, ``"m"``...), the size of every id, its attributes. Keeping sizes apart from names
lets folding compare layers and formula recovery fit sizes across configs before anything is named.

:func:`emit` writes ops into a :class:`~costmodel.graph.builder.GraphBuilder`, naming each axis after its
size, one name per size in the whole graph (``B`` → ``b``, ``T`` → ``t`` then ``s``, 64 → ``n64``, ``d``
→ ``d``): two ops that share an axis name share its size, which is what the FlashAttention pass needs when
it merges the score and context contractions into one op.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError
from ..symbols import B, T

#: Kinds whose operands share no axis semantics: their axes are named operand by operand.
FREE_KINDS = ("reshape", "aten", "aten_pointwise", "aten_weighted")


def named_freely(kind: str) -> bool:
    """Whether a traced op of ``kind`` (the tracer's IR) takes fresh axis names rather than its operands' order."""
    return kind in FREE_KINDS


#: Attributes whose value names axes (a bias's axes, a reduction axis, attention's score axes).
AXIS_ATTRS = ("bias", "axis", "scores", "experts")


@dataclass
class Operand:
    """One pattern operand: a graph tensor (the fx node that makes it) or a parameter (its name)."""

    source: str
    dims: tuple[str, ...]
    weight: bool = False


@dataclass
class TOp:
    """One op of the traced graph, before it is named and written."""

    node: str  # the fx node it comes from
    kind: str
    operands: list[Operand]
    output: tuple[str, ...]
    sizes: dict[str, sympy.Expr]
    dtype: str
    module: str = ""
    hint: str = ""
    attrs: dict[str, object] = field(default_factory=dict)
    passthrough: bool = False  # moves data only (a view, a layout copy, an expand): KV tagging walks through
    extra_params: list[str] = field(default_factory=list)  # parameters counted here besides the weight operand

    @property
    def owned(self) -> list[str]:
        """Every parameter this op's rule counts (its weight operand, a bias, a norm's gain and bias)."""
        w = self.weight
        return ([w.source] if w is not None else []) + list(self.extra_params)

    @property
    def inputs(self) -> list[str]:
        return [o.source for o in self.operands if not o.weight]

    @property
    def weight(self) -> Operand | None:
        return next((o for o in self.operands if o.weight), None)


@dataclass
class TInput:
    """A tensor fed to the graph: a user input, or a factory's output (``arange``, ``zeros``)."""

    node: str
    dims: tuple[str, ...]
    sizes: dict[str, sympy.Expr]
    dtype: str
    module: str = ""
    hint: str = ""


class Namer:
    """Axis names after sizes: one name per size in the whole graph, so a shared name means a shared size."""

    def __init__(self) -> None:
        self.by_size: dict[sympy.Expr, list[str]] = {}
        self.taken: set[str] = {UNIT}

    def _base(self, size: sympy.Expr) -> str:
        if size == B:
            return "b"
        if size == T:
            return "t"
        if size.is_Integer:
            return f"n{int(size)}"
        if size.is_Symbol:
            return str(size).lower() if str(size).lower() not in ("b", "t", "s") else f"x_{size}"
        text = re.sub(r"[^0-9a-zA-Z]+", "_", str(sympy.factor(size))).strip("_").lower()
        return ("x_" + text)[:40]

    def name(self, size: sympy.Expr, index: int) -> str:
        """The ``index``-th name of ``size`` (distinct axes of one op with equal sizes get distinct names)."""
        names = self.by_size.setdefault(size, [])
        while len(names) <= index:
            base = self._base(size)
            if size == T and len(names) == 1:
                cand = "s"  # keys: the second T-sized axis, as in the hand-written graphs
            else:
                cand = base if not names else f"{base}_{len(names) + 1}"
            k = 2
            while cand in self.taken:
                cand, k = f"{base}_{len(names) + k}", k + 1
            self.taken.add(cand)
            names.append(cand)
        return names[index]

    def rename(self, dims_in_order: list[str], sizes: Mapping[str, sympy.Expr]) -> dict[str, str]:
        """Local id → axis name for the ids of one op (in order of first appearance)."""
        out: dict[str, str] = {}
        used: dict[sympy.Expr, int] = {}
        for d in dims_in_order:
            if d in out:
                continue
            size = sizes[d]
            out[d] = self.name(size, used.get(size, 0))
            used[size] = used.get(size, 0) + 1
        return out

    def rename_free(self, op: TOp) -> dict[str, str]:
        """Names for an op whose axes carry no meaning across operands (a view, an element-wise op): each
        operand is named on its own, so ``b t d -> b t h k`` reads as it should."""
        out: dict[str, str] = {}
        for dims in [op.output] + [o.dims for o in op.operands]:
            taken = {out[d] for d in dims if d in out}
            for d in dims:
                if d in out:
                    continue
                k = 0
                while self.name(op.sizes[d], k) in taken:
                    k += 1
                out[d] = self.name(op.sizes[d], k)
                taken.add(out[d])
        return out


#: The axis of a 0-dimensional tensor read as an operand (an einops operand needs an axis): size 1.
UNIT = "unit"


def pattern_of(op: TOp, names: Mapping[str, str]) -> str:
    """The einops pattern of ``op`` with its dimensions named by ``names``."""
    left = ", ".join(" ".join(names[d] for d in o.dims) if o.dims else UNIT for o in op.operands)
    return f"{left} -> {' '.join(names[d] for d in op.output)}"


def order_of(op: TOp) -> list[str]:
    """``op``'s dimensions in order of first appearance: operands, output, then saved tensors' sizes."""
    seen: dict[str, None] = {}
    for o in op.operands:
        seen.update(dict.fromkeys(o.dims))
    seen.update(dict.fromkeys(op.output))
    for d in op.sizes:  # sizes of saved tensors that are not pattern axes
        seen.setdefault(d, None)
    return list(seen)


def check_positive(op: TOp) -> None:
    """Refuse an op with a numeric size that is not a positive whole number."""
    for size in op.sizes.values():
        if size.is_number and not (size.is_integer and size.is_positive):
            raise CostModelError(f"trace: {op.node} ({op.hint}) has a size {size}; expected positive sizes")
