"""Collectives on network tiers: which tier a parallel group spans, and how long a collective takes on it.

Placement (Megatron-LM's rank order): tensor-parallel ranks are adjacent, then context-parallel, then data
parallel (expert parallel inside it), then pipeline stages. A group of ``n`` devices whose members are
``stride`` ranks apart has ``g = min(n, max(1, node_size / stride))`` members in each node of ``node_size``:

* ``n ≤ g``: the whole group is inside a node: the scale-up tier (NVLink) at its bus bandwidth;
* otherwise it crosses nodes. Each node's ``g`` members reach the other nodes through their own NICs (a
  rail-optimised fabric: one NIC per device), so the group's bus bandwidth per member is
  ``min(scale-up, g × scale-out)``: TP 8 stays in a node, DP with one member per node runs at one NIC,
  TP 16 crosses a node boundary at 8 NICs.

Collectives (ring algorithms; bytes ``S`` is the data each member holds, per direction):

=================  ==========================  ===========================================
collective         bytes each member sends     factor (× S)
=================  ==========================  ===========================================
all-reduce         2(n−1)/n · S                :data:`FACTORS` ``"all_reduce"``
reduce-scatter     (n−1)/n · S                 ``"reduce_scatter"``
all-gather         (n−1)/n · S                 ``"all_gather"``
all-to-all         (n−1)/n · S                 ``"all_to_all"``
point-to-point     S                           ``"p2p"``
=================  ==========================  ===========================================

Time of one collective: ``latency + factor·S / (bus bandwidth · efficiency)``; a group of one sends nothing.
Every function takes sizes as sympy expressions (degrees may be symbols), so the planner compiles them.
"""

from __future__ import annotations

import sympy

from ..errors import CostModelError
from ..formulas.quantities import choose
from .efficiency import Efficiency
from .table import Device

FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "p2p": lambda n: sympy.Integer(1),
}


def _e(x: object) -> sympy.Expr:
    return sympy.sympify(x)


def per_node(n: object, stride: object, node_size: int) -> sympy.Expr:
    """Members of a group of ``n`` (``stride`` ranks apart) inside one node: ``min(n, max(1, node/stride))``."""
    return sympy.Min(_e(n), sympy.Max(1, sympy.Integer(node_size) / _e(stride)))


def bus_bandwidth(dev: Device, eff: Efficiency, n: object, stride: object) -> sympy.Expr:
    """Attained bus bandwidth per member (bytes/s) of a group of ``n`` devices ``stride`` ranks apart."""
    up = dev.link("scale_up") * eff.scale_up.efficiency
    out_bw = dev.scale_out_bandwidth if dev.scale_out_bandwidth is not None else dev.link("scale_up")
    out = out_bw * eff.scale_out.efficiency
    g = per_node(n, stride, eff.node_size)
    return choose(g, _e(n), up, sympy.Min(up, g * out))


def latency(eff: Efficiency, n: object, stride: object) -> sympy.Expr:
    """Latency of one collective: the scale-up tier's inside a node, the scale-out tier's across nodes."""
    g = per_node(n, stride, eff.node_size)
    return choose(g, _e(n), eff.scale_up.latency_s, eff.scale_out.latency_s)


def collective_seconds(
    kind: str, nbytes: object, dev: Device, eff: Efficiency, n: object, stride: object, count: object = 1
) -> sympy.Expr:
    """Seconds of ``count`` collectives of ``kind`` over ``nbytes`` each (0 for a group of one).

    >>> from costmodel.devices.table import device
    >>> from costmodel.devices.efficiency import GENERIC
    >>> float(collective_seconds("all_reduce", 10**9, device("h100-sxm"), GENERIC, 8, 1))  # 1.75 GB at 360 GB/s
    0.004886111111111111
    """
    if kind not in FACTORS:
        raise CostModelError(f"collective {kind!r}: expected one of {', '.join(FACTORS)}")
    n = _e(n)
    if n == 1:
        return sympy.Integer(0)
    alive = choose(n, 2, 1, 0) if not n.is_number else 1  # a symbolic degree of 1 sends nothing
    each = latency(eff, n, stride) + FACTORS[kind](n) * _e(nbytes) / bus_bandwidth(dev, eff, n, stride)
    return _e(count) * alive * each


def strides(tp: object, cp: object, dp: object) -> dict[str, sympy.Expr]:
    """Rank distance between neighbours of each group (Megatron order: tp, cp, dp (ep inside), pp)."""
    tp, cp, dp = _e(tp), _e(cp), _e(dp)
    return {"tp": sympy.Integer(1), "cp": tp, "sp": tp, "dp": tp * cp, "ep": tp * cp, "pp": tp * cp * dp}
