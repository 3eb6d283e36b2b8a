"""The roofline model: which of compute or memory bounds each op, and a step as their sum.

An op that does F FLOPs and moves Q bytes on a device with peak P FLOP/s and
memory bandwidth W bytes/s takes at least ``max(F/P, Q/W)`` seconds. Its
arithmetic intensity I = F/Q decides which term wins: below the ridge point
I* = P/W it is memory-bound (attainable FLOP/s = I·W), above it compute-bound
(attainable = P). A step's lower bound is the sum of its ops' bounds (kernels
run one after another), not the bound of the summed costs.

Numbers are exact Rationals; only the CLI turns them into floats.

>>> from costmodel.kit import GraphBuilder, symbols as s
>>> from costmodel.devices.table import device
>>> b = GraphBuilder("one", b=s.B, d=s.d)
>>> _ = b.matmul("w", b.input("x", "b d", dtype="bf16"), "b d, d e -> b e", e=s.d)
>>> [r] = roofline(b.graph, {s.B: 1, s.d: 4096}, device("h100-sxm"))
>>> r.bound, r.intensity  # batch 1: 2d² FLOPs over 2(d² + 2d) bytes: d/(d + 2)
('memory', 2048/2049)
>>> [r] = roofline(b.graph, {s.B: 4096, s.d: 4096}, device("h100-sxm"))
>>> r.bound
'compute'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx
import sympy

from ..devices.table import Device
from ..errors import CostModelError
from ..formulas.quantities import maximum
from ..graph.analysis import evaluate, op_nodes, structure
from ..graph.cost import Cost
from ..graph.passes import flash_attention, fuse_elementwise
from ..graph.registry import op_cost
from ..options import Counting
from .kernels import in_compute_copy

PHASES = ("forward", "backward", "training")


@dataclass(frozen=True)
class Bound:
    """Roofline of one op (all its runs in a step) or of a sum of ops.

    ``compute_s`` = FLOPs (with recompute) / peak, ``memory_s`` = bytes /
    bandwidth, ``time_s`` = the lower bound: their max for one kernel, the sum of
    the kernels' maxima for a sum.
    """

    name: str
    kind: str
    count: int
    flops: sympy.Rational
    bytes: sympy.Rational
    compute_s: sympy.Rational
    memory_s: sympy.Rational
    time_s: sympy.Rational
    peak: sympy.Rational
    bandwidth: sympy.Rational

    @property
    def intensity(self) -> sympy.Expr:
        """FLOPs per byte (∞ for an op that moves nothing)."""
        return self.flops / self.bytes if self.bytes else sympy.oo

    @property
    def ridge(self) -> sympy.Rational:
        return self.peak / self.bandwidth

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``: the side whose time is larger (``"none"`` for a free op)."""
        if self.compute_s == 0 and self.memory_s == 0:
            return "none"
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def attainable(self) -> sympy.Expr:
        """Attainable FLOP/s: min(peak, intensity × bandwidth)."""
        return sympy.Min(self.peak, self.intensity * self.bandwidth)

    def __add__(self, other: Bound) -> Bound:
        return Bound(
            "total",
            "",
            1,
            self.flops + other.flops,
            self.bytes + other.bytes,
            self.compute_s + other.compute_s,
            self.memory_s + other.memory_s,
            self.time_s + other.time_s,
            self.peak,
            self.bandwidth,
        )


def bound(
    cost: Cost, peak: sympy.Rational, bandwidth: sympy.Rational, name: str = "", kind: str = "", count: int = 1
) -> Bound:
    """Roofline of one kernel with exact ``cost`` (recompute FLOPs are hardware work: counted)."""
    flops = sympy.Rational(cost.flops + cost.recompute_flops)
    moved = sympy.Rational(cost.bytes)
    compute, memory = flops / peak, moved / bandwidth
    return Bound(name, kind, count, flops, moved, compute, memory, max(compute, memory), peak, bandwidth)


@dataclass(frozen=True)
class OpBound:
    """The roofline of one op (all its runs in a step) as expressions of the graph's symbols."""

    name: str
    kind: str
    count: sympy.Expr
    flops: sympy.Expr
    bytes: sympy.Expr
    compute_s: sympy.Expr
    memory_s: sympy.Expr
    time_s: sympy.Expr  # max(compute, memory) per kernel; forward and backward are separate kernels
    peak: sympy.Rational


def op_bounds(
    G: nx.DiGraph,
    dev: Device,
    *,
    phase: str = "forward",
    dtype: str | None = None,
    counting: Counting = Counting(),
    gemm: str | None = None,
) -> list[OpBound]:
    """Per-op roofline of one step of ``G``, symbolic: the one derivation behind :func:`roofline` and the
    time of an estimate. ``phase``: ``"forward"``, ``"backward"`` or ``"training"`` (forward and backward
    run as separate kernels: their bounds add). ``dtype``: whose peak to use (default: each op's dtype).
    ``gemm``: whose peak the layers' weight matmuls use (the precision's compute copy,
    :func:`costmodel.timing.kernels.gemm_dtype`; default as every other op). Free ops (views) are left out.
    """
    if phase not in PHASES:
        raise CostModelError(f"roofline: phase must be one of {', '.join(PHASES)}, received {phase!r}")
    rows = []
    bw = dev.memory_bandwidth
    for name, data in op_nodes(G):
        op = data["op"]
        own = dtype or op.dtype
        if gemm is not None and in_compute_copy(op, structure(G).stage(name)):
            own = gemm  # a layer's weight matmul runs in the compute copy (Transformer Engine's fp8 scope)
        peak = dev.peak(own)  # an error names the dtypes the device has
        count = data["count"]
        cost = op_cost(op, counting)
        passes = {"forward": [cost.forward], "backward": [cost.backward], "training": [cost.forward, cost.backward]}[
            phase
        ]
        flops = [sympy.expand((c.flops + c.recompute_flops) * count) for c in passes]
        moved = [sympy.expand(c.bytes * count) for c in passes]
        if all(f == 0 for f in flops) and all(m == 0 for m in moved):
            continue
        compute = [f / peak for f in flops]
        memory = [m / bw for m in moved]
        label = _fused_label(op.attr("names")) if op.attr("names") else name
        rows.append(
            OpBound(
                label,
                op.kind,
                count,
                sympy.Add(*flops),
                sympy.Add(*moved),
                sympy.Add(*compute),
                sympy.Add(*memory),
                sympy.Add(*(maximum(c, m) for c, m in zip(compute, memory))),
                peak,
            )
        )
    return rows


def roofline(
    G: nx.DiGraph,
    values: Mapping,
    dev: Device,
    *,
    phase: str = "forward",
    dtype: str | None = None,
    counting: Counting = Counting(),
) -> list[Bound]:
    """Per-op roofline of one step of ``G`` with ``values`` for its symbols (:func:`op_bounds`, evaluated)."""
    rows = []
    for b in op_bounds(G, dev, phase=phase, dtype=dtype, counting=counting):
        num = {
            f: evaluate(getattr(b, f), values, f"{f} of {b.name}")
            for f in ("count", "flops", "bytes", "compute_s", "memory_s", "time_s")
        }
        if num["flops"] == 0 and num["bytes"] == 0:
            continue
        rows.append(
            Bound(
                b.name,
                b.kind,
                int(num["count"]),
                num["flops"],
                num["bytes"],
                num["compute_s"],
                num["memory_s"],
                num["time_s"],
                b.peak,
                dev.memory_bandwidth,
            )
        )
    return rows


def _fused_label(names: tuple[str, ...]) -> str:
    """``("layers.attn.proj", "layers.attn_residual")`` → ``"layers.attn.proj+attn_residual"``."""
    parts = [n.split(".") for n in names]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    prefix = ".".join(parts[0][:common])
    return (prefix + "." if prefix else "") + "+".join(".".join(p[common:]) for p in parts)


def total(rows: Iterable[Bound]) -> Bound:
    """The step's bound: the sum of the ops' bounds."""
    rows = list(rows)
    if not rows:
        raise CostModelError("roofline total: no ops to add up")
    out = rows[0]
    for r in rows[1:]:
        out = out + r
    return Bound("total", "", 1, out.flops, out.bytes, out.compute_s, out.memory_s, out.time_s, out.peak, out.bandwidth)


def variants(
    G: nx.DiGraph,
    values: Mapping,
    dev: Device,
    *,
    phase: str = "forward",
    dtype: str | None = None,
    counting: Counting = Counting(),
) -> dict[str, Bound]:
    """The step bound as built, with element-wise ops fused, with FlashAttention, and with both.

    Keys ``"unfused"``, ``"fused"``, ``"flash"``, ``"flash+fused"``. The byte
    differences are what each pass saves: fusion the intermediate writes and
    read-backs, FlashAttention the T×T score tensors.
    """
    training = phase != "forward"
    flash = flash_attention(G)
    graphs = {
        "unfused": G,
        "fused": fuse_elementwise(G, training=training),
        "flash": flash,
        "flash+fused": fuse_elementwise(flash, training=training),
    }
    return {k: total(roofline(H, values, dev, phase=phase, dtype=dtype, counting=counting)) for k, H in graphs.items()}
