"""The ``cast`` kind: a dtype conversion (``x.to(dtype)``), as transformers' eager attention does around its
softmax (``softmax(scores, dtype=float32).to(query.dtype)``).

Conventions written where they bite: a cast does no FLOPs (a conversion is not arithmetic, and
``FlopCounterMode`` counts none); it keeps nothing for backward (autograd's ``ToCopyBackward`` keeps only
the source dtype), and its backward converts the gradient back.
"""

from __future__ import annotations

from ..options import Counting
from .cost import Cost, OpCost, dtype_bytes
from .pattern import elements
from .registry import Op, rule


@rule("cast", pointwise=True)
def _cast(op: Op, counting: Counting) -> OpCost:
    """``"b h t s -> b h t s"`` from the dtype of attribute ``source`` to the op's dtype.

    >>> from costmodel.kit import symbols as s
    >>> c = _cast(Op("cast", "b s -> b s", (("b", s.B), ("s", s.T)), "bf16", (("source", "fp32"),)), Counting())
    >>> c.forward.bytes_read, c.forward.bytes_written, c.forward.flops, c.saved  # read fp32, write bf16
    (4*B*T, 2*B*T, 0, ())
    """
    n = elements(op.parsed.output, op.size)
    source, target = dtype_bytes(str(op.attr("source", op.dtype))), dtype_bytes(op.dtype)
    return OpCost(
        Cost(bytes_read=n * source, bytes_written=n * target), Cost(bytes_read=n * target, bytes_written=n * source)
    )
