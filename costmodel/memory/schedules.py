"""Pipeline schedules: the bubble each leaves, the micro-batches a stage holds in flight, stage layer counts.

``p`` stages, ``m`` micro-batches per step, ``v`` virtual stages (chunks) per device; ``t_f``, ``t_b`` the
forward and backward time of one micro-batch on a stage. A step is ``m × t`` on the slowest stage plus the
bubble: the warm-up and cool-down in which stages wait (Narayanan et al. 2021; Qi et al. 2024; DeepSeek-AI
2024, Table 2):

==============  ===================================  ============================  =====================
schedule        bubble                               activations in flight         weights per device
==============  ===================================  ============================  =====================
``gpipe``       (p−1)(t_f + t_b)                     m micro-batches               1 stage
``1f1b``        (p−1)(t_f + t_b)                     first stage min(p, m), last 1  1 stage
``interleaved`` (p−1)(t_f + t_b)/v                   first p + (p−1)/v              1 stage (v chunks)
``zb-h1``       (p−1)(t_f + t_B − t_W) = (p−1)·t_f   as 1F1B                        1 stage
``dualpipe``    (p/2 − 1)(t_{F&B} + t_B − 3t_W)      p + 1                          2 stages
==============  ===================================  ============================  =====================

Zero-bubble and DualPipe split the backward into the input gradient ``B`` and the weight gradient ``W``; both
are taken as half of it (t_B = t_W = t_b/2: a matmul's backward is two GEMMs of its forward's size), and
DualPipe's overlapped forward-and-backward chunk as ``t_f + t_b``: its bubble is then (p/2 − 1)·t_f.
Interleaved in-flight count: Korthikanti et al. 2022, Sec. 4.2.3, ``p·(1 + (p−1)/(p·v))``. With stages of
different times the slowest sets the pace and each other stage adds its own time once to the fill and drain:
``step = m·t_max + β·(Σ t_i − t_max)`` where β is the schedule's share of the 1F1B bubble (1, 1/v,
t_f/(t_f+t_b), ...): for equal stages ``(m + p − 1)·t`` for 1F1B.

Uneven stages (Llama 3 405B: 126 layers over 16 stages, the first and last one layer short):
:func:`stage_layers`. (The memory section of issue 14 splits stages too; the two meet at the merge.)
"""

from __future__ import annotations

import sympy

from ..errors import CostModelError
from ..options.policies import SCHEDULES, check_schedule


def in_flight(schedule: str, stage: str, pp: object, micro_batches: object, vpp: object = 1) -> sympy.Expr:
    """Micro-batches of activations a stage (``"first"`` or ``"last"``) holds at its peak, in units of one
    micro-batch through all of the stage's layers."""
    p, m, v = (sympy.sympify(x) for x in (pp, micro_batches, vpp))
    if schedule == "gpipe":
        return m
    if schedule == "dualpipe":
        return p + 1
    first = stage == "first"
    if schedule == "interleaved":
        # Megatron's warm-up: rank 0 holds (v + 1)p − 1 chunk activations at its peak, rank p−1 (v − 1)p + 1
        return sympy.Min(p, m) * (1 + (p - 1) / (p * v)) if first else ((v - 1) * p + 1) / v
    return sympy.Min(p, m) if first else sympy.Integer(1)


def weight_copies(schedule: str) -> int:
    """Copies of a stage's weights a device holds (DualPipe keeps two stages per device)."""
    return 2 if schedule == "dualpipe" else 1


def bubble_share(schedule: str, pp: object, vpp: object, t_f: sympy.Expr, t_b: sympy.Expr) -> sympy.Expr:
    """β: the schedule's bubble as a share of 1F1B's ``(p − 1)(t_f + t_b)``."""
    p, v = sympy.sympify(pp), sympy.sympify(vpp)
    if schedule in ("1f1b", "gpipe"):
        return sympy.Integer(1)
    if schedule == "interleaved":
        return 1 / v
    if schedule == "zb-h1":
        return t_f / (t_f + t_b)
    if schedule == "dualpipe":
        return (p / 2 - 1) / (p - 1) * t_f / (t_f + t_b)
    raise CostModelError(f"schedule: expected one of {', '.join(SCHEDULES)}, received {schedule!r}")


def block_share(layout, stage: str, count: sympy.Expr) -> sympy.Expr:
    """The share of a repeated block's layers (weights and activations) one device of ``stage`` holds:
    1/pp, or the first/last stage's own layers of ``layout.stage_layers``, × the schedule's weight copies."""
    copies = weight_copies(layout.schedule)
    if layout.pp == 1:
        return sympy.Integer(1)
    if layout.stage_layers is None or stage not in ("first", "last"):
        return sympy.Integer(copies) / layout.pp
    first, last = layout.stage_layers
    return copies * sympy.Integer(first if stage == "first" else last) / count


def balanced_layers(layers: int, pp: int) -> tuple[int, ...]:
    """A balanced split of ``layers`` over ``pp`` stages where they do not divide, in stage order: what
    :func:`stage_layers` suggests for ``--stage-layers`` (it never picks one silently).

    ⌈layers/pp⌉ each; the r = pp·⌈layers/pp⌉ − layers missing ones are taken one per stage from the
    ends inwards, alternately: the first stage, the last, the second, the second to last... Llama 3 405B
    (Llama Team 2024, Sec. 3.3.2: "the first and the last stages each have one layer fewer"):

    >>> balanced_layers(126, 16)
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    >>> balanced_layers(32, 4), balanced_layers(9, 4)
    ((8, 8, 8, 8), (2, 2, 3, 2))
    """
    if pp < 1 or layers < pp:
        raise CostModelError(f"balanced_layers: {layers} layers over {pp} stages; expected 1 <= pp <= layers")
    c = -(-layers // pp)
    out = [c] * pp
    ends = [k // 2 if k % 2 == 0 else pp - 1 - k // 2 for k in range(pp)]  # 0, pp − 1, 1, pp − 2, ...
    for i in ends[: pp * c - layers]:
        out[i] -= 1
    return tuple(out)


def stage_layers(layers: int, stages: int, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Layers on each of ``stages`` pipeline stages: ``first`` and ``last`` as given, the rest split evenly.

    >>> stage_layers(96, 8)
    (12, 12, 12, 12, 12, 12, 12, 12)
    >>> stage_layers(126, 16, first=7, last=7)  # Llama 3 405B: 7 + 14 × 8 + 7
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    """
    if stages == 1:
        if first not in (None, layers) or last not in (None, layers):
            raise CostModelError(f"stage layers: one stage holds all {layers} layers")
        return (layers,)
    if first is None and last is None:
        if layers % stages:
            hint = ""
            if 1 <= stages <= layers:
                split = balanced_layers(layers, stages)
                if len(set(split[1:-1])) <= 1 and split[0] + split[-1] + sum(split[1:-1]) == layers:
                    hint = f", e.g. --stage-layers {split[0]},{split[-1]}"
            raise CostModelError(
                f"stage layers: {layers} layers do not split evenly over {stages} stages; give the "
                f"first and last stages' layers (--stage-layers FIRST,LAST{hint})"
            )
        return (layers // stages,) * stages
    f = first if first is not None else last
    lst = last if last is not None else first
    rest, middle = layers - f - lst, stages - 2
    if f < 1 or lst < 1 or rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
        raise CostModelError(
            f"stage layers: {layers} layers over {stages} stages with {f} on the first and {lst} on "
            f"the last leave {rest} for {middle} middle stage(s); expected a whole number each"
        )
    return (f, *((rest // middle,) * middle if middle else ()), lst)


def stage_shares(layers: object, stages: int, first: int | None, last: int | None) -> dict[str, sympy.Expr]:
    """The share of the repeated layers on the first, a middle and the last stage (exact; 1/p when even)."""
    if first is None and last is None:
        share = sympy.Integer(1) / stages if isinstance(stages, int) else 1 / sympy.sympify(stages)
        return {"first": share, "middle": share, "last": share}
    counts = stage_layers(int(layers), stages, first, last)
    total = sum(counts)
    mid = counts[1] if len(counts) > 2 else counts[0]
    return {k: sympy.Rational(c, total) for k, c in (("first", counts[0]), ("middle", mid), ("last", counts[-1]))}


__all__ = [
    "SCHEDULES",
    "block_share",
    "bubble_share",
    "check_schedule",
    "in_flight",
    "stage_layers",
    "stage_shares",
    "weight_copies",
]
