"""The cost record: what one op, or a whole graph, costs.

Values are sympy expressions (symbolic or concrete, in the same fields) and stay
exact: numbers enter only by substitution, at the edge.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import sympy

from ..dtypes import DTYPE_BYTES, check_dtype
from .printing import cost_latex

Zero = sympy.Integer(0)


def dtype_bytes(dtype: str) -> sympy.Integer:
    """Bytes per element of ``dtype`` (``"bf16"`` → 2); an unknown name is an error naming the closest."""
    return sympy.Integer(DTYPE_BYTES[check_dtype(dtype)])


@functools.lru_cache(maxsize=4096)
def ratio(num: sympy.Expr, den: sympy.Expr) -> sympy.Expr:
    """``num/den`` with common factors cancelled, cached: the ops of a model share a few shapes, and sympy's
    ``cancel`` is milliseconds each (it is not in sympy's cache)."""
    return sympy.cancel(num / den)


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of one pass (forward or backward) of an op or a graph.

    ``flops`` counts every FLOP (a multiply-add is 2); ``matmul_flops`` is the
    part done in matmuls and contractions, which is what PyTorch's
    ``FlopCounterMode`` counts. ``bytes_read``/``bytes_written`` are the bytes
    moved to and from memory if the op runs alone (no fusion).
    ``recompute_flops`` is forward work done again during backward (activation
    checkpointing, FlashAttention's score recompute): hardware FLOPs, not model
    FLOPs, so it is kept out of ``flops`` (MFU counts ``flops``; HFU adds it).
    """

    flops: sympy.Expr = Zero
    matmul_flops: sympy.Expr = Zero
    bytes_read: sympy.Expr = Zero
    bytes_written: sympy.Expr = Zero
    recompute_flops: sympy.Expr = Zero

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __radd__(self, other: object) -> Cost:
        if other == 0:  # so that sum() works
            return self
        return NotImplemented

    def __mul__(self, count: sympy.Expr) -> Cost:
        return Cost(*(getattr(self, f.name) * count for f in fields(self)))

    __rmul__ = __mul__

    @property
    def bytes(self) -> sympy.Expr:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> sympy.Expr:
        """Arithmetic intensity, FLOPs per byte moved."""
        return ratio(self.flops, self.bytes) if self.bytes != 0 else sympy.oo

    def map(self, fn) -> Cost:
        """Apply ``fn`` to every field (e.g. ``sympy.expand`` or a substitution)."""
        return Cost(*(fn(getattr(self, f.name)) for f in fields(self)))

    def simplify(self) -> Cost:
        return self.map(sympy.expand)

    def _repr_latex_(self) -> str:  # Jupyter
        return cost_latex({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Saved:
    """A tensor an op keeps for its backward pass.

    ``source`` is ``"input0"``, ``"input1"``, ... or ``"output"`` for a tensor the
    graph already has (so a tensor saved by two ops is counted once), or
    ``"own"`` for a tensor only this op makes (a dropout mask, norm statistics).
    ``role`` lets memory policies treat kinds of saved tensors differently. ``serves``: the data inputs
    (by index among the node's inputs) whose gradients need it, when only those do (``a·b`` keeps ``a``
    for the gradient of ``b``); ``None``: whatever backward the op runs needs it.
    """

    name: str
    source: str
    elements: sympy.Expr
    dtype: str
    role: str = "activation"
    serves: tuple[int, ...] | None = None

    @functools.cached_property  # a frozen record: multiplied once
    def bytes(self) -> sympy.Expr:
        return self.elements * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Param:
    """One parameter tensor an op owns (per run of the op), declared by its rule.

    ``axes`` are (axis, size) pairs. A *matrix* (a matmul weight, an embedding table) also gives
    ``rows``/``cols``, the elements of its output-side and input-side axes (Adafactor factors its
    second moment over them), and ``stack``, how many matrices are stacked along a selected axis
    (one per expert). ``quantized``: stored in an inference weight format (int8, int4, fp8) when one is
    chosen — a matmul's weight, not a lookup table, norm gain or bias.
    """

    name: str
    axes: tuple[tuple[str, sympy.Expr], ...]
    rows: sympy.Expr | None = None
    cols: sympy.Expr | None = None
    stack: sympy.Expr = sympy.Integer(1)
    quantized: bool = False

    @functools.cached_property  # a frozen record: computed once (params are summed per op, per section)
    def elements(self) -> sympy.Expr:
        return sympy.Mul(*(size for _, size in self.axes))


@dataclass(frozen=True)
class OpCost:
    """Everything an op rule derives for one op: both passes, parameter tensors, saved tensors.

    ``weights`` are the parameter tensors the op owns (a tied weight is owned elsewhere);
    ``params`` is their element count. ``active`` is the part of ``params`` one token uses (a routed
    expert layer: ``top_k`` of its ``n_experts`` weight sets); ``None`` means all of them.
    """

    forward: Cost
    backward: Cost
    weights: tuple[Param, ...] = ()
    saved: tuple[Saved, ...] = ()
    active: sympy.Expr | None = None

    @functools.cached_property  # a frozen record (op_cost caches one per op): summed once
    def params(self) -> sympy.Expr:
        return sympy.Add(*(w.elements for w in self.weights))

    @property
    def active_params(self) -> sympy.Expr:
        """Parameters one token uses (all of ``params`` unless the rule says otherwise)."""
        return self.params if self.active is None else self.active

    @property
    def training(self) -> Cost:
        return self.forward + self.backward
