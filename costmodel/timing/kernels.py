"""The kernels one device runs for one micro-batch: each op's sizes on the device, its time, its collectives.

An op's sizes on one device follow from the layout, read off the graph (never off names):

* the batch axis ``B`` is the micro-batch ``b``;
* tensor parallelism divides one *split axis* of the op (heads, MLP width, vocabulary: the axes of
  :func:`~costmodel.memory.parallel.split_axes`), the one most of its operands carry (GQA's kv groups before
  the queries per group), so the FLOPs and every split operand are divided by ``tp`` once and a replicated
  input (the residual stream entering a column-parallel matmul) is not; with Megatron sequence parallelism an
  op with no split axis (norms, residual adds, dropout) is divided along the sequence instead;
* context parallelism divides one axis sized ``T`` (the queries; ring attention's keys pass by in turn);
* expert parallelism divides the ``experts`` axis (the expert weights; each device computes its experts' share
  of every token, so the FLOPs do not shrink).

The op's rule then gives its FLOPs and bytes at those sizes, and :mod:`.efficiency` its time: a contraction of
two operands is a GEMM (forward; backward the input- and weight-gradient GEMMs, whose shapes are the forward's
rotated), fused attention runs at the attention efficiency, every other op is memory-bound. Every divisor is a
sympy expression: numbers for one estimate, symbols for the planner.

Which dtype a GEMM runs in (:func:`gemm_dtype`): the layers' weight GEMMs (dense and routed experts) run in the
precision's compute copy — fp8 under ``fp8-mixed``, the autocast dtype under autocast — at that dtype's dense
peak and on its GEMM curve; everything else in the activations' dtype. That is Transformer Engine's scope in
Megatron-Core: ``fp8_autocast`` wraps the ``TransformerBlock``'s layers (``megatron/core/transformer/
transformer_block.py``), whose ``Linear`` and grouped expert GEMMs cast to fp8; the embedding, the output layer
(a plain ``ColumnParallelLinear``) and the attention core (``fp8_dpa`` off by default) stay in bf16. The casts
and scaling-factor updates fp8 adds are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx
import sympy

from ..devices.efficiency import Efficiency, gemm_seconds, kernel_seconds
from ..devices.table import Device
from ..formulas.quantities import maximum
from ..graph.cost import Zero, dtype_bytes
from ..graph.pattern import elements
from ..graph.registry import Op, data_operands, op_cost, weight_operand, weight_use
from ..options import Counting, Options
from ..options.policies import precision
from ..symbols import B, T


@dataclass(frozen=True)
class Split:
    """How one device's share of the work is cut: divisors (expressions) and the axes they divide."""

    micro: sympy.Expr  # sequences per micro-batch (B → b)
    tp: sympy.Expr
    cp: sympy.Expr
    ep: sympy.Expr
    seq_tp: sympy.Expr  # what replicated ops' sequence is divided by: tp with Megatron SP, else 1
    split: frozenset[str]  # axes tensor parallelism splits


def _pick(op: Op, axes: list[str]) -> str | None:
    """Of ``axes`` (all in ``op``), the one most operands carry; ties: the first in the pattern."""
    if not axes:
        return None
    p = op.parsed
    operands = (*p.inputs, p.output)
    order = [a for a in p.axes if a in axes]
    return max(order, key=lambda a: (sum(a in o for o in operands), -order.index(a)))


def divisors(op: Op, s: Split) -> dict[str, sympy.Expr]:
    """Axis → what it is divided by on one device (see the module notes)."""
    sizes = op.size
    out: dict[str, sympy.Expr] = {}
    tp_axis = _pick(op, [a for a in sizes if a in s.split])
    seq = [a for a, v in sizes.items() if v == T]
    cp_axis = _pick(op, seq)
    if tp_axis is not None:
        out[tp_axis] = s.tp
    if cp_axis is not None:
        out[cp_axis] = out.get(cp_axis, 1) * s.cp * (s.seq_tp if tp_axis is None else 1)
    experts = op.attr("experts")
    if experts and str(experts) in sizes:
        out[str(experts)] = out.get(str(experts), 1) * s.ep
    return out


def on_device(op: Op, div: Mapping[str, sympy.Expr], micro: sympy.Expr) -> Op:
    """``op`` with its sizes as one device runs it (parts of a fused op and attention's epilogue too)."""

    def size(a: str, v: sympy.Expr) -> sympy.Expr:
        return v.xreplace({B: micro}) / div.get(a, 1)

    attrs = []
    for k, v in op.attrs:
        if isinstance(v, tuple) and v and all(isinstance(x, Op) for x in v):
            v = tuple(on_device(x, div, micro) for x in v)
        attrs.append((k, v))
    return Op(op.kind, op.pattern, tuple((a, size(a, v)) for a, v in op.sizes), op.dtype, tuple(attrs))


def _gemm(op: Op, counting: Counting) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr] | None:
    """Element counts (|A|, |B|, |C|) of the GEMM an op runs: a contraction of two operands (a fused op's
    first such part); ``None`` for anything else (fused attention, convolutions)."""
    for part in op.attr("parts") or (op,):
        p = part.parsed
        if len(p.inputs) == 2 and op_cost(part, counting).forward.matmul_flops != 0:
            a, b = p.inputs
            return elements(a, part.size), elements(b, part.size), elements(p.output, part.size)
    return None


@dataclass(frozen=True)
class OpTime:
    """Seconds of one run of an op on one device: forward and backward kernels."""

    forward: sympy.Expr
    backward: sympy.Expr


def gemm_dtype(options: Options, dtype: str) -> str:
    """The dtype the layers' weight GEMMs run in (module notes): the precision's compute copy (``fp8-mixed``:
    ``"fp8"``), else ``dtype``, the activations'. An explicit ``--dtype`` ("whose peak") times every op at it.

    >>> gemm_dtype(Options.make(precision="fp8-mixed"), "bf16"), gemm_dtype(Options.make(), "bf16")
    ('fp8', 'bf16')
    """
    if options.dtype is not None:
        return options.dtype
    return precision(options.precision).compute_copy or dtype


def in_compute_copy(op: Op, stage: str) -> bool:
    """Whether ``op`` runs in the precision's compute copy (:func:`gemm_dtype`): a weight GEMM (dense or routed
    experts) of the layers, ``stage`` ``"block"`` (module notes: Transformer Engine's scope)."""
    return stage == "block" and weight_use(op) in ("dense", "routed")


def op_time(
    op: Op,
    dev: Device,
    eff: Efficiency,
    dtype: str,
    counting: Counting,
    launch_s: sympy.Expr = Zero,
    gemm: str | None = None,
) -> OpTime:
    """Forward and backward time of ``op`` (already sized for the device), each at least its kernels' host
    launches, ``kernels × launch_s`` (:mod:`costmodel.timing.host`). ``gemm``: the dtype the op's GEMM runs in,
    given where :func:`in_compute_copy` (default ``dtype``)."""
    t = _op_time(op, dev, eff, dtype, counting, gemm or dtype)
    if launch_s == 0:
        return t
    return OpTime(
        _floor(t.forward, 1, launch_s, eff), _floor(t.backward, _backward_kernels(op, counting), launch_s, eff)
    )


def _floor(seconds: sympy.Expr, kernels: int, launch_s: sympy.Expr, eff: Efficiency) -> sympy.Expr:
    """``max(seconds, kernels × launch_s)``. A kernel's time already holds its overhead t₀ (≥ every curve's), so
    a launch no longer than the shortest t₀ never binds and the expression is left as it is."""
    t0 = min([eff.overhead_s, *(c.overhead_s for c in eff.gemm.values())])
    if seconds == 0 or launch_s <= t0:
        return seconds
    return maximum(seconds, kernels * launch_s)


def _backward_kernels(op: Op, counting: Counting) -> int:
    """Kernels of an op's backward: one per fused part and one more, two for a GEMM with a weight gradient."""
    n = 1 + len(op.attr("parts") or ())
    c = op_cost(op, counting)
    if c.forward.matmul_flops != 0 and _gemm(op, counting) is not None:
        n += 1 if sympy.expand(c.backward.matmul_flops - 2 * c.forward.matmul_flops) == 0 else 0
    return n


def _op_time(op: Op, dev: Device, eff: Efficiency, dtype: str, counting: Counting, gemm_dt: str) -> OpTime:
    c = op_cost(op, counting)
    f, b = c.forward, c.backward
    peak = dev.peak(dtype)
    vector = dev.peak("fp32") if "fp32" in dev.peak_flops else peak  # non-matmul FLOPs: the vector units
    bw = dev.memory_bandwidth
    t0 = eff.overhead_s
    gemm = _gemm(op, counting) if f.matmul_flops != 0 else None
    kernels_b = 1 + len(op.attr("parts") or ())
    if gemm is not None:
        peak, curve = dev.peak(gemm_dt), eff.curve(gemm_dt)
        A, Bm, C = gemm
        fwd_c = gemm_seconds(f.matmul_flops, A, Bm, C, peak, curve)
        dgrad = gemm_seconds(f.matmul_flops, C, Bm, A, peak, curve)  # dA = dC·Bᵀ: (M, K) from (M, N)·(N, K)
        wgrad = gemm_seconds(f.matmul_flops, A, C, Bm, peak, curve)  # dB = Aᵀ·dC: (K, N) from (K, M)·(M, N)
        if sympy.expand(b.matmul_flops - 2 * f.matmul_flops) == 0:
            bwd_c, kernels_b = dgrad + wgrad, kernels_b + 1
        elif sympy.expand(b.matmul_flops - f.matmul_flops) == 0:
            bwd_c = dgrad  # a frozen weight: no weight gradient
        else:
            bwd_c = b.matmul_flops / (peak * curve.efficiency)
        t0 = curve.overhead_s
    elif f.matmul_flops != 0:  # fused attention: its matmuls (and backward's recomputed scores) at one rate
        rate = peak * eff.attention
        fwd_c, bwd_c = f.matmul_flops / rate, (b.matmul_flops + b.recompute_flops) / rate
        return OpTime(kernel_seconds(fwd_c, f.bytes, bw, eff, t0), kernel_seconds(bwd_c, b.bytes, bw, eff, t0))
    else:
        fwd_c = bwd_c = Zero
    fwd_c += (f.flops - f.matmul_flops + f.recompute_flops) / vector
    bwd_c += (b.flops - b.matmul_flops + b.recompute_flops) / vector
    forward = kernel_seconds(fwd_c, f.bytes, bw, eff, t0)
    backward = kernel_seconds(bwd_c, b.bytes, bw, eff, t0, kernels_b) if (b.flops != 0 or b.bytes != 0) else Zero
    return OpTime(forward, backward)


# -- collectives of one op --------------------------------------------------------------------------------


def tp_collectives(G: nx.DiGraph, split: frozenset[str]) -> dict[str, list[tuple[str, Op]]]:
    """Megatron's tensor-parallel all-reduces, per op node: ``("forward", op)`` for a row-parallel matmul's
    (or a vocab-parallel lookup's) output, ``("backward", op)`` for the input gradient of each distinct input
    of column-parallel matmuls. The bytes are the reduced tensor's (read from the op by :func:`tp_bytes`)."""
    out: dict[str, list[tuple[str, Op]]] = {}
    seen: set[str] = set()
    if not split:
        return out
    for name, data in G.nodes(data=True):
        op = data.get("op")
        if op is None or weight_use(op) not in ("dense", "table"):
            continue
        x, w = data_operands(op)[0], op.parsed.inputs[weight_operand(op)]
        w_split = any(a in split for a in w)
        if w_split and not any(a in split for a in op.parsed.output):
            out.setdefault(name, []).append(("forward", op))
        elif w_split and not any(a in split for a in x) and weight_use(op) == "dense" and data["inputs"][0] not in seen:
            seen.add(data["inputs"][0])
            out.setdefault(name, []).append(("backward", op))
    return out


def tp_bytes(op: Op, phase: str, micro: sympy.Expr, cp: sympy.Expr) -> sympy.Expr:
    """Bytes of the tensor one tensor-parallel all-reduce reduces (per micro-batch, this device's sequence)."""
    axes = op.parsed.output if phase == "forward" else data_operands(op)[0]
    return elements(axes, op.size).xreplace({B: micro}) * dtype_bytes(op.dtype) / cp


def kv_bytes(op: Op, split: frozenset[str], micro: sympy.Expr, tp: sympy.Expr) -> sympy.Expr:
    """Bytes of a key or value tensor (tagged ``kv_cache``) one device holds, for a ring pass."""
    out = elements(op.parsed.output, op.size).xreplace({B: micro}) * dtype_bytes(op.dtype)
    return out / tp if any(a in split for a in op.parsed.output) else out


def routed_bytes(op: Op, micro: sympy.Expr) -> sympy.Expr:
    """Bytes of the routed tokens an expert matmul sends in one all-to-all (dispatch: its input × the route
    copies; combine: its output)."""
    route = str(op.attr("route"))
    dispatch = route in op.parsed.output
    routed = op.parsed.inputs[0] if dispatch else op.parsed.output
    return (elements(tuple(routed), op.size) * op.size[route]).xreplace({B: micro}) * dtype_bytes(op.dtype)
