"""Time and utilisation: step time, wall-clock, MFU/HFU, communication and pipeline bubbles.

Definitions (PaLM, Chowdhery et al. 2022, Appendix B):

* **MFU** (model FLOPs utilisation) = model FLOPs per second achieved ÷ peak.
  Model FLOPs are what the model needs (forward + backward), whatever the
  implementation does.
* **HFU** (hardware FLOPs utilisation) adds the FLOPs an implementation spends
  again: activation recomputation, FlashAttention's score recompute.

Times are exact Rationals in seconds; the CLI shows them in s, days or years.

>>> from sympy import Rational
>>> t = training_time(6 * 175 * 10**9 * 300 * 10**9, 1, 400 * 10**12)  # the lecture: 6ND at 400 TFLOP/s
>>> float(t), round(float(t / YEAR), 2)
(787500000.0, 24.95)
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from .. import units
from ..devices import prices
from ..devices.run import run_device
from ..devices.table import Device
from ..errors import CostModelError
from ..formulas.compiled import Text, verbatim
from ..formulas.quantities import Quantities, maximum
from ..graph.analysis import totals
from ..graph.decode import decode_graph, prefill_graph
from ..memory.device import prepared
from ..memory.serving import prefill, prompt
from ..options import Options
from ..symbols import B, C, T
from .calibrated import calibrated_quantities
from .kernels import gemm_dtype
from .links import LINKS, _positive, comm_seconds
from .roofline import op_bounds

DAY, YEAR = units.DAY, units.YEAR  # seconds in a day and a Julian (365.25-day) year: one definition, units


def training_time(flops: object, devices: int, achieved: object) -> sympy.Rational:
    """Seconds to do ``flops`` on ``devices`` that each sustain ``achieved`` FLOP/s."""
    return _positive(flops, "FLOPs") / (_positive(devices, "devices") * _positive(achieved, "achieved FLOP/s"))


def utilization(flops: object, seconds: object, devices: int, peak: object) -> sympy.Rational:
    """FLOPs done in ``seconds`` on ``devices`` as a share of their peak (MFU with model
    FLOPs, HFU with hardware FLOPs)."""
    return _positive(flops, "FLOPs") / (
        _positive(seconds, "seconds") * _positive(devices, "devices") * _positive(peak, "peak FLOP/s")
    )


def mfu_from_throughput(tokens_per_s: object, flops_per_token: object, devices: int, peak: object) -> sympy.Rational:
    """MFU from a measured throughput: tokens/s × model FLOPs per token ÷ (devices × peak)."""
    return utilization(
        _positive(tokens_per_s, "tokens/s") * _positive(flops_per_token, "FLOPs per token"), 1, devices, peak
    )


def gpu_hours(seconds: object, devices: int) -> sympy.Rational:
    """Device-hours: wall-clock × devices ÷ 3600."""
    return sympy.Rational(seconds) * devices / 3600


def step_time(compute_s: object, comm_s: object = 0, *, overlap: bool = False) -> sympy.Rational:
    """Compute plus communication (``overlap=False``), or the larger of the two (``overlap=True``)."""
    c, m = sympy.Rational(compute_s), sympy.Rational(comm_s)
    return max(c, m) if overlap else c + m


def pipeline_bubble(stages: int, microbatches: int) -> sympy.Rational:
    """Idle share of a GPipe/1F1B pipeline: (p − 1)/(m + p − 1) (Narayanan et al. 2021).

    >>> pipeline_bubble(4, 8)
    3/11
    """
    p = int(_positive(stages, "pipeline stages"))
    m = (
        microbatches
        if isinstance(microbatches, sympy.Expr) and not microbatches.is_number
        else int(_positive(microbatches, "microbatches"))
    )
    return sympy.Integer(p - 1) / (m + p - 1)


def pipeline_time(compute_s: object, stages: int, microbatches: int) -> sympy.Rational:
    """Step time with the bubble: busy time ÷ (1 − bubble) = busy × (m + p − 1)/m."""
    return sympy.Rational(compute_s) / (1 - pipeline_bubble(stages, microbatches))


def achieved_flops(dev: Device, dtype: str, *, achieved: object = None, mfu: object = None) -> sympy.Rational | None:
    """FLOP/s one device sustains: given directly, or as ``mfu`` × the dtype's peak."""
    if achieved is not None and mfu is not None:
        raise CostModelError("give either an achieved FLOP/s or an MFU, not both")
    if achieved is not None:
        rate = _positive(achieved, "achieved FLOP/s")
        if rate > dev.peak(dtype):
            raise CostModelError(
                f"achieved FLOP/s {float(rate):.4g} is above {dev.name}'s {dtype} dense peak "
                f"{float(dev.peak(dtype)):.4g}; expected at most the peak"
            )
        return rate
    if mfu is not None:
        u = _positive(mfu, "MFU")
        if u > 1:
            raise CostModelError(f"MFU is a share of peak: expected 0 < MFU <= 1, received {mfu}")
        return u * dev.peak(dtype)
    return None


def _out(x: sympy.Rational) -> int | float:
    """JSON-friendly: whole numbers stay exact ints, the rest become floats."""
    return int(x) if x.q == 1 else float(x)


def _devices(q: Quantities, options: Options) -> tuple[int, tuple[int, sympy.Expr] | None]:
    """Devices N and the pipeline (stages, micro-batches), from the memory section's layout."""
    n = options.devices
    layout = options.layout
    pipe = options.pipeline
    if layout.devices > 1:
        if n not in (1, layout.devices):
            raise CostModelError(f"--devices {n} disagrees with the layout's dp·tp·pp·sp = {layout.devices}")
        n = layout.devices
    if layout.pp > 1 and pipe is None and not options.inference:
        pipe = (layout.pp, q.exprs.get("memory.layout.micro_batches", sympy.Integer(1)))
    return n, pipe


def _sum_time(
    G: nx.DiGraph, dev: Device, phase: str, dtype: str, options: Options, gemm: str | None = None
) -> tuple[sympy.Expr, ...]:
    """(time, compute, memory) of the per-op roofline bound of one pass, symbolic; ``gemm``: the dtype the
    layers' weight matmuls run in (:func:`~costmodel.timing.kernels.gemm_dtype`)."""
    rows = op_bounds(G, dev, phase=phase, dtype=dtype, counting=options.counting, gemm=gemm)
    return tuple(sympy.Add(*(getattr(r, f) for r in rows)) for f in ("time_s", "compute_s", "memory_s"))


def _inference_times(G: nx.DiGraph, dev: Device, dtype: str, n: int, options: Options, q: Quantities) -> Quantities:
    """Prefill (time to first token) and one decode step at context C, on one device's roofline.

    N devices serving replicas multiply the throughput; a sharded model's
    communication is not modelled here. ``q``: the keys of the sections before (``memory.fits``).
    """
    context = sympy.Integer(options.context) if options.context else T
    first, _, _ = _sum_time(prefill(prefill_graph(G), options), dev, "forward", dtype, options)
    first = first.xreplace({T: prompt(options)})  # the prefill of the prompt, min(T, C)
    one, compute, memory = (
        e.xreplace({C: context}) for e in _sum_time(decode_graph(G), dev, "forward", dtype, options)
    )
    out = Quantities()
    out.info.update({"time.hardware": dev.name, "time.devices": n, "time.dtype": dtype, "time.basis": "roofline"})
    _fits(q, out)
    q = out  # the time keys
    q.add("time.peak_flops", dev.peak(dtype), "number")
    q.add("time.ttft_s", first, "float")
    q.add("time.decode_step_s", one, "float")
    q.choices["time.decode_bound"] = ((compute, memory), ("compute", "memory"))
    q.add("time.decode_tokens_per_s", n * B / one, "float")
    q.add("time.context", context)
    if options.price_per_hour is not None:  # serving: the price of a million generated tokens
        q.add(
            "time.cost_per_million_tokens_usd",
            _positive(options.price_per_hour, "price per hour") * n / 3600 / (n * B / one) * 10**6,
            "float",
        )
    return q


def time_quantities(model, options: Options, q: Quantities, *, devices: sympy.Expr | None = None) -> Quantities:
    """``time.*``, ``mfu`` and ``hfu`` keys of an estimate, when ``options.hardware`` is given.

    Reads the keys of the counts and memory sections in ``q`` (``flops.training``, ``flops.recompute``,
    ``communication_bytes.*``, ``memory.layout.*``) and the options ``hardware``, ``devices``, one of
    ``achieved_flops`` (per device), ``mfu`` or a measured ``tokens_per_s`` (all devices together: MFU from a
    measurement), ``comm_bytes``, ``comm_links``, ``overlap`` (communication hidden behind compute) and
    ``pipeline``.

    An achieved FLOP/s counts every FLOP executed (recompute included, as
    Megatron-LM's X does); an MFU counts model FLOPs. Both, like a measured
    throughput, are end-to-end: communication and bubbles are inside them. Without either, the compute
    time is the roofline bound of one training step (plus recompute at peak) split
    evenly over the devices.

    ``devices``: the devices N as an expression (a symbol: the live report's control) where the layout is one
    device that N spreads only the time over; by default ``options.devices``.
    """
    out = Quantities()
    if options.hardware is None:
        return out
    dev = run_device(options)  # the table's device, its stack's sustained factor, its cluster
    n, pipe = _devices(q, options)
    if devices is not None and options.layout.devices == 1:
        n = devices
    dtype = options.dtype or model.graph.graph.get("dtype", "bf16")
    G = prepared(model.graph, options)
    if options.inference:
        return _inference_times(G, dev, dtype, n, options, q)
    # fp8-mixed: the layers' matmuls at the fp8 peak, and MFU a share of it (the peak of the dtype the model's
    # FLOPs run in, as PaLM's Appendix B takes the peak of the precision used)
    gemm = gemm_dtype(options, dtype)
    peak = dev.peak(gemm)
    t = totals(G, options.counting)
    model_flops = q.exprs.get("flops.mfu_basis", q.exprs["flops.training"])  # the MFU's basis (engine by default)
    own = t.training.recompute_flops  # e.g. FlashAttention's score recompute
    extra = q.exprs.get("flops.recompute", sympy.Integer(0))  # the memory section's recompute policy
    hardware_flops = model_flops + own + extra
    bound, _, _ = _sum_time(G, dev, "training", dtype, options, gemm)
    rate = achieved_flops(dev, gemm, achieved=options.achieved_flops, mfu=options.mfu)
    tokens = q.exprs["tokens.per_step"]
    if options.tokens_per_s is not None:  # a measurement already includes communication and bubbles
        basis, compute_s = "measured", tokens / _positive(options.tokens_per_s, "tokens/s")
        rate = model_flops / (compute_s * n)
        each = hardware_flops / (compute_s * n)
        out.checks.append(
            (
                sympy.Le(each, peak),
                Text(
                    f"a measured {float(options.tokens_per_s):g} tokens/s on {units.devices(n)} means "
                    + "{each:.3g}"
                    + f" FLOP/s each, above the {gemm} peak {float(peak):.3g}; expected a throughput the devices can reach",
                    {"each": each},
                ),
            )
        )
    elif rate is not None:
        # an achieved FLOP/s is what the device executes (recompute included, as Megatron-LM's X);
        # an MFU is a share of peak spent on model FLOPs
        basis = "achieved" if options.achieved_flops is not None else "mfu"
        compute_s = (hardware_flops if basis == "achieved" else model_flops) / (n * rate)
    elif options.time_model != "roofline":
        out = calibrated_quantities(G, dev, dtype, n, options, q, model_flops, hardware_flops, bound, tokens)
        out.info["time.mfu_basis"] = options.mfu_basis
        _fits(q, out)
        _costs(q, out, options, n, dev)
        return out
    else:
        basis, compute_s = "roofline", (bound + extra / peak) / n
    volumes = {
        k.removeprefix("communication_bytes."): v
        for k, v in q.exprs.items()
        if k.startswith("communication_bytes.") and k != "communication_bytes.total" and v != 0
    }
    volumes.update({k: sympy.Integer(v) for k, v in options.comm_bytes})
    comm = comm_seconds(volumes, dev, dict(options.comm_links) or LINKS)
    comm_s = sympy.Add(*comm.values())
    busy = maximum(compute_s, comm_s) if options.overlap else compute_s + comm_s
    step_s = busy / (1 - pipeline_bubble(*pipe)) if pipe else busy
    if basis != "roofline":
        # a measured throughput, an achieved FLOP/s (Megatron-LM's X) and an MFU (PaLM) are end-to-end rates:
        # communication and pipeline bubbles are already in them. Only the roofline basis adds them.
        step_s = compute_s
    out.info.update(
        {
            "time.hardware": dev.name,
            "time.devices": n,
            "time.dtype": dtype,
            "time.basis": basis,
            "time.mfu_basis": options.mfu_basis,
        }
    )
    if gemm != dtype:  # the layers' weight matmuls run in the precision's compute copy (and MFU is a share of its peak)
        out.info["time.gemm_dtype"] = gemm
    _fits(q, out)
    out.add("time.peak_flops", peak, "number")
    out.add("time.model_flops_per_s", model_flops / (step_s * n), "number")
    out.add("time.hardware_flops_per_s", hardware_flops / (step_s * n), "number")
    out.add("time.roofline_step_s", bound / n, "float")
    out.add("time.compute_s", compute_s, "float")
    out.add("time.comm_s", comm_s, "float")
    out.info["time.overlap"] = options.overlap
    out.add("time.step_s", step_s, "float")
    out.add("time.tokens_per_s", tokens / step_s, "float")
    out.add("mfu", model_flops / (step_s * n * peak), "float")
    out.add("hfu", hardware_flops / (step_s * n * peak), "float")
    for k, v in comm.items():
        out.add(f"time.comm_by_kind.{k}", v, "float")
    if basis in ("achieved", "mfu"):
        out.add("time.achieved_flops", rate, "number")  # the rate given, before communication and bubbles
    if pipe:
        out.add("time.pipeline_bubble", pipeline_bubble(*pipe), "float")
    _costs(q, out, options, n, dev)
    if options.tokens is not None:
        run_s = step_s * q.exprs["flops.training_total"] / q.exprs["flops.training"]  # the same rate every step
        out.add("time.training_s", run_s, "float")
        out.add("time.training_days", run_s / DAY, "float")
        out.add("time.gpu_hours", run_s * n / 3600, "float")
        if rate is not None:  # the lecture's back-of-envelope: 6ND at the same rate
            out.add("time.six_nd_training_s", q.exprs["flops.six_nd"] / (n * rate), "float")
    return out


def _costs(q: Quantities, out: Quantities, options: Options, n: int, dev: Device) -> None:
    """``time.step_cost_usd`` and, for a whole run, ``time.cost_usd``: device-hours × the price of one
    (DeepSeek-V3: 2.788M H800-hours × $2), from the step ``out`` already has. Only when the user gives a price:
    US dollars, or a dated entry of the price table (``"list"``: the device's; a name), which
    ``time.price_source`` then names with its date and source."""
    price = options.price_per_hour
    if price is None:
        return
    if isinstance(price, str):
        entry = prices.price(price, dev.name)
        price = entry.usd_per_hour
        out.info["time.price_source"] = verbatim(entry.describe())
    out.add("time.price_per_hour_usd", sympy.Rational(price.numerator, price.denominator), "float")
    step_s = out.exprs["time.step_s"]
    out.add("time.step_cost_usd", step_s * n * _positive(price, "price per hour") / 3600, "float")
    if options.tokens is not None:
        run_s = step_s * q.exprs["flops.training_total"] / q.exprs["flops.training"]
        out.add("time.cost_usd", run_s * n / 3600 * _positive(price, "price per hour"), "float")


def _fits(q: Quantities, out: Quantities) -> None:
    """``time.fits``: whether the memory of the step the time is for fits one device (``memory.fits``)."""
    if "memory.fits" in q.exprs:
        out.add("time.fits", q.exprs["memory.fits"])  # a relation: true or false


def _subs(values: Mapping) -> dict:
    return {k: sympy.Integer(v) if isinstance(v, int) else v for k, v in values.items()}
