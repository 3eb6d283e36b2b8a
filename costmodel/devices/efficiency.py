"""Attained rates: how far below its peak a device runs a kernel of a given size, and its network tiers.

The exact FLOPs and bytes of an op are the speed of light; a kernel runs at an *attained* rate that depends
on its shape. Each curve is a closed form whose time is a polynomial in the kernel's sizes, so it stays an
exact expression that the code generator compiles (no table lookups, no floats):

* **GEMM** ``C[M×N] = A[M×K] · B[K×N]`` (batched: every size × the batch), F = 2·M·N·K FLOPs::

      t = (F + 2·(m₀·|B| + n₀·|A| + k₀·|C|)) / (P·η) + t₀

  i.e. an efficiency η·MNK/(MNK + m₀NK + n₀MK + k₀MN) that rises with each dimension and plateaus at η: a
  small M (a thin GEMM), N or K pays its offset (tile and wave quantization, the K-loop's prologue), a huge
  one runs at η. |A|, |B|, |C| are the operands' element counts, so the offsets are read off the pattern.
* **Memory-bound kernels** (element-wise, norms, softmax, gathers): ``t = bytes / (W·η_w) + t₀``, the
  efficiency by transfer size ``η_w·S/(S + W·η_w·t₀)``.
* Every kernel is ``max(compute, memory) + t₀``: the per-kernel overhead (launch, ramp, tail) once.
* **Fused attention** (FlashAttention) runs its matmul FLOPs at ``attention`` × peak.

Network tiers (:class:`Tier`): ``scale_up`` inside a node of ``node_size`` devices (NVLink, ICI),
``scale_out`` across nodes (InfiniBand, RoCE), each with the device table's bandwidth per direction, a
bus-bandwidth efficiency (what nccl-tests' busbw reaches) and a latency per collective.

Curves are data with their sources (``costmodel/devices/data/hardware.json``, key ``efficiency``); a device
without one gets :data:`GENERIC` (said in ``time.efficiency_source``). ``costmodel calibrate`` fits a user's.

``sustained`` (the share of the kernels' rates a training step sustains) depends on the software that runs the
step: ``efficiency.stacks`` holds a factor per software stack (:class:`Stack`, each with its source and the runs
it was fitted on), ``sustained`` the device's default (``costmodel estimate --stack NAME`` chooses).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError, closest
from ..expr import parse_number
from ..formulas.quantities import maximum


@dataclass(frozen=True)
class GemmCurve:
    """A GEMM efficiency curve: plateau ``efficiency`` η, offsets ``m0 n0 k0`` (elements), ``overhead_s`` t₀."""

    efficiency: sympy.Rational
    m0: sympy.Rational
    n0: sympy.Rational
    k0: sympy.Rational
    overhead_s: sympy.Rational


@dataclass(frozen=True)
class Tier:
    """One network tier: bus-bandwidth ``efficiency`` of the link and ``latency_s`` per collective."""

    efficiency: sympy.Rational
    latency_s: sympy.Rational


@dataclass(frozen=True)
class Stack:
    """A software stack's ``sustained`` factor on one device, its ``source`` and the runs it was ``fitted_on``."""

    name: str
    sustained: sympy.Rational
    source: str
    fitted_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Efficiency:
    """Attained-rate curves and network tiers of one device (see the module notes)."""

    gemm: Mapping[str, GemmCurve]
    memory: sympy.Rational  # η_w: share of the memory bandwidth a large transfer reaches
    overhead_s: sympy.Rational  # t₀ of a memory-bound kernel
    attention: sympy.Rational  # fused attention: share of peak its matmul FLOPs run at
    node_size: int
    scale_up: Tier
    scale_out: Tier
    source: str = "generic"
    sources: Mapping[str, str] = field(default_factory=dict)
    sustained: sympy.Rational = sympy.Integer(1)  # share of the kernels' measured rates a training step sustains
    stacks: Mapping[str, Stack] = field(default_factory=dict)  # sustained per software stack (the default above)

    def curve(self, dtype: str) -> GemmCurve:
        """The GEMM curve of ``dtype``; fp16, and a dtype without its own curve (fp8 on most devices, tf32,
        fp32), takes bf16's, at that dtype's peak (an error where there is none)."""
        for dt in (dtype, "bf16"):
            if dt in self.gemm:
                return self.gemm[dt]
        raise CostModelError(f"efficiency: no GEMM curve for dtype {dtype!r}; curves: {', '.join(self.gemm)}")


def gemm_seconds(
    flops: sympy.Expr, a: sympy.Expr, b: sympy.Expr, c: sympy.Expr, peak: sympy.Expr, curve: GemmCurve
) -> sympy.Expr:
    """Compute time of a GEMM (no overhead): (F + 2·(m₀|B| + n₀|A| + k₀|C|)) / (P·η).

    >>> from sympy import Rational as R
    >>> g = GemmCurve(R(1, 2), R(0), R(0), R(64), R(0))
    >>> t = gemm_seconds(2 * 64**3, 64**2, 64**2, 64**2, 10**12, g)
    >>> t / (2 * 64**3 / (10**12 * R(1, 2)))  # K = 64 = k₀ halves the rate again
    2
    """
    return (flops + 2 * (curve.m0 * b + curve.n0 * a + curve.k0 * c)) / (peak * curve.efficiency)


def kernel_seconds(
    compute_s: sympy.Expr,
    nbytes: sympy.Expr,
    bandwidth: sympy.Expr,
    eff: Efficiency,
    overhead_s: sympy.Expr,
    kernels: sympy.Expr = 1,
) -> sympy.Expr:
    """``max(compute, bytes/(W·η_w)) / s + kernels·t₀``, with ``s`` the rate a training step sustains."""
    memory_s = nbytes / (bandwidth * eff.memory)
    return maximum(compute_s, memory_s) / eff.sustained + kernels * overhead_s


# -- reading the table ---------------------------------------------------------------------------------

_GEMM_KEYS = ("efficiency", "m0", "n0", "k0", "overhead_s")


def _num(
    value: object,
    where: str,
    lo: sympy.Rational = sympy.Integer(0),
    hi: sympy.Rational | None = None,
    positive: bool = False,
) -> sympy.Rational:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise CostModelError(f'{where}: expected an integer or a decimal string such as "0.85", received {value!r}')
    x = sympy.Integer(value) if isinstance(value, int) else parse_number(value, where)
    if x < lo or (positive and x <= 0) or (hi is not None and x > hi):
        bound = f"in ({lo}, {hi}]" if positive and hi is not None else f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise CostModelError(f"{where}: {value} is out of range; expected a number {bound}")
    return x


def _table(value: object, where: str, keys) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise CostModelError(f"{where}: expected a table, received {value!r}")
    for k in value:
        if k not in keys:
            raise CostModelError(f"{where}: unknown field {k!r}{closest(k, keys)}; expected {sorted(keys)}")
    return value


def parse_efficiency(
    entry: Mapping[str, object] | None, network: Mapping[str, object] | None, where: str
) -> Efficiency | None:
    """``efficiency`` and ``network`` tables of a device entry (``None`` when it has neither)."""
    if entry is None and network is None:
        return None
    base = GENERIC
    gemm, memory, overhead, attention, source = dict(base.gemm), base.memory, base.overhead_s, base.attention, "generic"
    sustained, stacks = base.sustained, {}
    sources: dict[str, str] = {}
    if entry is not None:
        e = _table(
            entry,
            f"{where}: efficiency",
            ("gemm", "memory", "overhead_s", "attention", "sustained", "stacks", "source"),
        )
        curves = _table(e.get("gemm", {}), f"{where}: efficiency.gemm", ("bf16", "fp16", "fp8", "tf32", "fp32"))
        for dt, c in curves.items():
            w = f"{where}: efficiency.gemm.{dt}"
            c = _table(c, w, _GEMM_KEYS)
            missing = [k for k in _GEMM_KEYS if k not in c]
            if missing:
                raise CostModelError(f"{w}: missing {', '.join(missing)}; expected {', '.join(_GEMM_KEYS)}")
            gemm[dt] = GemmCurve(
                _num(c["efficiency"], f"{w}.efficiency", hi=sympy.Integer(1), positive=True),
                *(_num(c[k], f"{w}.{k}", hi=sympy.Integer(10**5)) for k in ("m0", "n0", "k0")),
                _num(c["overhead_s"], f"{w}.overhead_s", hi=sympy.Rational(1, 100)),
            )
        if "memory" in e:
            memory = _num(e["memory"], f"{where}: efficiency.memory", hi=sympy.Integer(1), positive=True)
        if "overhead_s" in e:
            overhead = _num(e["overhead_s"], f"{where}: efficiency.overhead_s", hi=sympy.Rational(1, 100))
        if "attention" in e:
            attention = _num(e["attention"], f"{where}: efficiency.attention", hi=sympy.Integer(1), positive=True)
        if "sustained" in e:
            sustained = _num(e["sustained"], f"{where}: efficiency.sustained", hi=sympy.Integer(1), positive=True)
        stacks = _stacks(e.get("stacks", {}), f"{where}: efficiency.stacks")
        source = str(e.get("source", "measured"))
        sources["efficiency"] = source
    node, up, out = base.node_size, base.scale_up, base.scale_out
    if network is not None:
        n = _table(network, f"{where}: network", ("node_size", "scale_up", "scale_out", "source"))
        if "node_size" in n:
            v = n["node_size"]
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                raise CostModelError(
                    f"{where}: network.node_size must be a whole number of devices in [1, 4096], received {v!r}"
                )
            node = v
        tiers = {}
        for scope, default in (("scale_up", up), ("scale_out", out)):
            t = _table(n.get(scope, {}), f"{where}: network.{scope}", ("efficiency", "latency_s"))
            tiers[scope] = Tier(
                _num(t["efficiency"], f"{where}: network.{scope}.efficiency", hi=sympy.Integer(1), positive=True)
                if "efficiency" in t
                else default.efficiency,
                _num(t["latency_s"], f"{where}: network.{scope}.latency_s", hi=sympy.Rational(1, 100))
                if "latency_s" in t
                else default.latency_s,
            )
        up, out = tiers["scale_up"], tiers["scale_out"]
        sources["network"] = str(n.get("source", ""))
    return Efficiency(gemm, memory, overhead, attention, node, up, out, source, sources, sustained, stacks)


def _stacks(value: object, where: str) -> dict[str, Stack]:
    """``efficiency.stacks``: name → ``{"sustained": "0.65", "source": "...", "fitted_on": [run ids]}``."""
    if not isinstance(value, Mapping):
        raise CostModelError(f"{where}: expected a table of stack name -> factor, received {value!r}")
    out = {}
    for name, entry in value.items():
        w = f"{where}.{name}"
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
            raise CostModelError(f"{where}: a stack's name is letters, digits, '-', '_' or '.', received {name!r}")
        e = _table(entry, w, ("sustained", "source", "fitted_on"))
        if "sustained" not in e or not isinstance(e.get("source"), str) or not e["source"].strip():
            raise CostModelError(f"{w}: expected a sustained factor and its source (text), received {dict(e)!r}")
        runs = e.get("fitted_on", [])
        if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
            raise CostModelError(f"{w}.fitted_on: expected a list of run names, received {runs!r}")
        sustained = _num(e["sustained"], f"{w}.sustained", hi=sympy.Integer(1), positive=True)
        out[name] = Stack(name, sustained, e["source"], tuple(runs))
    return out


def _r(text: str) -> sympy.Rational:
    return parse_number(text)


#: For a device without measured curves: the shape of the H100 fit (offsets and overheads, see hardware.json),
#: a 75% GEMM plateau, 85% of the memory bandwidth, 50% for fused attention, 80% bus bandwidth on both tiers.
GENERIC = Efficiency(
    gemm={"bf16": GemmCurve(_r("0.75"), _r("18.6"), _r("18.2"), _r("149"), _r("5.7e-6"))},
    memory=_r("0.85"),
    overhead_s=_r("5.7e-6"),
    attention=_r("0.5"),
    node_size=8,
    scale_up=Tier(_r("0.8"), _r("25e-6")),
    scale_out=Tier(_r("0.8"), _r("30e-6")),
    source="generic",
)
