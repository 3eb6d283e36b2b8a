"""One tensor kept for backward (:class:`Kept`): the record the activation analysis, the liveness walk and an
implementation's own tensors (:mod:`costmodel.memory.implementation`) share."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy

from ..graph.cost import Saved


@dataclass(frozen=True)
class Kept:
    """One distinct tensor kept for backward: what it is, its axes, who keeps it, how many copies."""

    node: str  # the node that makes it
    saved: Saved
    axes: tuple[tuple[str, sympy.Expr], ...]  # (axis, size)
    copies: sympy.Expr
    savers: tuple[str, ...]  # ops that save it, in graph order

    @functools.cached_property  # a frozen record, its bytes read by every section: multiplied once
    def bytes(self) -> sympy.Expr:
        return self.saved.bytes * self.copies


__all__ = ["Kept"]
