"""Model-state memory of training: precision policies × optimizers.

Bytes per parameter are *summed from components*, never typed in as a total:
weights + gradients + master weights + optimizer moments. With bf16 mixed
precision (bf16 weights and gradients, fp32 master weights) and AdamW (fp32 m
and v) the sum is 2 + 2 + 4 + 4 + 4 = 16. The lecture's table, 2 + 2 + 4 + 4 =
12, is the same without master weights (``bf16-pure``); accumulating gradients
in fp32 gives 18 (``bf16-mixed-fp32-grads``).

We count master weights under ``optimizer``, as the ZeRO paper does (its K = 12
for Adam is master weights + m + v), so ZeRO-1 shards exactly that.

:func:`model_state` sums the same components over the weights *of a graph*:
frozen weights (``trainable=False``, LoRA's base weights) hold no gradient,
master copy or optimizer state; Adafactor's factored second moment is sized
from each weight's axes (rows + columns of a matrix); torch's per-tensor
``step`` counters are counted per weight tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
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
    compute_copy: str | None = None  # a low-precision weight copy kept for compute (fp8)


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
    Precision("fp8-mixed", "bf16", "bf16", "fp32", "fp32", "bf16",
              "fp8 matmuls (Transformer Engine): bf16 weights + a cached fp8 copy, bf16 grads, fp32 master "
              "and moments", compute_copy="fp8"),
    Precision("fp8-bf16-states", "bf16", "fp32", "fp32", "bf16", "bf16",
              "fp8 matmuls, fp32 grads and master, bf16 moments (DeepSeek-V3 report, sec. 3.3)",
              compute_copy="fp8"),
)}


@dataclass(frozen=True)
class Optimizer:
    """The state tensors an optimizer keeps.

    ``states`` are parameter-shaped (in the policy's ``states`` dtype);
    ``factored`` are Adafactor-style second moments (rows + columns of a matrix,
    the full vector for a vector); ``quantized`` are 8-bit block-wise states
    (1 byte per element plus one fp32 absmax per ``block`` elements);
    ``scalars`` are 0-dim fp32 tensors kept per weight tensor (torch's ``step``).
    """

    name: str
    states: tuple[str, ...]
    about: str
    factored: tuple[str, ...] = ()
    quantized: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()
    block: int = 2048


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("sgd", (), "plain SGD: no state"),
    Optimizer("sgd-momentum", ("momentum",), "SGD with a momentum buffer"),
    Optimizer("adam", ("m", "v"), "Adam: first and second moments", scalars=("step",)),
    Optimizer("adamw", ("m", "v"), "AdamW: first and second moments (decoupled weight decay)", scalars=("step",)),
    Optimizer("adam-amsgrad", ("m", "v", "v_max"), "Adam with amsgrad: also the running max of v",
              scalars=("step",)),
    Optimizer("adamw-amsgrad", ("m", "v", "v_max"), "AdamW with amsgrad", scalars=("step",)),
    Optimizer("adafactor", (), "Adafactor (torch.optim.Adafactor, no first moment): factored second moment",
              factored=("v",), scalars=("step",)),
    Optimizer("adam-8bit", (), "8-bit Adam (bitsandbytes, block-wise): int8 m and v + fp32 absmax per 2048",
              quantized=("m", "v")),
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


def bytes_per_param(policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Expr]:
    """Bytes each (trainable) parameter costs, by component.

    Adafactor's factored moment and torch's per-tensor ``step`` depend on the
    weights' shapes, not on the parameter count: see :func:`model_state`.

    >>> parts = bytes_per_param("bf16-mixed", "adamw")
    >>> parts
    {'weights': 2, 'grads': 2, 'master': 4, 'm': 4, 'v': 4}
    >>> sum(parts.values())
    16
    >>> bytes_per_param("bf16-mixed", "adam-8bit")["m"]  # 1 byte + a 4-byte absmax per 2048
    513/512
    """
    p, o = precision(policy), optimizer(opt)
    parts = {"weights": dtype_bytes(p.weights)}
    if p.compute_copy is not None:
        parts["compute_copy"] = dtype_bytes(p.compute_copy)
    parts["grads"] = dtype_bytes(p.grads)
    if p.master is not None:
        parts["master"] = dtype_bytes(p.master)
    for state in o.states:
        parts[state] = dtype_bytes(p.states)
    for state in o.quantized:
        parts[state] = dtype_bytes("int8") + sympy.Rational(dtype_bytes("fp32"), o.block)
    return parts


def _split(parts: dict[str, sympy.Expr]) -> dict[str, sympy.Expr]:
    """Per-parameter components grouped into ``params``, ``grads``, ``optimizer`` (master + states)."""
    return {
        "params": parts["weights"] + parts.get("compute_copy", 0),
        "grads": parts["grads"],
        "optimizer": sum((v for k, v in parts.items() if k not in ("weights", "compute_copy", "grads")),
                         sympy.Integer(0)),
    }


def model_state_bytes(params: sympy.Expr, policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Expr]:
    """Model-state bytes for ``params`` parameters: ``params``, ``grads``, ``optimizer`` (master + moments).

    A function of the parameter count only (every parameter trainable, no
    factored state); :func:`model_state` is the same from a graph's weights.

    >>> from sympy import Symbol
    >>> model_state_bytes(Symbol("Psi"), "fp16-mixed", "adam")  # the ZeRO paper: 2 + 2 + K, K = 12
    {'params': 2*Psi, 'grads': 2*Psi, 'optimizer': 12*Psi}
    """
    return {k: params * v for k, v in _split(bytes_per_param(policy, opt)).items()}


@dataclass(frozen=True)
class Weight:
    """One parameter tensor of a graph (per run of its op; ``count`` copies in all).

    ``rows``/``cols`` are the element counts of its output-side and input-side
    axes when it is a matrix (a matmul weight, an embedding table), else ``None``.
    """

    node: str
    name: str
    elements: sympy.Expr
    count: sympy.Expr
    trainable: bool
    rows: sympy.Expr | None = None
    cols: sympy.Expr | None = None
    axes: tuple[tuple[str, sympy.Expr], ...] = ()  # (axis, size) of each axis
    stack: sympy.Expr = sympy.Integer(1)  # matrices stacked along a selected axis (MoE experts)
    kind: str = ""  # the kind of op that holds it (a fused op's part)


def weights(G: nx.DiGraph) -> list[Weight]:
    """Every parameter tensor of ``G``, read off the ops' patterns and attributes.

    Matmul weights (``"b t d, d f -> b t f"``: rows = f, cols = d) and biases,
    norm gains and biases, gather tables; tied weights are counted at their
    owner. An op kind this does not know is one unfactored tensor of its
    ``params``.
    """
    from .analysis import op_nodes
    from .ops import has_weight, op_cost, weight_operand
    from .pattern import elements, parse

    out: list[Weight] = []
    for name, data in op_nodes(G):
        count = data["count"]
        for op in data["op"].attr("parts") or (data["op"],):  # a fused op: the weights of its parts
            trainable = op.attr("trainable", True) is not False
            size = op.size
            if has_weight(op):
                if not op.attr("tied"):
                    w = op.parsed.inputs[weight_operand(op)]
                    stacked = [a for a in w if a == op.attr("experts")]  # routed: one matrix per expert
                    out_axes = [a for a in w if a in op.parsed.output and a not in stacked]
                    in_axes = [a for a in w if a not in out_axes and a not in stacked]
                    out.append(Weight(name, "weight", elements(w, size), count, trainable,
                                      elements(tuple(out_axes), size), elements(tuple(in_axes), size),
                                      tuple((a, size[a]) for a in w), elements(tuple(stacked), size), op.kind))
                if op.attr("bias"):  # a bias over output axes (matmuls; a lookup table has none)
                    b_axes = parse(str(op.attr("bias"))).output
                    out.append(Weight(name, "bias", elements(b_axes, size), count, trainable,
                                      axes=tuple((a, size[a]) for a in b_axes)))
            elif op.kind == "norm":
                axis = str(op.attr("axis", op.parsed.inputs[0][-1]))
                for part in ("gain", "bias") if op.attr("bias", not op.attr("rms", False)) else ("gain",):
                    out.append(Weight(name, part, size[axis], count, trainable, axes=((axis, size[axis]),)))
            else:
                params = op_cost(op).params
                if params != 0:
                    out.append(Weight(name, "params", params, count, trainable))
    return out


def _factored(w: Weight) -> sympy.Expr:
    """Adafactor's second moment: rows + columns of each stacked matrix, the whole of a vector."""
    return w.elements if w.rows is None or w.cols in (None, 1) or w.rows == 1 else w.stack * (w.rows + w.cols)


def model_state(G: nx.DiGraph, policy: str = "bf16-mixed", opt: str = "adamw",
                share: Callable[[Weight], sympy.Expr] | None = None, scalars: bool = False) -> dict[str, sympy.Expr]:
    """Model-state bytes of ``G``'s weights, by component, summed from every weight tensor.

    Keys: ``weights``, ``compute_copy`` (fp8 policies), ``grads``, ``master``,
    one per optimizer state, and the groups ``params`` (weights + compute copy),
    ``grads``, ``optimizer`` (master + states), ``trainable`` and ``frozen``
    (parameter counts). Frozen weights cost only their ``weights`` bytes.
    ``share(weight)`` is the fraction of each weight one device holds (tensor,
    pipeline or expert parallelism: see :mod:`costmodel.parallel`); 1 by default.
    ``scalars``: count torch's 0-dim fp32 ``step`` per weight tensor (4 bytes
    each; the ZeRO paper's K and the report leave them out).

    >>> from costmodel import GraphBuilder, symbols as s
    >>> b = GraphBuilder("fc", b=s.B, d=s.d, f=s.d_ff)
    >>> _ = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    >>> st = model_state(b.graph, "fp32", "adafactor", scalars=True)
    >>> st["v"], st["step"]  # factored: rows + cols in fp32; one fp32 step per tensor
    (4*d + 4*d_ff, 4)
    """
    p, o = precision(policy), optimizer(opt)
    parts = bytes_per_param(policy, opt)
    zero = sympy.Integer(0)
    out: dict[str, sympy.Expr] = dict.fromkeys(("weights", "compute_copy", "grads", "master"), zero)
    counters = o.scalars if scalars else ()
    out.update(dict.fromkeys((*o.states, *o.quantized, *o.factored, *counters), zero))
    trainable = frozen = zero
    for w in weights(G):
        part = share(w) if share is not None else 1
        n = w.elements * w.count * part
        out["weights"] += n * parts["weights"]
        out["compute_copy"] += n * parts.get("compute_copy", 0)
        if not w.trainable:
            frozen += n
            continue
        trainable += n
        for key in ("grads", "master", *o.states, *o.quantized):
            out[key] += n * parts.get(key, 0)
        for key in o.factored:
            out[key] += _factored(w) * w.count * part * dtype_bytes(p.states)
        for key in counters:
            out[key] += w.count * dtype_bytes("fp32") * (1 if part != 0 else 0)  # a scalar per tensor: every shard keeps one
    out = {k: sympy.expand(v) for k, v in out.items()}
    out["params"] = out["weights"] + out["compute_copy"]
    out["optimizer"] = sympy.expand(sum((out[k] for k in ("master", *o.states, *o.quantized, *o.factored,
                                                           *counters)), zero))
    out["trainable"], out["frozen"] = sympy.expand(trainable), sympy.expand(frozen)
    return out


def policy_table(optimizers: tuple[str, ...] = ("sgd", "sgd-momentum", "adamw", "adam-8bit", "lion")) -> str:
    """Bytes per trainable parameter, by component, for every policy × ``optimizers`` (a Markdown table).

    ``docs/memory.md`` carries this table; a test fails when the two drift.
    """
    rows = ["| precision | optimizer | bytes per parameter, by component | total |", "| --- | --- | --- | --- |"]
    for p in PRECISIONS:
        for o in optimizers:
            parts = bytes_per_param(p, o)
            rows.append(f"| {p} | {o} | {' + '.join(f'{v} {k}' for k, v in parts.items())} | "
                        f"{sum(parts.values())} |")
    return "\n".join(rows)
