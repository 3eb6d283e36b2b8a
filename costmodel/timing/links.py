"""Which link carries each kind of traffic, and the seconds a volume takes on it (bandwidth only)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import sympy

from ..devices.table import Device
from ..errors import CostModelError


def _positive(x: object, what: str) -> sympy.Rational:
    try:
        v = (
            sympy.Rational(x.numerator, x.denominator)
            if isinstance(x, Fraction)
            else sympy.Rational(x)
            if not isinstance(x, float)
            else None
        )
    except (TypeError, ValueError):
        v = None
    if v is None or not v > 0:
        raise CostModelError(f"{what}: expected a positive exact number, received {x!r}")
    return v


def comm_time(nbytes: object, bandwidth: object) -> sympy.Expr:
    """Seconds to move ``nbytes`` (a number or an expression) over a link of ``bandwidth`` bytes/s per
    direction (bandwidth-only: no latency term)."""
    return sympy.sympify(nbytes) / _positive(bandwidth, "link bandwidth")


#: Which link carries each kind of traffic: tensor and sequence parallel groups inside a node (NVLink, ICI),
#: data and pipeline parallel groups across nodes (the network). Override with the ``comm_links`` option.
LINKS = {
    "tp": "scale_up",
    "sp": "scale_up",
    "ep": "scale_up",
    "dp": "scale_out",
    "pp": "scale_out",
    "scale_up": "scale_up",
    "scale_out": "scale_out",
}


def comm_seconds(
    volumes: Mapping[str, object], dev: Device, links: Mapping[str, str] = LINKS
) -> dict[str, sympy.Rational]:
    """Seconds each kind of traffic takes on its link (bytes per device per step → s).

    A device without a network bandwidth in its table (TPU v4) sends everything
    over its scale-up fabric.
    """
    out = {}
    for kind, nbytes in volumes.items():
        if kind not in links:
            raise CostModelError(f"communication kind {kind!r}: expected one of {', '.join(sorted(links))}")
        scope = links[kind]
        if scope == "scale_out" and dev.scale_out_bandwidth is None:
            scope = "scale_up"
        out[kind] = comm_time(nbytes, dev.link(scope))
    return out


__all__ = ["LINKS", "comm_seconds", "comm_time"]
