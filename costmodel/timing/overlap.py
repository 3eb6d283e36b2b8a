"""Which communication hides behind compute, and what of it sticks out.

A kind of communication (``dp``, ``tp``, ``pp``, ``sp``, ``ep``, and ZeRO's parameter all-gather ``param_gather``)
is hidden (flag 1) or exposed (0); the planner's flags are symbols. A hidden kind costs ``max(0, its time − the
compute it hides behind)``: :func:`hide`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy

from ..formulas.quantities import maximum
from ..graph.cost import Zero

#: Communication the calibrated model hides behind compute unless told otherwise.
DEFAULT_OVERLAP = ("dp", "sp")


def overlap_flags(kinds: Iterable[str] | None, dualpipe: sympy.Expr | int) -> dict[str, sympy.Expr]:
    """:attr:`Knobs.overlap`: the ``kinds`` given (``overlap_comm``), else :data:`DEFAULT_OVERLAP` and, under
    DualPipe, the expert all-to-alls (``dualpipe``: 1 when it runs, 0 when not, or the planner's symbol); ZeRO's
    parameter all-gather (``param_gather``) hides where ``dp`` does."""
    if kinds is not None:
        out = dict.fromkeys(kinds, sympy.Integer(1))
    else:
        out = {**dict.fromkeys(DEFAULT_OVERLAP, sympy.Integer(1)), "ep": sympy.sympify(dualpipe)}
    out.setdefault("param_gather", out.get("dp", Zero))  # ZeRO's parameter all-gather: hidden where dp is
    return out


def megatron_overlap(overlap: Mapping[str, sympy.Expr], options) -> dict[str, sympy.Expr]:
    """``overlap`` with Megatron's ``--overlap-grad-reduce`` (kind ``dp``) and ``--overlap-param-gather``
    (``param_gather``) where ``options`` gives them."""
    out = dict(overlap)
    for kind, chosen in (("dp", options.overlap_grad_reduce), ("param_gather", options.overlap_param_gather)):
        if chosen is not None:
            out[kind] = sympy.Integer(int(chosen))
    return out


def overlap_text(overlap: Mapping[str, sympy.Expr]) -> str:
    """The hidden kinds, comma-separated (``time.overlap_comm``); ``param_gather`` only where it is not as
    ``dp`` (``--overlap-param-gather`` or ``--no-overlap-param-gather`` given apart from it)."""
    same = overlap.get("param_gather", Zero) == overlap.get("dp", Zero)
    hidden = (what for what, flag in overlap.items() if flag == 1 and not (what == "param_gather" and same))
    return ",".join(sorted(hidden)) or "none"


def hide(kind: str, seconds: sympy.Expr, behind: sympy.Expr, overlap: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """``seconds`` of communication of ``kind`` behind ``behind`` of compute: ``max(0, seconds − behind)`` where
    ``overlap`` hides the kind (1), all of it where not (0), the mix of both for a planner's symbol."""
    flag = overlap.get(kind, Zero)  # hidden where it is 1, exposed where it is 0
    if flag == 0:
        return seconds
    hidden = maximum(0, seconds - behind)
    return hidden if flag == 1 else flag * hidden + (1 - flag) * seconds


__all__ = ["DEFAULT_OVERLAP", "hide", "megatron_overlap", "overlap_flags", "overlap_text"]
