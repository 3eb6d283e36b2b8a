"""Does the step fit? Memory per device against the device's capacity, as quantities.

With a device (``hardware``), every estimate states whether its memory fits one device: ``memory.fits``
(true or false), ``memory.capacity_bytes`` (the device's memory), ``memory.shortfall_bytes`` (how much is
missing, 0 when it fits) and ``memory.fits_by`` (the number compared, :func:`judged`: the liveness peak of a training step
on one pipeline stage, any tp and sp, else the sum ``memory_bytes.total``; an inference step's total). A training step also
gets ``memory.zero3_devices_to_fit``: the fewest devices whose ZeRO-3 shards of the states (params, grads,
optimizer, ÷ dp) leave room for the activations of the same micro-batch (dp × tp × pp × sp; 0 when the
activations alone overflow a device) — read off the same numbers, for ``costmodel fit`` to refine.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from ..devices.table import device
from ..formulas.quantities import Quantities, choose, maximum, roundup
from ..options import Options


def judged(memory: Mapping[str, object], prefix: str = "memory_bytes.") -> tuple[object, str]:
    """(the bytes a device must hold, which number they are): **the** rule every verb judges a fit by —
    ``estimate``, ``fit``, ``plan``, ``sweep`` (``memory.fits``) and every report.

    The liveness peak (``memory_bytes.peak``) where it is modelled (one pipeline stage, under any tensor and
    sequence parallelism: the walk of one device's shares), else the sum ``memory_bytes.total`` (pipelines,
    a recompute fraction, inference). ``memory``: an estimate's flat keys (or their expressions), or keys without
    the ``prefix`` (``{"peak": ..., "total": ...}``); a peak of ``None`` is one not modelled.
    """
    peak = memory.get(f"{prefix}peak")
    return (peak, "peak") if peak is not None else (memory[f"{prefix}total"], "total")


def fit_quantities(model, options: Options, q: Quantities) -> Quantities:
    """``memory.fits``, ``memory.capacity_bytes``, ``memory.shortfall_bytes``, ``memory.fits_by`` (and, for
    training, ``memory.zero3_devices_to_fit``) when ``options.hardware`` is given; none otherwise."""
    out = Quantities()
    if options.hardware is None:
        return out
    capacity = sympy.Integer(int(device(options.hardware).memory_bytes))
    need, by = judged(q.exprs)
    out.add("memory.capacity_bytes", capacity)
    out.add("memory.fits", sympy.Le(need, capacity))  # a relation: true or false
    out.add("memory.shortfall_bytes", maximum(need - capacity, 0))
    out.info["memory.fits_by"] = by
    if "memory.states_unsharded_bytes" in q.exprs:
        states = sympy.Add(*(q.exprs[f"memory_bytes.{k}"] for k in ("params", "grads", "optimizer")))
        room = capacity - (need - states)  # what the activations (at their peak) leave for the states
        # ours, not sympy's Max and ceiling: those compare and factor the terms of a symbolic argument (seconds for
        # a 2,048-device MoE step's memory); these stay as written until numbers come in
        dp = roundup(q.exprs["memory.states_unsharded_bytes"] / maximum(room, 1))
        layout = options.layout
        out.add("memory.zero3_devices_to_fit", choose(room, 1, dp * layout.tp * layout.pp * layout.sp, 0))
    return out


__all__ = ["fit_quantities", "judged"]
