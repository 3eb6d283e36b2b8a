"""The host's share of a step: a kernel cannot start before the CPU has dispatched it.

Each op's forward and backward run at ``max(kernel time, kernels × launch_s)``: a small kernel (a norm at
micro-batch 1) is as long as its launch, however little it moves. ``layer_s`` is added per layer, per pass, per
micro-batch (hooks, Python between the kernels), ``step_s`` once per step. CUDA graphs (``--cuda-graphs``)
replay the captured kernels with one launch: no floor, no per-layer host time (the per-step time stays).

The numbers are data, per software stack, each with its source: ``costmodel/devices/data/host.json``
(``default`` without ``--stack``). ``--launch-us X`` replaces ``launch_s`` (a measured trace's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import sympy

from ..errors import CostModelError
from ..expr import parse_number

WHERE = "costmodel/devices/data/host.json"


@dataclass(frozen=True)
class Host:
    """Host overheads in seconds: per kernel launch, per layer per pass per micro-batch, per step."""

    launch_s: sympy.Expr
    layer_s: sympy.Expr
    step_s: sympy.Expr
    source: str


def _table() -> dict:
    return json.loads(resources.files("costmodel").joinpath("devices/data/host.json").read_text(encoding="utf-8"))


def host_of(stack: str | None = None, *, cuda_graphs: bool = False, launch_us: object = None) -> Host:
    """The host overheads of ``stack`` (its entry, else the default), under CUDA graphs when ``cuda_graphs``.

    >>> host_of().launch_s, host_of(cuda_graphs=True).launch_s
    (1/200000, 0)
    """
    data = _table()
    entry = data["stacks"].get(stack, data["default"]) if stack is not None else data["default"]
    num = {k: parse_number(entry[k], f"{WHERE}: {k}") for k in ("launch_s", "layer_s", "step_s")}
    source = entry["source"]
    if launch_us is not None:
        num["launch_s"] = sympy.Rational(str(launch_us)) / 10**6
        source = f"launch_s {launch_us} µs given (--launch-us); " + source
    if any(v < 0 for v in num.values()):
        raise CostModelError(f"{WHERE}: host overheads are seconds >= 0, received {num}")
    if cuda_graphs:
        num["launch_s"], num["layer_s"] = sympy.Integer(0), sympy.Integer(0)
        source = "CUDA graphs: no launch floor, no per-layer host time; " + source
    return Host(num["launch_s"], num["layer_s"], num["step_s"], source)


__all__ = ["Host", "WHERE", "host_of"]
