"""Element types and their sizes in bytes (no sympy here: options and the cache read it at start-up)."""

from __future__ import annotations

from .errors import CostModelError, closest

#: Bytes per element of each dtype we name. ``bool`` holds dropout masks.
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "bool": 1,
}


def check_dtype(dtype: object, what: str = "dtype") -> str:
    """``dtype`` if it is a dtype costmodel names, else a :class:`CostModelError` suggesting the closest."""
    if not isinstance(dtype, str):
        raise CostModelError(f"{what}: expected a name such as 'bf16', received {dtype!r}")
    if dtype not in DTYPE_BYTES:
        raise CostModelError(
            f"unknown {what} {dtype!r}{closest(dtype, DTYPE_BYTES)}; expected one of {sorted(DTYPE_BYTES)}"
        )
    return dtype
