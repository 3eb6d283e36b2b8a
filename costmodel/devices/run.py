"""The device of a run, prepared once: the table's (or a file's) entry, sustaining its software stack's rate
(:func:`~costmodel.devices.table.with_stack`), in its cluster (:mod:`.cluster`), with its attention kernel
(:mod:`.attention`)."""

from __future__ import annotations

from .attention import with_attention
from .cluster import cluster_of, on_cluster
from .table import Device, device, with_stack


def run_device(options) -> Device:
    """The device ``options`` describe (``hardware``, ``stack``, the cluster flags, ``attention_kernel``)."""
    dev = on_cluster(with_stack(device(options.hardware), options.stack), cluster_of(options))
    return with_attention(dev, options.attention_kernel)[0]


__all__ = ["run_device"]
