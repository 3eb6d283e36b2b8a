"""Model-state memory of training: precision policies × optimizers.

Bytes per parameter are *summed from components*, never typed in as a total:
weights + gradients + master weights + optimizer moments. With bf16 mixed
precision (bf16 weights and gradients, fp32 master weights) and AdamW (fp32 m
and v) the sum is 2 + 2 + 4 + 4 + 4 = 16. The lecture's table, 2 + 2 + 4 + 4 =
12, is the same without master weights (``bf16-pure``); accumulating gradients
in fp32 gives 18 (``bf16-mixed-fp32-grads``).

We count master weights under ``optimizer``, as the ZeRO paper does (its K = 12
for Adam is master weights + m + v), so ZeRO-1 shards exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .cost import dtype_bytes
from .errors import CostModelError, closest


@dataclass(frozen=True)
class Precision:
    """Which dtype holds each per-parameter training state (``None``: not kept)."""

    name: str
    weights: str
    grads: str
    master: str | None
    states: str  # optimizer moments
    activations: str
    about: str


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "fp32", "fp32", None, "fp32", "fp32", "everything in fp32"),
    Precision("bf16-mixed", "bf16", "bf16", "fp32", "fp32", "bf16",
              "bf16 weights and grads, fp32 master weights and moments (default)"),
    Precision("bf16-mixed-fp32-grads", "bf16", "fp32", "fp32", "fp32", "bf16",
              "as bf16-mixed, gradients accumulated in fp32"),
    Precision("bf16-pure", "bf16", "bf16", None, "fp32", "bf16",
              "bf16 weights and grads, no master copy, fp32 moments"),
    Precision("fp16-mixed", "fp16", "fp16", "fp32", "fp32", "fp16",
              "fp16 weights and grads (with loss scaling), fp32 master weights and moments"),
)}


@dataclass(frozen=True)
class Optimizer:
    """The per-parameter state tensors an optimizer keeps."""

    name: str
    states: tuple[str, ...]
    about: str


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("sgd", (), "plain SGD: no state"),
    Optimizer("sgd-momentum", ("momentum",), "SGD with a momentum buffer"),
    Optimizer("adam", ("m", "v"), "Adam: first and second moments"),
    Optimizer("adamw", ("m", "v"), "AdamW: first and second moments (decoupled weight decay)"),
    Optimizer("lion", ("m",), "Lion: one momentum buffer"),
)}


def precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise CostModelError(f"unknown precision policy {name!r}{closest(name, PRECISIONS)}; known: {sorted(PRECISIONS)}")
    return PRECISIONS[name]


def optimizer(name: str) -> Optimizer:
    if name not in OPTIMIZERS:
        raise CostModelError(f"unknown optimizer {name!r}{closest(name, OPTIMIZERS)}; known: {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def bytes_per_param(policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Integer]:
    """Bytes each parameter costs, by component.

    >>> parts = bytes_per_param("bf16-mixed", "adamw")
    >>> parts
    {'weights': 2, 'grads': 2, 'master': 4, 'm': 4, 'v': 4}
    >>> sum(parts.values())
    16
    """
    p, o = precision(policy), optimizer(opt)
    parts = {"weights": dtype_bytes(p.weights), "grads": dtype_bytes(p.grads)}
    if p.master is not None:
        parts["master"] = dtype_bytes(p.master)
    for state in o.states:
        parts[state] = dtype_bytes(p.states)
    return parts


def model_state_bytes(params: sympy.Expr, policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Expr]:
    """Model-state bytes for ``params`` parameters: ``params``, ``grads``, ``optimizer`` (master + moments)."""
    parts = bytes_per_param(policy, opt)
    optimizer_bytes = sum((v for k, v in parts.items() if k not in ("weights", "grads")), sympy.Integer(0))
    return {
        "params": params * parts["weights"],
        "grads": params * parts["grads"],
        "optimizer": params * optimizer_bytes,
    }
