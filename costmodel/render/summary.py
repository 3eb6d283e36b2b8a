"""The answer first: the summary every report opens with, the time breakdown that names the binding
resource, and the ops that take the time.

:func:`summary` reads a flat estimate (dotted keys, ``config.B`` ...), a few facts that do not change with the
numbers (:func:`facts`) and the time breakdown (:func:`time_parts`), and returns rows of (what, answer). The
live page computes the same rows in JavaScript from the same numbers (``summary`` in ``assets/page.js``,
line by line); the browser tests check that both give the same text.

The time breakdown is the estimate's ``time.breakdown.*`` keys where a time model gives them; otherwise the
roofline's: each op's bound, summed over the ops that are compute-bound and over those that are
memory-bound, plus communication and the pipeline bubble. Memory fits when ``memory.fits`` says so, or
(without that key) when the peak (the total where no peak is modelled) is at most the device's memory
(``memory.capacity_bytes``, else the hardware table's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy

from .. import units
from ..devices.table import device
from ..formulas.compiled import EXACT
from ..formulas.python import compile_exprs, free_symbols
from ..graph.analysis import breakdown
from ..graph.decode import prefill_graph
from ..memory.device import prepared
from ..options import Options
from ..sections.fits import judged
from ..timing.kernels import gemm_dtype
from ..timing.roofline import op_bounds

#: What binds when a part of the time breakdown is the largest.
BINDING = {
    "compute-bound ops": "compute",
    "memory-bound ops": "memory bandwidth",
    "communication": "communication",
    "pipeline bubble": "pipeline bubble",
    "compute": "compute",
    "exposed communication": "communication",
    "bubble": "pipeline bubble",
    "optimizer": "the optimizer step",
}
#: The breakdown key of communication overlapped with compute: shown in the time table, not a part of the step.
HIDDEN = "hidden_communication_s"
BASIS = {
    "calibrated": "on the calibrated step (each kernel at its attained rate, overlap and schedule)",
    "roofline": "at the roofline bound",
    "mfu": "at the MFU given",
    "achieved": "at the FLOP/s given",
    "measured": "at the measured throughput",
}


def facts(flat: Mapping[str, object], options: Options) -> dict[str, object]:
    """What the summary reads besides the numbers (fixed for a page): names, choices, the device."""
    dev = device(options.hardware) if options.hardware is not None else None
    layout = options.layout
    shards = " × ".join(f"{k} {getattr(layout, k)}" for k in ("dp", "tp", "pp", "sp", "ep") if getattr(layout, k) > 1)
    return {
        "model": flat["model"],
        "family": flat["family"],
        "precision": options.precision,
        "optimizer": options.optimizer,
        "inference": options.inference,
        "hardware": None if dev is None else dev.name,
        "capacity": None if dev is None else int(dev.memory_bytes),
        "basis": flat.get("time.basis"),
        "layout": shards + (f", ZeRO-{layout.zero}" if layout.zero else ""),
    }


def _need(v: Mapping[str, object]) -> tuple[int, str]:
    return judged(v)  # the one rule of every verb (costmodel.sections.fits)


def fits(v: Mapping[str, object], f: Mapping[str, object]) -> bool | None:
    """Whether a device holds the step (None: no device to compare with)."""
    if "memory.fits" in v and v["memory.fits"] is not None:
        return bool(v["memory.fits"])
    cap = v.get("memory.capacity_bytes") or f["capacity"]
    return None if cap is None else _need(v)[0] <= cap


def _config(v: Mapping[str, object], f: Mapping[str, object]) -> str:
    sizes = ", ".join(f"{s} = {units.grouped(v['config.' + s])}" for s in ("B", "T") if "config." + s in v)
    run = "inference" if f["inference"] else f"{f['precision']}, {f['optimizer']}"
    return (
        f"{f['model']} ({f['family']}), {units.sci(v['params.total'])} parameters"
        + (f" ({units.sci(v['params.active'])} active)" if v["params.active"] != v["params.total"] else "")
        + f"; {units.plural(v['tokens.per_step'], 'token')} per step ({sizes}); {run}"
        + (f"; {f['layout']}" if f["layout"] else "")
    )


def _flops(v: Mapping[str, object], f: Mapping[str, object]) -> tuple[str, str]:
    if f["inference"]:
        return "Prefill FLOPs", f"{units.sci(v['flops.forward'])} for {units.plural(v['tokens.per_step'], 'token')}"
    share = f"6ND = {units.sci(v['flops.six_nd'])} is {units.percent(v['flops.six_nd_share'])} of it"
    if "flops.training_total" in v:
        return "Training FLOPs", (
            f"{units.sci(v['flops.training_total'])} for D = {units.sci(v['tokens.total'])} tokens; {share}"
        )
    return "Training FLOPs", f"{units.sci(v['flops.training'])} per step; {share}"


def _time(v: Mapping[str, object], f: Mapping[str, object]) -> str:
    if f["hardware"] is None:
        return "no device chosen (give --hardware NAME, and --devices N)"
    where = f"{units.devices(v['time.devices'])} × {f['hardware']}"
    if f["inference"]:
        return (
            f"first token in {units.duration(v['time.ttft_s'])}, then {units.duration(v['time.decode_step_s'])} "
            f"per decode step ({units.rate(v['time.decode_tokens_per_s'])} tokens/s) on {where}"
        )
    rest = (
        f"{units.rate(v['time.tokens_per_s'])} tokens/s, MFU {units.percent(v['mfu'])}, "
        f"{BASIS.get(f['basis'], f['basis'])}"
    )
    if "time.training_s" in v:
        return f"{units.duration(v['time.training_s'])} on {where}; step {units.duration(v['time.step_s'])}, {rest}"
    return f"step {units.duration(v['time.step_s'])} on {where}; {rest}"


def _memory(v: Mapping[str, object], f: Mapping[str, object]) -> str:
    need, which = _need(v)
    cap = v.get("memory.capacity_bytes") or f["capacity"]
    if cap is None:
        return f"{units.gb(need)} ({which}); no device to compare with"
    ok = fits(v, f)
    return f"{units.gb(need)} ({which}) of {units.gb(cap)}: " + (
        f"fits, {units.percent(need / cap)} used" if ok else f"does not fit ({units.amount(need / cap)}× the capacity)"
    )


def _binding(v: Mapping[str, object], f: Mapping[str, object], parts: Mapping[str, float] | None) -> str:
    if f["hardware"] is None:
        return "needs a device (--hardware NAME)"
    if fits(v, f) is False:
        return f"memory capacity: the step does not fit in one {f['hardware']}'s memory"
    if f["inference"]:
        bound = v["time.decode_bound"]
        return ("memory bandwidth" if bound == "memory" else "compute") + f" (a decode step is {bound}-bound)"
    if not parts:
        return "-"
    total = sum(parts.values())
    top = max(parts, key=lambda k: parts[k])  # the first of equal parts
    share = parts[top] / total if total else 0.0
    return f"{BINDING.get(top, top)} ({units.percent(share)} of the time: {top})"


def summary(
    v: Mapping[str, object], f: Mapping[str, object], parts: Mapping[str, float] | None = None
) -> list[tuple[str, str]]:
    """The summary rows: model and config, FLOPs, time, memory against capacity, the binding resource."""
    return [
        ("Model", _config(v, f)),
        _flops(v, f),
        ("Time", _time(v, f)),
        ("Memory per device", _memory(v, f)),
        ("Binding resource", _binding(v, f, parts)),
    ]


# -- per-op rows and the time breakdown --------------------------------------------------------------


@dataclass(frozen=True)
class OpRow:
    """One op's numbers of a step, as expressions: FLOPs and bytes (all runs), and with a device the
    roofline's compute, memory and bound seconds (before dividing by the devices)."""

    name: str
    kind: str
    count: sympy.Expr
    flops: sympy.Expr
    bytes: sympy.Expr
    compute_s: sympy.Expr | None = None
    memory_s: sympy.Expr | None = None
    time_s: sympy.Expr | None = None


def op_rows(model, options: Options) -> list[OpRow]:
    """The ops of a step: the roofline's rows (the time an estimate sums) with a device, else each op's
    training (inference: prefill) FLOPs and bytes."""
    G = prepared(model.graph, options)
    phase = "forward" if options.inference else "training"
    if options.inference:
        G = prefill_graph(G)
    if options.hardware is None:
        out = []
        for name, row in breakdown(G, options.counting).items():
            cost = row.forward if options.inference else row.forward + row.backward
            if cost.flops == 0 and cost.bytes == 0:
                continue
            out.append(
                OpRow(
                    name,
                    G.nodes[name]["op"].kind,
                    G.nodes[name]["count"],
                    sympy.expand(cost.flops),
                    sympy.expand(cost.bytes),
                )
            )
        return out
    dtype = options.dtype or model.graph.graph.get("dtype", "bf16")  # as the time section chooses it
    gemm = None if options.inference else gemm_dtype(options, dtype)  # fp8-mixed: the layers' matmuls in fp8
    return [
        OpRow(r.name, r.kind, r.count, r.flops, r.bytes, r.compute_s, r.memory_s, r.time_s)
        for r in op_bounds(G, device(options.hardware), phase=phase, dtype=dtype, counting=options.counting, gemm=gemm)
    ]


def part_exprs(q, rows: list[OpRow]) -> dict[str, sympy.Expr]:
    """The expressions the fallback breakdown needs besides the ops': the communication the step waits for
    and the bubble. Communication overlapped with compute (``--overlap``) is not part of the step: the exposed
    part is the step without its bubble less the compute, ``step·(1 − bubble) − compute`` (``comm`` without
    overlap, ``max(compute, comm) − compute`` with it)."""
    e = q.exprs
    bubble = e.get("time.pipeline_bubble", sympy.Integer(0))
    if "time.step_s" in e and "time.compute_s" in e:
        exposed = e["time.step_s"] * (1 - bubble) - e["time.compute_s"]
    else:
        exposed = e.get("time.comm_s", sympy.Integer(0))
    out = {"communication": exposed}
    if "time.pipeline_bubble" in e:
        out["pipeline bubble"] = e["time.step_s"] * bubble
    return out


def given_parts(v: Mapping[str, object]) -> dict[str, float]:
    """The parts of the step an estimate gives (``time.breakdown.*``: the calibrated step), empty when it gives
    none; hidden (overlapped) communication takes no time of its own."""
    return {
        k.removeprefix("time.breakdown.").removesuffix("_s").replace("_", " "): float(x)
        for k, x in v.items()
        if k.startswith("time.breakdown.") and not k.endswith(HIDDEN) and isinstance(x, (int, float))
    }


def parts_from(
    v: Mapping[str, object],
    ops: list[tuple[Fraction, Fraction, Fraction]] | None,
    extra: Mapping[str, Fraction],
    devices: int,
) -> dict[str, float] | None:
    """The time breakdown from exact numbers: ``time.breakdown.*`` where present, else each op's bound (in
    ``ops``: compute, memory and bound seconds) summed by the side that binds it, over ``devices``, with
    ``extra`` (communication, bubble) where not zero."""
    given = given_parts(v)
    if given:
        return given
    if not ops:
        return None
    compute = sum((t for c, m, t in ops if c >= m), Fraction(0))
    memory = sum((t for c, m, t in ops if c < m), Fraction(0))
    out = {"compute-bound ops": float(compute / devices), "memory-bound ops": float(memory / devices)}
    out.update({k: float(x) for k, x in extra.items() if x})
    return out


def evaluate_ops(
    rows: list[OpRow], extra: Mapping[str, sympy.Expr], values: Mapping
) -> tuple[list[dict[str, object]], dict[str, Fraction]]:
    """Each op's numbers at ``values``, exact (``count``, ``flops``, ``bytes`` and with a device ``compute_s``,
    ``memory_s``, ``time_s``), and the ``extra`` expressions' (:func:`part_exprs`)."""
    fields = ("count", "flops", "bytes") + (
        ("compute_s", "memory_s", "time_s") if rows and rows[0].time_s is not None else ()
    )
    exprs = [sympy.sympify(getattr(r, f)) for r in rows for f in fields] + [sympy.sympify(e) for e in extra.values()]
    if not exprs:
        return [], {}
    symbols = tuple(sorted(free_symbols(exprs), key=str))
    nums = [Fraction(x) for x in compile_exprs(exprs, symbols, exact=True)(EXACT, *(int(values[s]) for s in symbols))]
    k = len(fields)
    ops = [{"name": r.name, "kind": r.kind, **dict(zip(fields, nums[k * i : k * i + k]))} for i, r in enumerate(rows)]
    return ops, dict(zip(extra, nums[k * len(rows) :]))


def top_ops(ops: list[dict[str, object]], k: int = 10) -> list[dict[str, object]]:
    """The ``k`` ops that take the most time (without a device: the most FLOPs), largest first, then the rest
    summed as one row; each with its ``share`` of the total (a float)."""
    by = "time_s" if ops and "time_s" in ops[0] else "flops"
    ranked = sorted(ops, key=lambda o: -o[by])  # stable: of equal ops, graph order
    total = sum((o[by] for o in ops), Fraction(0))
    out = [dict(o) for o in ranked[:k]]
    rest = ranked[k:]
    if rest:
        summed = {
            f: sum((o[f] for o in rest), Fraction(0))
            for f in ("flops", "bytes", "compute_s", "memory_s", "time_s")
            if f in rest[0]
        }
        out.append({"name": f"{len(rest)} other ops", "kind": "", "count": None, **summed})
    for o in out:
        o["share"] = float(o[by] / total) if total else 0.0
        o["intensity"] = float(o["flops"] / o["bytes"]) if o["bytes"] else None
        o["bound"] = (
            ("compute" if o["compute_s"] >= o["memory_s"] else "memory") if "compute_s" in o and o["count"] else ""
        )
    return out


def time_parts(model, options: Options, values: Mapping, q, flat: Mapping[str, object]) -> dict[str, float] | None:
    """The time breakdown of an estimate (see the module notes); None without a device or for inference."""
    if options.hardware is None or options.inference or given_parts(flat):
        return parts_from(flat, None, {}, 1)  # the estimate's own parts: no op need be evaluated
    rows = op_rows(model, options)
    ops, extra = evaluate_ops(rows, part_exprs(q, rows), values)
    return parts_from(
        flat, [(o["compute_s"], o["memory_s"], o["time_s"]) for o in ops], extra, int(flat["time.devices"])
    )
