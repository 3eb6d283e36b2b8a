"""Attention efficiency per fused kernel: FlashAttention-2, FlashAttention-3, cuDNN, PyTorch's SDPA.

The calibrated step runs a fused attention op's matmul FLOPs at ``efficiency.attention`` × peak, one share per
device (:mod:`costmodel.devices.efficiency`). Kernels differ more than that: on an H100, FlashAttention-2 reaches
about 35 % of the dense peak, FlashAttention-3 up to 75 %, cuDNN about 60 % at head dim 128 (Shah et al. 2024,
arXiv:2407.08608). ``--attention-kernel NAME`` picks one; its share per device, with its source, is
``costmodel/devices/data/attention.json``. A device the kernel was not measured on keeps its own share (said in
``time.attention_source``); a kernel that does not run there (FlashAttention-3 off Hopper) is refused.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

from ..errors import CostModelError
from ..expr import parse_number
from ..options.policies import ATTENTION_KERNELS
from .table import Device

WHERE = "costmodel/devices/data/attention.json"


def _table() -> dict:
    return json.loads(resources.files("costmodel").joinpath("devices/data/attention.json").read_text(encoding="utf-8"))


def base_name(dev: Device) -> str:
    """The table name a device was read as (a measured run's ``h100-sxm (run id)`` is an ``h100-sxm``)."""
    return dev.name.split(" (", 1)[0]


def with_attention(dev: Device, kernel: str | None) -> tuple[Device, str]:
    """``dev`` running fused attention with ``kernel`` (``None``: as it is), and where its share comes from.

    >>> from costmodel.devices.table import device
    >>> d, why = with_attention(device("h100-sxm"), "flash3")
    >>> d.attained.attention, why.split(",")[0]
    (3/4, 'flash3 on h100-sxm: Shah et al. 2024')
    """
    if kernel is None:
        return dev, f"the device's efficiency.attention ({dev.name})"
    entry = _table()["kernels"][kernel]
    name = base_name(dev)
    only = entry.get("only")
    if only is not None and name not in only:
        raise CostModelError(
            f"--attention-kernel {kernel}: {entry['about']} does not run on {name}; it runs on {', '.join(only)}"
        )
    share = entry["devices"].get(name)
    if share is None:
        return dev, f"{kernel} was not measured on {name}: the device's efficiency.attention"
    eff = dataclasses.replace(dev.attained, attention=parse_number(share, f"{WHERE}: {kernel}.{name}"))
    return dataclasses.replace(dev, efficiency=eff), f"{kernel} on {name}: {entry['source']}"


__all__ = ["ATTENTION_KERNELS", "WHERE", "base_name", "with_attention"]
