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

import sympy

from .errors import CostModelError
from .analysis import totals
from .hardware import Device, device
from .symbols import B, T

#: Seconds in a day and in a (Julian, 365.25-day) year.
DAY = 86400
YEAR = sympy.Rational(36525, 100) * DAY


def _positive(x: object, what: str) -> sympy.Rational:
    try:
        v = sympy.Rational(x) if not isinstance(x, float) else None
    except (TypeError, ValueError):
        v = None
    if v is None or not v > 0:
        raise CostModelError(f"{what}: expected a positive exact number, received {x!r}")
    return v


def training_time(flops: object, devices: int, achieved: object) -> sympy.Rational:
    """Seconds to do ``flops`` on ``devices`` that each sustain ``achieved`` FLOP/s."""
    return _positive(flops, "FLOPs") / (_positive(devices, "devices") * _positive(achieved, "achieved FLOP/s"))


def utilization(flops: object, seconds: object, devices: int, peak: object) -> sympy.Rational:
    """FLOPs done in ``seconds`` on ``devices`` as a share of their peak (MFU with model
    FLOPs, HFU with hardware FLOPs)."""
    return _positive(flops, "FLOPs") / (_positive(seconds, "seconds") * _positive(devices, "devices")
                                        * _positive(peak, "peak FLOP/s"))


def mfu_from_throughput(tokens_per_s: object, flops_per_token: object, devices: int, peak: object) -> sympy.Rational:
    """MFU from a measured throughput: tokens/s × model FLOPs per token ÷ (devices × peak)."""
    return utilization(_positive(tokens_per_s, "tokens/s") * _positive(flops_per_token, "FLOPs per token"), 1,
                       devices, peak)


def gpu_hours(seconds: object, devices: int) -> sympy.Rational:
    """Device-hours: wall-clock × devices ÷ 3600."""
    return sympy.Rational(seconds) * devices / 3600


def comm_time(nbytes: object, bandwidth: object) -> sympy.Rational:
    """Seconds to move ``nbytes`` over a link of ``bandwidth`` bytes/s per direction
    (bandwidth-only: no latency term)."""
    return sympy.Rational(nbytes) / _positive(bandwidth, "link bandwidth")


def step_time(compute_s: object, comm_s: object = 0, *, overlap: bool = False) -> sympy.Rational:
    """Compute plus communication (``overlap=False``), or the larger of the two (``overlap=True``)."""
    c, m = sympy.Rational(compute_s), sympy.Rational(comm_s)
    return max(c, m) if overlap else c + m


def pipeline_bubble(stages: int, microbatches: int) -> sympy.Rational:
    """Idle share of a GPipe/1F1B pipeline: (p − 1)/(m + p − 1) (Narayanan et al. 2021).

    >>> pipeline_bubble(4, 8)
    3/11
    """
    p, m = int(_positive(stages, "pipeline stages")), int(_positive(microbatches, "microbatches"))
    return sympy.Rational(p - 1, m + p - 1)


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
            raise CostModelError(f"achieved FLOP/s {float(rate):.4g} is above {dev.name}'s {dtype} dense peak "
                                 f"{float(dev.peak(dtype)):.4g}; expected at most the peak")
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


#: Which link carries each kind of traffic: tensor and sequence parallel groups inside a node (NVLink, ICI),
#: data and pipeline parallel groups across nodes (the network). Override with the ``comm_links`` option.
LINKS = {"tp": "scale_up", "sp": "scale_up", "ep": "scale_up", "dp": "scale_out", "pp": "scale_out",
         "scale_up": "scale_up", "scale_out": "scale_out"}


def comm_seconds(volumes: Mapping[str, object], dev: Device,
                 links: Mapping[str, str] = LINKS) -> dict[str, sympy.Rational]:
    """Seconds each kind of traffic takes on its link (bytes per device per step → s).

    A device without a network bandwidth in its table (TPU v4) sends everything
    over its scale-up fabric.
    """
    out = {}
    for kind, nbytes in volumes.items():
        if kind not in links:
            raise CostModelError(f"communication kind {kind!r}: expected one of {', '.join(sorted(links))}")
        scope = links[kind]
        if scope == "scale_out" and dev.scale_out_bandwidth is None:
            scope = "scale_up"
        out[kind] = comm_time(nbytes, dev.link(scope))
    return out


def _layout(report: Mapping[str, object], opts: Mapping[str, object]) -> tuple[int, tuple[int, int] | None]:
    """Devices N and the pipeline (stages, micro-batches), from the memory section's layout when present."""
    n = int(_positive(opts.get("devices") or 1, "devices"))
    degrees = [report.get(f"memory.layout.{k}") for k in ("dp", "tp", "pp", "sp")]
    pipe = opts.get("pipeline")
    if all(isinstance(v, int) for v in degrees):
        laid = degrees[0] * degrees[1] * degrees[2] * degrees[3]
        if laid > 1:
            if n not in (1, laid):
                raise CostModelError(f"--devices {n} disagrees with the layout's dp·tp·pp·sp = {laid}")
            n = laid
        if degrees[2] > 1 and pipe is None:
            pipe = (degrees[2], int(report.get("memory.layout.micro_batches") or 1))
    return n, pipe


def _inference_times(step, G, dev: Device, dtype: str, n: int) -> dict[str, object]:
    """Prefill (time to first token) and one decode step at context C, on one device's roofline.

    N devices serving replicas multiply the throughput; a sharded model's
    communication is not modelled here.
    """
    from .inference import decode_step, prefill
    from .symbols import C

    values = {**step.values, C: int(step.options.get("context") or step.values[T])}
    _, first = prefill(G, values, dev, dtype=dtype, conventions=step.conventions)
    _, one = decode_step(G, values, dev, dtype=dtype, conventions=step.conventions)
    b = values[B]
    return {"time.hardware": dev.name, "time.devices": n, "time.dtype": dtype, "time.basis": "roofline",
            "time.peak_flops": _out(dev.peak(dtype)), "time.ttft_s": float(first.time_s),
            "time.decode_step_s": float(one.time_s), "time.decode_bound": one.bound,
            "time.decode_tokens_per_s": float(n * b / one.time_s), "time.context": values[C]}


def time_section(step, report: Mapping[str, object]) -> dict[str, object]:
    """``time.*``, ``mfu`` and ``hfu`` keys of an estimate, when a ``hardware`` option is given.

    Options read: ``hardware`` (name, file or :class:`Device`), ``devices`` (N,
    default 1), ``achieved_flops`` (per device) or ``mfu`` or a measured
    ``tokens_per_s`` (all devices together: MFU from a measurement), ``recompute``
    (``"full"``: one more forward in backward, as Megatron-LM counts),
    ``comm_bytes`` (bytes per device per step by kind, ``dp``/``tp``/``pp``/``sp``
    or ``scale_up``/``scale_out``), ``comm_links``, ``overlap`` (communication
    hidden behind compute), ``pipeline`` (``(stages, microbatches)``). Keys an
    earlier section wrote are used when present: ``flops.recompute``,
    ``communication_bytes.*`` and ``memory.layout.*`` (devices, pipeline).

    An achieved FLOP/s counts every FLOP executed (recompute included, as
    Megatron-LM's X does); an MFU counts model FLOPs. Both, like a measured
    throughput, are end-to-end: communication and bubbles are inside them. Without either, the compute
    time is the roofline bound of one training step (plus recompute at peak) split
    evenly over the devices.
    """
    opts = step.options
    if opts.get("hardware") is None:
        if any(opts.get(k) is not None for k in ("achieved_flops", "mfu", "tokens_per_s")):
            raise CostModelError("an achieved FLOP/s, MFU or throughput needs a device: give --hardware NAME")
        return {}
    from .passes import flash_attention
    from .roofline import roofline, total

    dev = device(opts["hardware"])
    n, pipe = _layout(report, opts)
    dtype = str(opts.get("dtype") or step.model.graph.graph.get("dtype", "bf16"))
    peak = dev.peak(dtype)
    G = flash_attention(step.model.graph) if opts.get("flash") else step.model.graph
    if opts.get("inference"):
        return _inference_times(step, G, dev, dtype, n)
    t = totals(G, step.conventions)
    model_flops = sympy.Rational(report["flops.training"])
    own = sympy.Rational(step.number(t.training.recompute_flops, "recompute FLOPs"))  # e.g. FlashAttention's
    if report.get("flops.recompute") is not None:  # the memory section's recompute policy
        extra = sympy.Rational(report["flops.recompute"])
    else:
        extra = sympy.Rational(step.number(t.forward.flops, "forward FLOPs")) if opts.get("recompute") == "full" else 0
    hardware_flops = model_flops + own + extra
    bound = total(roofline(G, step.values, dev, phase="training", dtype=dtype, conventions=step.conventions))
    rate = achieved_flops(dev, dtype, achieved=opts.get("achieved_flops"), mfu=opts.get("mfu"))
    measured = opts.get("tokens_per_s")
    if measured is not None and rate is not None:
        raise CostModelError("give a measured throughput or an achieved FLOP/s or MFU, not two of them")
    if measured is not None:  # a measurement already includes communication and bubbles
        basis, compute_s = "measured", report["tokens.per_step"] / _positive(measured, "tokens/s")
        rate = model_flops / (compute_s * n)
        if hardware_flops / (compute_s * n) > peak:
            raise CostModelError(f"a measured {measured} tokens/s on {n} device(s) means "
                                 f"{float(hardware_flops / (compute_s * n)):.3g} FLOP/s each, above the {dtype} peak "
                                 f"{float(peak):.3g}; expected a throughput the devices can reach")
    elif rate is not None:
        # an achieved FLOP/s is what the device executes (recompute included, as Megatron-LM's X);
        # an MFU is a share of peak spent on model FLOPs
        basis = "achieved" if opts.get("achieved_flops") is not None else "mfu"
        compute_s = training_time(hardware_flops if basis == "achieved" else model_flops, n, rate)
    else:
        basis, compute_s = "roofline", (bound.time_s + extra / peak) / n
    volumes = {k.removeprefix("communication_bytes."): v for k, v in report.items()
               if k.startswith("communication_bytes.") and k != "communication_bytes.total" and v}
    volumes.update(opts.get("comm_bytes") or {})
    comm = comm_seconds(volumes, dev, opts.get("comm_links") or LINKS)
    comm_s = sum(comm.values(), sympy.Integer(0))
    busy = step_time(compute_s, comm_s, overlap=bool(opts.get("overlap")))
    step_s = pipeline_time(busy, *pipe) if pipe else busy
    if basis != "roofline":
        # a measured throughput, an achieved FLOP/s (Megatron-LM's X) and an MFU (PaLM) are end-to-end rates:
        # communication and pipeline bubbles are already in them. Only the roofline basis adds them.
        step_s = compute_s
    tokens = report["tokens.per_step"]
    out: dict[str, object] = {
        "time.hardware": dev.name, "time.devices": n, "time.dtype": dtype, "time.basis": basis,
        "time.peak_flops": _out(peak), "time.model_flops_per_s": _out(model_flops / (step_s * n)),
        "time.hardware_flops_per_s": _out(hardware_flops / (step_s * n)),
        "time.roofline_step_s": float(bound.time_s / n), "time.compute_s": float(compute_s),
        "time.comm_s": float(comm_s), "time.overlap": bool(opts.get("overlap")),
        "time.step_s": float(step_s), "time.tokens_per_s": float(tokens / step_s),
        "mfu": float(utilization(model_flops, step_s, n, peak)),
        "hfu": float(utilization(hardware_flops, step_s, n, peak)),
    }
    out.update({f"time.comm_by_kind.{k}": float(v) for k, v in comm.items()})
    if basis in ("achieved", "mfu"):
        out["time.achieved_flops"] = _out(rate)  # the rate given, before communication and bubbles
    if pipe:
        out["time.pipeline_bubble"] = float(pipeline_bubble(*pipe))
    if report.get("tokens.total"):
        total_flops = sympy.Rational(report["flops.training_total"])
        run_s = step_s * total_flops / model_flops  # the same rate for every step
        out["time.training_s"] = float(run_s)
        out["time.training_days"] = float(run_s / DAY)
        out["time.gpu_hours"] = float(gpu_hours(run_s, n))
        if rate is not None:  # the lecture's back-of-envelope: 6ND at the same rate
            out["time.six_nd_training_s"] = float(training_time(report["flops.six_nd"], n, rate))
    return out
