"""The layout planner: every valid layout of a run, ranked by predicted step time, with its Pareto front.

``plan(model, hardware=..., devices=N, batch=GBS, seq=T)`` enumerates TP × PP × VPP × DP × CP × EP ×
micro-batch × recompute × ZeRO × schedule (EP, inside DP, only for a model with routed experts), drops the layouts that do not divide or do not fit in the device's memory, and
ranks the rest by the calibrated step (:mod:`costmodel.devices.calibrated`).

The step is derived **once**, with every layout choice a symbol (:class:`~costmodel.devices.calibrated.Knobs`),
and compiled to vectorised Python (:mod:`costmodel.graph.codegen`): the search evaluates that one formula over
arrays of layouts. It is the derivation ``estimate`` runs, with the same kernel counting (a causal
FlashAttention kernel: half the scores) and the same overlap (DualPipe hides the all-to-alls); what it reads
from the memory section (the optimizer step's bytes, the data-parallel bytes) and the memory per device come
from :mod:`.plan_memory`, which replays the memory section's per-stage sums on arrays of layouts. So a
layout's step and memory are ``estimate``'s for that layout (with ``flash`` as the plan's, Megatron sequence
parallelism whenever tp > 1), to float rounding: ``tests/reports/test_plan_exact.py``.
Expert parallelism is searched over the powers of two that divide the experts and the data-parallel size
(or the values given); a dense model runs at ep = 1.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import sympy

from .. import units
from ..devices.calibrated import Knobs, step
from ..devices.plot import check_path, plan_chart  # matplotlib itself only inside, when a chart is drawn
from ..devices.table import device
from ..errors import CostModelError
from ..families import Model, load
from ..formulas import float_mode
from ..graph.analysis import repeated_blocks
from ..graph.codegen import compile_exprs
from ..memory.device import prepared
from ..memory.schedules import SCHEDULES
from ..options import Counting, Options
from ..symbols import B
from .estimate import estimate, resolve
from .plan_memory import MemoryTable, memory, table
from .plan_rank import RECOMPUTE, check_reference, matches, pareto, rank

#: The symbols of a layout in the compiled step (in this order); the last two are numbers of the memory
#: screen (:mod:`.plan_memory`): bytes one device sends for data parallelism and its optimizer step's bytes.
KNOBS = sympy.symbols(
    "tp pp dp cp ep vpp b m sel full msp single zero3 "
    + " ".join(f"s_{s.replace('-', '_')}" for s in SCHEDULES)
    + " dpon dpb optb",
    positive=True,
)


@dataclass(frozen=True)
class Compiled:
    """The step of one model on one device as a vectorised function of the layout (:data:`KNOBS`)."""

    f: object  # pipelined layouts (pp > 1)
    single: object  # pp == 1: the same formula with the pipeline's terms removed before compiling (no 0·∞)
    layers: int
    memory: MemoryTable  # model states and activations by class (plan_memory)
    experts: int = 1  # routed experts per MoE layer (1: a dense model)
    megatron_sp: bool = True  # Megatron sequence parallelism wherever tp > 1 (else nowhere)


def derive(
    m: Model, dev, values: Mapping, options: Options, overlap: tuple[str, ...] | None = None, megatron_sp: bool = True
) -> Compiled:
    """Derive and compile the calibrated step with every layout choice a symbol: the derivation ``estimate``
    runs (:func:`costmodel.devices.calibrated.calibrated_quantities`), with its inputs from the memory
    section taken from :func:`.plan_memory.memory` at evaluation. ``overlap``: the kinds of communication
    hidden behind compute (``estimate``'s ``overlap_comm``; by default its default)."""
    tp, pp, dp, cp, ep, vpp, b, m_, sel, full, msp, single, zero3, *flags, dpon, dpb, optb = KNOBS
    G = prepared(m.graph, options)
    schedule = dict(zip(SCHEDULES, flags))
    k = Knobs(
        tp,
        pp,
        dp,
        cp,
        ep,
        vpp,
        b,
        m_,
        {"selective": sel, "full": full},
        schedule,
        msp,
        single,
        zero3,
        **(
            {"hide": {"ep": schedule["dualpipe"]}}  # as estimate's knobs: DualPipe hides the all-to-alls
            if overlap is None
            else {"overlap": frozenset(overlap)}
        ),
        dp_sends=dpon,
    )
    sub = {s: v for s, v in values.items() if s is not B}
    experts = next((int(v) for s, v in values.items() if str(s) == "n_experts"), 1)
    # the kernels' own work, as estimate counts it: a causal FlashAttention kernel skips the masked half
    counting = Counting(causal="half" if options.flash else "full")
    dtype = options.dtype or G.graph.get("dtype", "bf16")
    s = step(G, dev, dtype, k, dp_bytes=dpb, optimizer_bytes=optb, counting=counting)["step_s"].xreplace(sub)
    layers = sum(int(sympy.sympify(c).xreplace(sub)) for c in repeated_blocks(G).values())
    # the flags first (a term times 0 vanishes), then the sizes: never 0·∞
    one = s.xreplace({single: 1, **{f: int(name == "1f1b") for name, f in zip(SCHEDULES, flags)}})
    one = one.xreplace({pp: 1, vpp: 1})
    mem = table(G, options, values, RECOMPUTE)
    f = compile_exprs([s.xreplace({single: 0})], KNOBS)
    return Compiled(f, compile_exprs([one], KNOBS), layers, mem, experts, megatron_sp)


def layouts(
    devices: int,
    batch: int,
    layers: int,
    seq: int,
    node: int = 8,
    heads: int | None = None,
    micro: tuple[int, ...] = (1, 2, 4, 8),
    vpps: tuple[int, ...] = (2, 3, 4, 6),
    cps: tuple[int, ...] = (1, 2, 4, 8),
    experts: int = 1,
    eps: tuple[int, ...] | None = None,
) -> dict[str, np.ndarray]:
    """Every layout that divides: columns of equal length (tp, pp, dp, cp, ep, vpp, b, m, recompute, zero,
    schedule). ``ep`` takes the values ``eps`` (by default the powers of two up to ``experts``) that divide
    ``experts`` and dp (expert parallelism runs inside the data-parallel group)."""
    if eps is None:
        eps = tuple(1 << i for i in range(experts.bit_length()))
    eps = tuple(e for e in eps if experts % e == 0) or (1,)
    rows = []
    pows = [x for x in (1, 2, 4, 8, 16) if x <= 2 * node]
    for tp, cp in itertools.product(pows, cps):
        if heads and heads % tp or seq % cp:
            continue
        for pp in range(1, min(devices, layers) + 1):
            if devices % (tp * cp * pp) or layers % pp:
                continue
            dp = devices // (tp * cp * pp)
            if batch % dp:
                continue
            for ep in (e for e in eps if dp % e == 0):
                rows += _schedules(tp, pp, dp, cp, ep, batch, layers, micro, vpps)
    if not rows:
        raise CostModelError(
            f"plan: no layout of {units.devices(devices)} divides batch {batch} and {units.plural(layers, 'layer')}"
        )
    a = np.array(rows, dtype=np.int64)
    return dict(zip(("tp", "pp", "dp", "cp", "ep", "vpp", "b", "m", "recompute", "zero", "schedule"), a.T))


def _schedules(tp, pp, dp, cp, ep, batch, layers, micro, vpps) -> list[tuple[int, ...]]:
    """The rows of one (tp, pp, dp, cp, ep): every schedule, micro-batch, recompute and ZeRO stage that holds."""
    rows = []
    scheds = (
        [("1f1b", 1)]
        if pp == 1
        else [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1)]
        + [("interleaved", v) for v in vpps if layers % (pp * v) == 0]
        + ([("dualpipe", 1)] if pp % 2 == 0 else [])
    )
    for b in micro:
        if (batch // dp) % b:
            continue
        mb = batch // dp // b
        if pp > 1 and mb < pp:  # a pipeline with fewer micro-batches than stages idles most of the step
            continue
        for (sched, v), r, z in itertools.product(scheds, range(3), range(4)):
            if (z == 3 and pp > 1) or (z and dp == 1):  # ZeRO shards over dp; FSDP runs without a pipeline
                continue
            if (sched == "interleaved" and mb % pp) or (sched == "dualpipe" and mb < 2 * pp):
                continue  # Megatron's interleaving needs m % p = 0; DualPipe needs m >= 2p
            rows.append((tp, pp, dp, cp, ep, v, b, mb, r, z, SCHEDULES.index(sched)))
    return rows


def evaluate(c: Compiled, lay: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted step seconds, memory bytes per device) of every layout (vectorised): what ``estimate``
    gives for each (``time.step_s``, ``memory_bytes.total``)."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep, v, b, m, r, z, s = (
        f(lay[k]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "b", "m", "recompute", "zero", "schedule")
    )
    mem = memory(c.memory, lay, c.megatron_sp)
    flags = [f(s == i) for i in range(len(SCHEDULES))]
    # the optimizer reads weights, states and gradients and writes weights and states back
    opt = 2 * (mem["params"] + mem["optimizer"]) + 2 * mem["grads"]
    msp = f((tp > 1) & c.megatron_sp)
    args = (tp, pp, dp, cp, ep, v, b, m, f(r == 1), f(r == 2), msp, f(pp == 1), f(z == 3), *flags)
    args += (f(dp > 1), mem["dp_bytes"], opt)
    mode, many = float_mode(), pp > 1
    t = np.empty(tp.shape)
    for sel, fn in ((many, c.f), (~many, c.single)):
        if sel.any():
            (t[sel],) = (np.broadcast_to(x, tp[sel].shape) for x in fn(mode, *(a[sel] for a in args)))
    return t, mem["total"]


def _fields(fields: Mapping[str, object]) -> str:
    return ",".join(f"{k}={'|'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in fields.items())


def _progress(done: int, total: int, started: float) -> None:
    if time.perf_counter() - started > 1:
        bar = "#" * int(30 * done / total)
        print(
            f"\rplan: [{bar:<30}] {done:,}/{total:,} layouts",
            end="" if done < total else "\n",
            file=sys.stderr,
            flush=True,
        )


#: Layouts a plan's chart draws besides its Pareto front: the fastest fitting ones.
CHARTED = 300


def plan(
    model: Model | str,
    *,
    hardware,
    devices: int,
    batch: int,
    seq: int,
    settings: Mapping | None = None,
    top: int = 10,
    tokens: int | None = None,
    verify: bool = False,
    flash: bool = True,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    progress: bool = True,
    reference: Mapping[str, object] | None = None,
    ep: tuple[int, ...] | None = None,
    plot: str | None = None,
    only: Mapping[str, object] | None = None,
    overlap_comm: tuple[str, ...] | None = None,
    megatron_sp: bool = True,
) -> dict[str, object]:
    """The best layouts of ``model`` on ``devices`` × ``hardware`` for a global batch of ``batch`` sequences of
    ``seq`` tokens (see the module notes). Returns ``layouts`` (the top ones, fastest first), ``pareto`` (time
    against memory), ``searched`` and ``fitting`` counts, ``layouts_per_s`` of the vectorised evaluation. Each
    layout carries its ``rank``, its step's ``step_rank`` among the distinct steps, and the ``tie_size`` and its
    ``tie_position`` within that step's tie (:func:`~costmodel.reports.plan_rank.rank`). ``reference`` (fields
    of a layout, e.g. a published one: ``{"tp": 8, "pp": 8, "schedule": "interleaved"}``) adds ``reference``: the
    best-placed fitting layout with those fields, its place and its step over the best one's (``of_best``), or
    None where none fits. ``ep``: the expert-parallel sizes to try (a model with routed experts; by default the
    powers of two that divide them). With ``plot`` (a ``.png``/``.svg``/``.pdf`` path; needs matplotlib), also
    draws step time against memory per device for the :data:`CHARTED` fastest fitting layouts and the Pareto
    front (``devices.plot.plan_chart``). ``only`` (fields of a layout, each a value or a tuple of values, e.g.
    ``{"zero": 0, "schedule": ("1f1b", "interleaved")}``) searches only the layouts with them: a software
    stack's features (Megatron-LM 2021: no ZeRO, 1F1B or interleaved). ``overlap_comm``: the kinds of
    communication hidden behind compute, as ``estimate``'s (``()``: none); ``megatron_sp=False``: no
    Megatron sequence parallelism (it is on wherever tp > 1 by default)."""
    started = time.perf_counter()
    if reference:
        check_reference(reference)  # before the search, not after it
    if only:
        check_reference(only, "plan --only")
    if plot is not None:
        check_path(plot)  # a bad name is refused before the search
    m = model if isinstance(model, Model) else load(model, settings)
    dev = device(hardware)
    options = Options.make(
        batch=batch, seq=seq, flash=flash, precision=precision, optimizer=optimizer, overlap_comm=overlap_comm
    )
    values = resolve(m, options)
    if progress and sys.stderr.isatty():
        print("plan: deriving the step formula...", file=sys.stderr, flush=True)
    c = derive(m, dev, values, options, options.overlap_comm, megatron_sp)
    heads = next((int(values[s]) for s in values if str(s) == "h"), None)
    lay = layouts(devices, batch, c.layers, seq, dev.attained.node_size, heads, experts=c.experts, eps=ep)
    if only:
        keep = matches(lay, only)
        if not keep.any():
            raise CostModelError(
                f"plan --only: no layout that divides has {_fields(only)}; expected values it can take"
            )
        lay = {k: v[keep] for k, v in lay.items()}
    n = len(lay["tp"])
    t0 = time.perf_counter()
    chunk = 1 << 16
    times, mems = np.empty(n), np.empty(n)
    for lo in range(0, n, chunk):
        part = {k: v[lo : lo + chunk] for k, v in lay.items()}
        times[lo : lo + chunk], mems[lo : lo + chunk] = evaluate(c, part)
        if progress:
            _progress(min(lo + chunk, n), n, started)
    rate = n / max(time.perf_counter() - t0, 1e-9)
    fits = np.flatnonzero(mems <= float(dev.memory_bytes))
    order, step_rank = rank(times, mems, lay, fits)
    place = np.zeros(n, dtype=np.int64)
    place[order] = np.arange(1, len(order) + 1)
    first = {}  # the place of each tie group's first layout
    for j in order:
        first.setdefault(int(step_rank[j]), int(place[j]))
    size = np.bincount(step_rank[fits], minlength=int(step_rank.max()) + 1) if len(fits) else np.zeros(1, np.int64)
    front = fits[pareto(times[fits], mems[fits])] if len(fits) else fits
    tokens_step = batch * seq

    def row(j: int) -> dict[str, object]:
        out = {k: int(lay[k][j]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero")}
        out.update(
            rank=int(place[j]),  # the place in the ranking (the ties broken, see rank)
            step_rank=int(step_rank[j]),  # the place of its step among the distinct steps
            tie_size=int(size[step_rank[j]]),  # layouts with this step
            tie_position=int(place[j]) - first[int(step_rank[j])] + 1,  # its place among them
        )
        out.update(
            micro_batch=int(lay["b"][j]),
            micro_batches=int(lay["m"][j]),
            recompute=RECOMPUTE[lay["recompute"][j]],
            schedule=SCHEDULES[lay["schedule"][j]],
            step_s=float(times[j]),
            tokens_per_s=tokens_step / float(times[j]),
            memory_bytes=float(mems[j]),
        )
        if tokens is not None:
            out["training_days"] = tokens / tokens_step * float(times[j]) / 86400
        return out

    best = [row(j) for j in order[:top]]
    if verify:
        for r in best:
            e = estimate(
                m,
                batch=batch,
                seq=seq,
                hardware=dev,
                devices=devices,
                flash=flash,
                precision=precision,
                optimizer=optimizer,
                tp=r["tp"],
                pp=r["pp"],
                dp=r["dp"],
                cp=r["cp"],
                ep=r["ep"],
                zero=r["zero"],
                micro_batch=r["micro_batch"],
                recompute=r["recompute"],
                megatron_sp=megatron_sp and r["tp"] > 1,
                overlap_comm=overlap_comm,
                **(
                    {"vpp": r["vpp"]}
                    if r["schedule"] == "interleaved"
                    else {"schedule": r["schedule"]}
                    if r["pp"] > 1
                    else {}
                ),
            )
            r["verified"] = {"step_s": e["time"]["step_s"], "memory_bytes": e["memory_bytes"]["total"]}
    extra: dict[str, object] = {}
    if reference:
        hit = np.flatnonzero(matches(lay, reference) & (place > 0))
        if len(hit):
            j = hit[np.argmin(place[hit])]
            extra["reference"] = {**row(int(j)), "of_best": float(times[j] / times[order[0]])}
        else:
            extra["reference"] = None  # no fitting layout has those fields
    out = {
        "model": m.name,
        "hardware": dev.name,
        "devices": devices,
        "batch": batch,
        "seq": seq,
        "searched": n,
        "fitting": int(len(fits)),
        "layouts_per_s": rate,
        "layouts": best,
        "pareto": [row(j) for j in front],
        **extra,
    }
    if plot is not None:
        plan_chart({**out, "chart": [row(j) for j in order[:CHARTED]]}, plot, capacity=int(dev.memory_bytes))
    return out


__all__ = ["derive", "evaluate", "layouts", "pareto", "plan", "rank"]
