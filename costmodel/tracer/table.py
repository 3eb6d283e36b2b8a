"""The ATen op table: target → mapping function, filled by :mod:`.ops_dense` and :mod:`.ops_generic` through
:func:`maps` (a target registered twice raises), read by :class:`~.aten.Reader`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import CostModelError
from .ir import TOp

if TYPE_CHECKING:  # the reader's type only: the reader imports this table
    from .aten import Reader

Mapper = Callable[["Reader", object], None]
MAPPERS: dict[str, Mapper] = {}


def maps(*targets: str) -> Callable[[Mapper], Mapper]:
    """Register ``fn`` as the mapping of each ATen target (``"mm.default"``); a target taken twice raises."""

    def register(fn: Mapper) -> Mapper:
        for t in targets:
            if t in MAPPERS:
                raise CostModelError(f"ATen target {t!r} is already mapped (by {MAPPERS[t].__name__})")
            MAPPERS[t] = fn
        return fn

    return register


def weighted(op: TOp, reader: Reader | None = None) -> TOp:
    """An ``aten`` op reading a parameter: the parameter becomes its last operand (kind ``aten_weighted``).

    An op reading several parameters (``lambda_q · lambda_k``) reads each as a tensor that a ``parameter``
    op makes (the parameter is counted there, and needs a gradient like any parameter)."""
    weights = [o for o in op.operands if o.weight]
    if len(weights) > 1:
        if reader is None:
            raise CostModelError(f"trace: {op.node} reads {len(weights)} parameters; expected at most one here")
        op.operands = [reader.parameter_tensor(o) if o.weight else o for o in op.operands]
    elif weights:
        op.operands = [o for o in op.operands if not o.weight] + weights
        op.kind = "aten_weighted"
    return op


#: Targets mapped even when every tensor argument is a constant (none yet: a constant's ops are constants).
MAPPERS_KEEP: dict[str, bool] = {}
