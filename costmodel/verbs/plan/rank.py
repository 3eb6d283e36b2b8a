"""The planner's ranking: ties broken, tie groups counted, a reference layout found, the Pareto front.

A planner's layouts often share a step exactly (selective recompute costs nothing under FlashAttention; ZeRO 1 and
2 move only memory), so a place alone overstates how far a layout is from the best: :func:`rank` orders ties by
what a user prefers and gives each layout its step's dense rank, so that a report can say "step 3 of the distinct
steps, 2nd of the 4 layouts with it".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import CostModelError
from ...memory.schedules import SCHEDULES

RECOMPUTE = ("none", "selective", "full")


def pareto(time_s: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices of the layouts no other layout beats on both time and memory, fastest first."""
    order = np.lexsort((memory, time_s))
    best, out = np.inf, []
    for j in order:
        if memory[j] < best:
            out.append(j)
            best = memory[j]
    return np.array(out, dtype=np.int64)


#: Steps within this relative distance are one step (the float noise of formulas of equal value): a tie.
TIE = 1e-9


def rank(times: np.ndarray, memory: np.ndarray, lay: Mapping[str, np.ndarray], fits: np.ndarray):
    """(order, step_rank) of the layouts ``fits``: fastest first and, of equal steps (:data:`TIE`), the smallest
    memory, then the fewest devices per model-parallel group (tp·cp·pp: more data parallelism), then the least
    recompute, the lowest ZeRO stage and the simplest schedule (:data:`SCHEDULES` order). ``step_rank[j]`` is
    the dense rank of layout ``j``'s step among the distinct steps (1: the fastest), 0 where it does not fit.

    >>> t, mem = np.array([2.0, 1.0, 1.0, 3.0]), np.array([1.0, 5.0, 4.0, 1.0])
    >>> lay = {k: np.ones(4, dtype=np.int64) for k in ("tp", "cp", "pp", "recompute", "zero", "schedule")}
    >>> order, step_rank = rank(t, mem, lay, np.arange(4))
    >>> order.tolist(), step_rank.tolist()
    ([2, 1, 0, 3], [2, 1, 1, 3])
    """
    by_time = fits[np.argsort(times[fits], kind="stable")]
    t = times[by_time]
    step_rank = np.zeros(len(times), dtype=np.int64)
    step_rank[by_time] = np.cumsum(np.r_[True, t[1:] > t[:-1] * (1 + TIE)]) if len(t) else []
    group = lay["tp"] * lay["cp"] * lay["pp"]
    keys = (lay["schedule"], lay["zero"], lay["recompute"], group, memory, step_rank)
    return fits[np.lexsort(tuple(k[fits] for k in keys))], step_rank


#: The fields a reference layout may give (a row's names) and their columns in :func:`layouts`.
REFERENCE_FIELDS = {
    **{k: k for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "recompute", "schedule")},
    "micro_batch": "b",
    "micro_batches": "m",
}


def check_reference(reference: Mapping[str, object], what: str = "plan reference") -> None:
    """Refuse a reference layout (or ``--only``) naming a field a layout does not have."""
    for k in reference:
        if k not in REFERENCE_FIELDS:
            raise CostModelError(f"{what}: unknown field {k!r}; expected some of {', '.join(sorted(REFERENCE_FIELDS))}")


def matches(lay: Mapping[str, np.ndarray], reference: Mapping[str, object]) -> np.ndarray:
    """Which layouts have every field of ``reference`` (plan's row names: micro_batch, recompute, schedule...;
    a tuple of values: any of them)."""
    check_reference(reference)
    ok = np.ones(len(lay["tp"]), dtype=bool)
    for k, v in reference.items():
        col = REFERENCE_FIELDS[k]
        names = RECOMPUTE if k == "recompute" else SCHEDULES if k == "schedule" else None
        values = v if isinstance(v, tuple) else (v,)  # a tuple: any of its values
        if names is not None:
            values = tuple(names.index(x) if x in names else -1 for x in values)
        ok &= np.isin(lay[col], values)
    return ok


#: Narayanan et al. 2021's GPT-3 175B run on 1024 A100s (Sec. 5.1): TP 8, PP 8 (so DP 16), interleaved 1F1B;
#: a ``reference`` of :func:`~costmodel.verbs.plan.plan.plan`.
PUBLISHED_GPT3_175B = {"tp": 8, "pp": 8, "dp": 16, "cp": 1, "schedule": "interleaved"}

#: What the software that ran it (Megatron-LM 2021) could run, as arguments of
#: :func:`~costmodel.verbs.plan.plan.plan`: no sequence parallelism nor selective recompute (both Korthikanti et al.
#: 2022), no FlashAttention (2022), no distributed optimizer, the gradient all-reduce after the backward (local
#: DDP), 1F1B or interleaved, fp16; and full recompute, as every run of its Table 1.
MEGATRON_LM_2021 = {
    "only": {"zero": 0, "cp": 1, "schedule": ("1f1b", "interleaved"), "recompute": "full"},
    "overlap_comm": (),
    "megatron_sp": False,
    "precision": "fp16-mixed",
    "flash": False,
}


__all__ = [
    "MEGATRON_LM_2021",
    "PUBLISHED_GPT3_175B",
    "RECOMPUTE",
    "REFERENCE_FIELDS",
    "TIE",
    "check_reference",
    "matches",
    "pareto",
    "rank",
]
