"""The cost record: what one op, or a whole graph, costs.

Values are sympy expressions (symbolic or concrete, in the same fields) and stay
exact: numbers enter only by substitution, at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import sympy

Zero = sympy.Integer(0)

#: Bytes per element of each dtype we name. ``mask`` is a bool (dropout masks).
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "bool": 1,
}


def dtype_bytes(dtype: str) -> sympy.Integer:
    """Bytes per element of ``dtype`` (``"bf16"`` → 2)."""
    from .errors import CostModelError, closest

    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        if not isinstance(dtype, str):
            raise CostModelError(f"dtype: expected a name such as 'bf16', received {dtype!r}")
        raise CostModelError(f"unknown dtype {dtype!r}{closest(dtype, DTYPE_BYTES)}; expected one of {sorted(DTYPE_BYTES)}")
    return sympy.Integer(DTYPE_BYTES[dtype])


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
        return sympy.cancel(self.flops / self.bytes) if self.bytes != 0 else sympy.oo

    def map(self, fn) -> Cost:
        """Apply ``fn`` to every field (e.g. ``sympy.expand`` or a substitution)."""
        return Cost(*(fn(getattr(self, f.name)) for f in fields(self)))

    def simplify(self) -> Cost:
        return self.map(sympy.expand)

    def _repr_latex_(self) -> str:  # Jupyter
        from .latex import cost_latex

        return cost_latex({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Saved:
    """A tensor an op keeps for its backward pass.

    ``source`` is ``"input0"``, ``"input1"``, ... or ``"output"`` for a tensor the
    graph already has (so a tensor saved by two ops is counted once), or
    ``"own"`` for a tensor only this op makes (a dropout mask, norm statistics).
    ``role`` lets memory policies treat kinds of saved tensors differently.
    """

    name: str
    source: str
    elements: sympy.Expr
    dtype: str
    role: str = "activation"

    @property
    def bytes(self) -> sympy.Expr:
        return self.elements * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class OpCost:
    """Everything an op rule derives for one op: both passes, parameters, saved tensors.

    ``active`` is the part of ``params`` one token uses (a routed expert layer:
    ``top_k`` of its ``n_experts`` weight sets); ``None`` means all of them.
    """

    forward: Cost
    backward: Cost
    params: sympy.Expr = Zero
    saved: tuple[Saved, ...] = ()
    active: sympy.Expr | None = None

    @property
    def active_params(self) -> sympy.Expr:
        """Parameters one token uses (all of ``params`` unless the rule says otherwise)."""
        return self.params if self.active is None else self.active

    @property
    def training(self) -> Cost:
        return self.forward + self.backward
