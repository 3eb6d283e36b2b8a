"""Data-parallel collectives each in its overlap window, and the optimizer step on a device's shard.

The bytes are the memory section's (:func:`costmodel.memory.parallel.dp_collectives`); here they become seconds
on the tier the dp group spans (:mod:`costmodel.devices.network`), hidden where the stack hides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import sympy

from ..devices.efficiency import Efficiency
from ..devices.network import bus_bandwidth, latency, strides
from ..devices.table import Device
from ..formulas.quantities import roundup
from ..graph.cost import Zero
from .overlap import hide

if TYPE_CHECKING:  # the knobs' record only as an annotation: calibrated imports this module
    from .calibrated import Knobs


def dp_seconds(
    dev: Device,
    eff: Efficiency,
    k: Knobs,
    alive: sympy.Expr,
    all_reduce: sympy.Expr,
    reduce_scatter: sympy.Expr,
    all_gather: sympy.Expr,
    mid: Mapping[str, sympy.Expr],
    n_layers: sympy.Expr,
    experts: Mapping[str, sympy.Expr] | None = None,
) -> tuple[sympy.Expr, sympy.Expr]:
    """(seconds, exposed seconds) of one step's data-parallel collectives, each in its overlap window.

    ``mid``: the per-micro-batch forward ``f`` and backward ``b`` (recompute included) of a full stage. Each
    collective costs ``latency + bytes / bus bandwidth`` on the tier the dp group spans. ``experts``: the expert
    weights' part of each collective's bytes (``all_reduce``, ``reduce_scatter``, ``all_gather``; included in
    the three totals), which runs over the expert data-parallel group instead: the ``dp / ep`` devices holding
    the same experts, ``tp·cp·ep`` ranks apart (Megatron's order, experts inside dp), so with EP filling a node
    the group has one member a node and one NIC each. The two groups' collectives share their windows.

    * No ZeRO (DDP, Megatron without the distributed optimizer): the gradients' all-reduce, bucketed, behind
      the last micro-batch's backward (overlap kind ``dp``): ``max(0, t_AR − b)``.
    * ZeRO-1/2 (Megatron's distributed optimizer, DeepSpeed): the reduce-scatter of the gradients behind the last
      micro-batch's backward (``--overlap-grad-reduce``: kind ``dp``), ``max(0, t_RS − b)``, and the all-gather
      of the updated parameters behind the next step's first forward (``--overlap-param-gather``: kind
      ``param_gather``), ``max(0, t_AG − f)``. Under interleaving each of the ``v`` model chunks hides its 1/v
      of each behind its own 1/v of that pass, which sums to the same windows.
    * ZeRO-3 (FSDP), per micro-batch and per unit (a layer: ``U`` = the stage's layers): each unit's parameters
      are gathered before its forward and again before its backward, its gradients reduce-scattered after it.
      With prefetch (kind ``dp``) unit i+1's gather runs behind unit i's forward, and behind its backward the
      next gather with the previous reduce-scatter: exposed per micro-batch
      ``ag + (U − 1)·max(0, ag − f/U) + ag + rs + (U − 1)·max(0, ag + rs − b/U)``, the first gathers and the
      last reduce-scatter never hidden (``ag``, ``rs``: one unit's collective, its latency included).
    """
    st = strides(k.tp, k.cp, k.dp)
    lat, bw = latency(eff, k.dp, st["dp"]), bus_bandwidth(dev, eff, k.dp, st["dp"])
    m, plain = k.micro_batches, 1 - k.zero3 - k.sharded
    units = n_layers / k.pp
    e = {kind: (experts or {}).get(kind, Zero) for kind in ("all_reduce", "reduce_scatter", "all_gather")}
    n_e, stride_e = k.dp / k.ep, st["ep"] * k.ep
    lat_e, bw_e = latency(eff, n_e, stride_e), bus_bandwidth(dev, eff, n_e, stride_e)
    alive_e = alive if any(v != 0 for v in e.values()) else Zero

    def on_both(nbytes: sympy.Expr, kind: str, share: sympy.Expr = 1) -> sympy.Expr:
        """One collective's seconds: the dense part on the dp group, the experts' on theirs."""
        dense = alive * (lat + (nbytes - e[kind]) * share / bw)
        return dense + (alive_e * (lat_e + e[kind] * share / bw_e) if e[kind] != 0 else Zero)

    ar = on_both(all_reduce, "all_reduce")
    rs, ag = on_both(reduce_scatter, "reduce_scatter"), on_both(all_gather, "all_gather")
    ag_u = on_both(all_gather, "all_gather", 1 / (2 * m * units))  # one unit's gather, one pass, one micro-batch
    rs_u = on_both(reduce_scatter, "reduce_scatter", 1 / (m * units))
    fsdp = m * (
        2 * ag_u
        + rs_u
        + (units - 1)
        * (hide("dp", ag_u, mid["f"] / units, k.overlap) + hide("dp", ag_u + rs_u, mid["b"] / units, k.overlap))
    )
    seconds = plain * ar + k.sharded * (rs + ag) + k.zero3 * m * units * (2 * ag_u + rs_u)
    exposed = (
        plain * hide("dp", ar, mid["b"], k.overlap)
        + k.sharded * (hide("dp", rs, mid["b"], k.overlap) + hide("param_gather", ag, mid["f"], k.overlap))
        + k.zero3 * fsdp
    )
    return seconds, exposed


def optimizer_step_bytes(params: object, grads: object, optimizer: object, layout) -> sympy.Expr:
    """Bytes the optimizer step reads and writes on one device: the weights, gradients and states it updates
    are read, the weights and states written back, ``2·(P + O) + 2·G``. Under ZeRO each device updates only its
    1/dp shard (then all-gathers the weights): ZeRO-1 holds whole weights and gradients but steps ⌈P/dp⌉ and
    ⌈G/dp⌉ of them (ZeRO-2 shards G already, ZeRO-3 P too; the states are sharded from ZeRO-1 on).

    >>> from costmodel.options import Layout
    >>> optimizer_step_bytes(16, 16, 8, Layout(dp=8, zero=1))  # 2·(⌈16/8⌉ + 8) + 2·⌈16/8⌉
    24
    """
    n = layout.dp
    p = roundup(sympy.sympify(params) / n) if layout.zero in (1, 2) else sympy.sympify(params)
    g = roundup(sympy.sympify(grads) / n) if layout.zero == 1 else sympy.sympify(grads)
    return 2 * (p + optimizer) + 2 * g


__all__ = ["dp_seconds", "optimizer_step_bytes"]
