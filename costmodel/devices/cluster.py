"""The cluster a device sits in, as an input of its own: devices per node and the scale-out network.

A device's table entry names its chip (peaks, memory, NVLink) and a typical node (``network.node_size``, one NIC
per device). The same chip is racked many ways: one 400 Gb/s NIC per GPU (DGX H100: 50 GB/s per GPU), four
200 Gb/s NICs per 8-GPU node (100 GB/s per node: 12.5 GB/s per GPU), a 72-GPU NVLink domain (GB200 NVL72). A
:class:`Cluster` says which, without writing a hardware file:

* ``gpus_per_node``: the devices one scale-up domain holds (``--gpus-per-node``; the table's ``node_size``
  otherwise);
* ``scale_out``: the network bandwidth per direction in GB/s (``--scale-out 50``: per device; ``--scale-out
  100/node``: per node, shared by its devices, so each has 100 / gpus_per_node);
* or both in a small JSON file (``--cluster FILE``): ``{"gpus_per_node": 8, "scale_out_gbps": "100",
  "scale_out_per": "node", "source": "..."}``; a flag given beside it wins.

Every collective is then priced on the tiers its group crosses (:mod:`costmodel.devices.network`): a group of
``n`` devices ``stride`` ranks apart has ``g = min(n, max(1, node/stride))`` members in a node and, across nodes,
``min(scale-up, g × scale-out)`` per member. So TP 16 over two 8-GPU nodes crosses the network at 8 NICs' worth,
and inside one 16-GPU node (``--gpus-per-node 16``) stays on NVLink.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import sympy

from ..errors import CostModelError
from ..options.records import SCALE_OUT_PER as PER
from ..options.records import parse_scale_out
from .table import Device

_KEYS = ("gpus_per_node", "scale_out_gbps", "scale_out_per", "source")


@dataclass(frozen=True)
class Cluster:
    """Devices per node and the scale-out bandwidth (GB/s per direction, per ``per``); ``None``: the device's."""

    gpus_per_node: int | None = None
    scale_out_gbps: Fraction | None = None
    per: str = "gpu"
    source: str | None = None

    def __post_init__(self) -> None:
        n = self.gpus_per_node
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4096):
            raise CostModelError(f"cluster: gpus_per_node must be a whole number in [1, 4096], received {n!r}")
        if self.scale_out_gbps is not None and not self.scale_out_gbps > 0:
            raise CostModelError(f"cluster: scale_out must be a positive GB/s, received {self.scale_out_gbps!r}")
        if self.per not in PER:
            raise CostModelError(f"cluster: scale_out_per must be 'gpu' or 'node', received {self.per!r}")

    @property
    def given(self) -> bool:
        return self.gpus_per_node is not None or self.scale_out_gbps is not None


def read_cluster(path: str | Path) -> Cluster:
    """A cluster file: a JSON object of ``gpus_per_node``, ``scale_out_gbps`` (a decimal string or an integer),
    ``scale_out_per`` (``gpu`` or ``node``) and ``source`` (text), each optional."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise CostModelError(f"--cluster {path}: cannot read it ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise CostModelError(f"--cluster {path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict):
        raise CostModelError(f"--cluster {path}: expected a JSON object of {', '.join(_KEYS)}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise CostModelError(f"--cluster {path}: unknown key {unknown[0]!r}; expected {', '.join(_KEYS)}")
    gbps, per = None, data.get("scale_out_per", "gpu")
    if "scale_out_gbps" in data:
        v = data["scale_out_gbps"]
        if isinstance(v, (bool, float)) or not isinstance(v, (int, str)):
            raise CostModelError(f"--cluster {path}: scale_out_gbps is an integer or a decimal string, received {v!r}")
        gbps, _ = parse_scale_out(v)
    return Cluster(data.get("gpus_per_node"), gbps, per, data.get("source"))


def cluster_of(options) -> Cluster:
    """The cluster ``options`` describe: ``options.cluster`` (a file) under the flags ``gpus_per_node`` and
    ``scale_out`` (text: ``"50"`` or ``"100/node"``)."""
    base = read_cluster(options.cluster) if options.cluster is not None else Cluster()
    gpus = options.gpus_per_node if options.gpus_per_node is not None else base.gpus_per_node
    gbps, per = (base.scale_out_gbps, base.per) if options.scale_out is None else parse_scale_out(options.scale_out)
    return Cluster(gpus, gbps, per, base.source)


def on_cluster(dev: Device, cluster: Cluster) -> Device:
    """``dev`` in ``cluster``: its ``node_size`` and scale-out bandwidth per device replaced where given (a
    per-node figure divided among the node's devices)."""
    if not cluster.given:
        return dev
    eff = dev.attained
    node = cluster.gpus_per_node if cluster.gpus_per_node is not None else eff.node_size
    out = dev.scale_out_bandwidth
    if cluster.scale_out_gbps is not None:
        gbps = sympy.Rational(cluster.scale_out_gbps.numerator, cluster.scale_out_gbps.denominator)
        out = gbps * 10**9 / (node if cluster.per == "node" else 1)
    about = f"{node} a node, scale-out {float(out) / 1e9:g} GB/s per device"
    sources = {**dev.sources, "cluster": cluster.source or "given (--gpus-per-node, --scale-out or --cluster)"}
    return dataclasses.replace(
        dev,
        scale_out_bandwidth=out,
        sources=sources,
        efficiency=dataclasses.replace(eff, node_size=node),
        about=f"{dev.about}; {about}",
    )


__all__ = ["Cluster", "PER", "cluster_of", "on_cluster", "parse_scale_out", "read_cluster"]
