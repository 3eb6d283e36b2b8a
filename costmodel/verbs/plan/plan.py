"""The layout planner: every valid layout of a run, ranked by predicted step time, with its Pareto front.

``plan(model, hardware=..., devices=N, batch=GBS, seq=T)`` enumerates TP × PP × VPP × DP × CP × EP ×
micro-batch × recompute × ZeRO × schedule (EP, inside DP, only for a model with routed experts), drops the layouts that do not divide or do not fit in the device's memory, and
ranks the rest by the calibrated step (:mod:`costmodel.timing.calibrated`).

The step is derived **once**, with every layout choice a symbol (:class:`~costmodel.timing.calibrated.Knobs`),
and compiled to vectorised Python (:mod:`costmodel.formulas.python`): the search evaluates that one formula over
arrays of layouts. It is the derivation ``estimate`` runs, with the same kernel counting (a causal
FlashAttention kernel: half the scores) and the same overlap (DualPipe hides the all-to-alls); what it reads
from the memory section (the optimizer step's bytes, the data-parallel bytes) and the memory per device come
from :mod:`.memory`, which replays the memory section's per-stage sums on arrays of layouts. So a
layout's step and memory are ``estimate``'s for that layout (with ``flash`` as the plan's, Megatron sequence
parallelism whenever tp > 1), to float rounding: ``tests/verbs/test_plan_exact.py``.
Expert parallelism is searched over the powers of two that divide the experts and the data-parallel size
(or the values given); a dense model runs at ep = 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import sympy

from ... import units
from ...devices.attention import with_attention
from ...devices.cluster import cluster_of, on_cluster
from ...devices.table import device, with_stack
from ...errors import CostModelError
from ...families import Model, load
from ...formulas.compiled import float_mode, run_source
from ...formulas.python import source
from ...graph.analysis import repeated_blocks
from ...memory.device import prepared
from ...memory.schedules import SCHEDULES
from ...options import Counting, Options
from ...render.plot import check_path, plan_chart  # matplotlib itself only inside, when a chart is drawn
from ...sections.fits import judged
from ...sections.run import finetuned, resolve
from ...symbols import B
from ...timing.calibrated import Knobs, megatron_overlap, overlap_flags, step
from ...timing.host import host_of
from ...timing.kernels import gemm_dtype
from ..estimate import estimate
from .memory import MemoryTable, memory, table
from .rank import RECOMPUTE, check_reference, pareto, rank
from .search import CHUNK, Search, Space, space
from .search import search as run_search

#: The symbols of a layout in the compiled step (in this order); the last two are numbers of the memory
#: screen (:mod:`.memory`): bytes one device sends for data parallelism and its optimizer step's bytes.
KNOBS = sympy.symbols(
    "tp pp dp cp ep vpp b m sel full msp single zero3 "
    + " ".join(f"s_{s.replace('-', '_')}" for s in SCHEDULES)
    + " dpon dpb optb sharded dprs dpag",
    positive=True,
)


@dataclass(frozen=True)
class Compiled:
    """The step of one model on one device as a vectorised function of the layout (:data:`KNOBS`)."""

    f: object  # pipelined layouts (pp > 1)
    single: object  # pp == 1: the same formula with the pipeline's terms removed before compiling (no 0·∞)
    layers: int
    memory: MemoryTable  # model states and activations by class (.memory)
    experts: int = 1  # routed experts per MoE layer (1: a dense model)
    megatron_sp: bool = True  # Megatron sequence parallelism wherever tp > 1 (else nowhere)
    sources: tuple[str, str] | None = None  # the generated source of f and single: how it pickles to a worker

    def __reduce__(self):
        if self.sources is None:
            raise CostModelError("plan: a compiled step without its source cannot travel to a worker")
        return (_compiled, (self.sources, self.layers, self.memory, self.experts, self.megatron_sp))


def _compiled(sources: tuple[str, str], layers: int, memory: MemoryTable, experts: int, megatron_sp: bool) -> Compiled:
    from ...formulas.chunks import _fn  # the engine's cache of compiled sources: a worker compiles each once

    return Compiled(_fn(sources[0]), _fn(sources[1]), layers, memory, experts, megatron_sp, sources)


def derive(
    m: Model, dev, values: Mapping, options: Options, overlap: tuple[str, ...] | None = None, megatron_sp: bool = True
) -> Compiled:
    """Derive and compile the calibrated step with every layout choice a symbol: the derivation ``estimate``
    runs (:func:`costmodel.timing.calibrated.calibrated_quantities`), with its inputs from the memory
    section taken from :func:`.memory.memory` at evaluation. ``overlap``: the kinds of communication
    hidden behind compute (``estimate``'s ``overlap_comm``; by default its default)."""
    tp, pp, dp, cp, ep, vpp, b, m_, sel, full, msp, single, zero3, *flags, dpon, dpb, optb, sharded, dprs, dpag = KNOBS
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
        megatron_overlap(overlap_flags(overlap, schedule["dualpipe"]), options),  # as estimate's knobs
        dp_sends=dpon,
        sharded=sharded,
        host=host_of(options.stack, cuda_graphs=options.cuda_graphs, launch_us=options.launch_us),
        tp_comm_overlap=sympy.Integer(int(options.tp_comm_overlap)),
        sm_share=sympy.Rational(options.comm_sm_share or 0),
    )
    sub = {s: v for s, v in values.items() if s is not B}
    experts = next((int(v) for s, v in values.items() if str(s) == "n_experts"), 1)
    # the kernels' own work, as estimate counts it: a causal FlashAttention kernel skips the masked half
    counting = Counting(causal="half" if options.flash else "full")
    dtype = options.dtype or G.graph.get("dtype", "bf16")
    parts = {"reduce_scatter": dprs, "all_gather": dpag}
    s = step(
        G,
        dev,
        dtype,
        k,
        dp_bytes=dpb,
        optimizer_bytes=optb,
        counting=counting,
        dp_parts=parts,
        gemm=gemm_dtype(options, dtype),
    )
    s = s["step_s"].xreplace(sub)
    layers = sum(int(sympy.sympify(c).xreplace(sub)) for c in repeated_blocks(G).values())
    # the flags first (a term times 0 vanishes), then the sizes: never 0·∞
    one = s.xreplace({single: 1, **{f: int(name == "1f1b") for name, f in zip(SCHEDULES, flags)}})
    one = one.xreplace({pp: 1, vpp: 1})
    mem = table(G, options, values, RECOMPUTE, megatron_sp)
    sources = (source([s.xreplace({single: 0})], KNOBS), source([one], KNOBS))
    return Compiled(run_source(sources[0]), run_source(sources[1]), layers, mem, experts, megatron_sp, sources)


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
    sp = layout_space(devices, batch, layers, seq, node, heads, micro, vpps, cps, experts, eps)
    return sp.columns(0, sp.size)


def layout_space(
    devices,
    batch,
    layers,
    seq,
    node=8,
    heads=None,
    micro=(1, 2, 4, 8),
    vpps=(2, 3, 4, 6),
    cps=(1, 2, 4, 8),
    experts=1,
    eps=None,
    only: Mapping[str, object] | None = None,
) -> Space:
    """The layouts of :func:`layouts` by flat index, none listed (:class:`~.search.Space`); with ``only``
    (fields of a layout, see :func:`plan`), only those that have them."""
    sp = space(devices, batch, layers, seq, node, heads, micro, vpps, cps, experts, eps, only)
    if only and not sp.size:
        raise CostModelError(f"plan --only: no layout that divides has {_fields(only)}; expected values it can take")
    if not sp.size:
        raise CostModelError(
            f"plan: no layout of {units.devices(devices)} divides batch {batch} and {units.plural(layers, 'layer')}"
        )
    return sp


def evaluate(c: Compiled, lay: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted step seconds, memory bytes per device) of every layout (vectorised): what ``estimate``
    gives for each (``time.step_s``, and the bytes its fit is judged by: ``memory_bytes.peak`` on one pipeline
    stage, else ``memory_bytes.total``; :func:`costmodel.sections.fits.judged`)."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep, v, b, m, r, z, s = (
        f(lay[k]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "b", "m", "recompute", "zero", "schedule")
    )
    mem = memory(c.memory, lay, c.megatron_sp)
    flags = [f(s == i) for i in range(len(SCHEDULES))]
    # the optimizer reads weights, states and gradients and writes weights and states back: under ZeRO its
    # 1/dp shard of them (costmodel.timing.calibrated.optimizer_step_bytes)
    up = lambda x: np.ceil(x - 1e-9 * np.abs(x))  # noqa: E731
    params = np.where((z == 1) | (z == 2), up(mem["params"] / dp), mem["params"])
    grads = np.where(z == 1, up(mem["grads"] / dp), mem["grads"])
    opt = 2 * (params + mem["optimizer"]) + 2 * grads
    msp = f((tp > 1) & c.megatron_sp)
    args = (tp, pp, dp, cp, ep, v, b, m, f(r == 1), f(r == 2), msp, f(pp == 1), f(z == 3), *flags)
    args += (f(dp > 1), mem["dp_bytes"], opt, f((z > 0) & (z < 3) & (dp > 1)), mem["dp_reduce_scatter"])
    args += (mem["dp_all_gather"],)
    mode, many = float_mode(), pp > 1
    t = np.empty(tp.shape)
    for sel, fn in ((many, c.f), (~many, c.single)):
        if sel.any():
            (t[sel],) = (np.broadcast_to(x, tp[sel].shape) for x in fn(mode, *(a[sel] for a in args)))
    return t, mem["need"]


#: The fields in which layouts folded into one distinct row may differ (the rest are equal or follow from them).
FOLDED = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "micro_batches", "recompute", "zero", "schedule")


def distinct(step_rank: np.ndarray, memory: np.ndarray) -> list[tuple[int, list[int]]]:
    """The positions (ranking order) of the first layout of each distinct (step, memory) pair, each with the
    positions of the later ones it stands for: layouts of one step (a tie, :data:`~.rank.TIE`) and the same
    bytes per device differ only in what neither measures (selective recompute under FlashAttention recomputes
    nothing the step counts), and the ranking puts the preferred one first (least recompute, lowest ZeRO,
    simplest schedule).

    >>> distinct(np.array([1, 1, 1, 2]), np.array([5.0, 5.0, 6.0, 5.0]))
    [(0, [1]), (2, []), (3, [])]
    """
    first: dict[tuple, int] = {}
    out: list[tuple[int, list[int]]] = []
    for j, key in enumerate(zip(step_rank.tolist(), memory.tolist())):
        if key in first:
            out[first[key]][1].append(j)
        else:
            first[key] = len(out)
            out.append((j, []))
    return out


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


def _why_not(reference: Mapping[str, object], layers: int, devices: int) -> str:
    """Why no searched layout has the ``reference``'s fields: the search's own limits first (even pipeline
    stages, the device count), else that none with them fits or divides."""
    pp, degrees = int(reference.get("pp", 1)), 1
    for f in ("tp", "pp", "dp", "cp"):
        degrees *= int(reference.get(f, 1))
    if pp > 1 and layers % pp:
        return (
            f"pp {pp} does not divide the {layers:,} layers, and plan searches even pipeline stages only; "
            f"'costmodel estimate' takes uneven ones (--pp {pp} --stage-layers FIRST,LAST)"
        )
    if degrees > devices:
        return f"its degrees multiply to {degrees:,} devices, more than the {devices:,} searched"
    return "no layout with those fields fits the device's memory or divides the batch, layers and heads"


def plan(
    model: Model | str,
    *,
    hardware=None,
    devices: int | None = None,
    batch: int | None = None,
    seq: int | None = None,
    settings: Mapping | None = None,
    options: Options | None = None,
    top: int = 10,
    tokens: int | None = None,
    verify: bool = False,
    flash: bool = True,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    implementation: str = "fused",
    progress: bool = True,
    reference: Mapping[str, object] | None = None,
    ep: tuple[int, ...] | None = None,
    plot: str | None = None,
    only: Mapping[str, object] | None = None,
    overlap_comm: tuple[str, ...] | None = None,
    megatron_sp: bool = True,
    stack: str | None = None,
    workers: int = 1,
    dask: object = None,
    chunk: int = CHUNK,
) -> dict[str, object]:
    """The best layouts of ``model`` on ``devices`` × ``hardware`` for a global batch of ``batch`` sequences of
    ``seq`` tokens (see the module notes). Returns ``layouts`` (the top ones, fastest first), ``pareto`` (time
    against memory), ``distinct`` (the first ``top`` distinct layouts: those of equal step and memory folded
    into the first, :func:`distinct`, each with ``same``, how many it stands for, and ``same_as``, the fields
    in which they differ), ``searched`` and ``fitting`` counts, ``layouts_per_s`` of the search (both passes). Each
    layout carries its ``rank``, its step's ``step_rank`` among the distinct steps, and the ``tie_size`` and its
    ``tie_position`` within that step's tie (:func:`~costmodel.verbs.plan.rank.rank`). ``reference`` (fields
    of a layout, e.g. a published one: ``{"tp": 8, "pp": 8, "schedule": "interleaved"}``) adds ``reference``: the
    best-placed fitting layout with those fields, its place and its step over the best one's (``of_best``), or
    None where none fits. ``ep``: the expert-parallel sizes to try (a model with routed experts; by default the
    powers of two that divide them). With ``plot`` (a ``.png``/``.svg``/``.pdf`` path; needs matplotlib), also
    draws step time against memory per device for the :data:`CHARTED` fastest fitting layouts and the Pareto
    front (``render.plot.plan_chart``). ``only`` (fields of a layout, each a value or a tuple of values, e.g.
    ``{"zero": 0, "schedule": ("1f1b", "interleaved")}``) searches only the layouts with them: a software
    stack's features (Megatron-LM 2021: no ZeRO, 1F1B or interleaved). ``overlap_comm``: the kinds of
    communication hidden behind compute, as ``estimate``'s (``()``: none); ``megatron_sp=False``: no
    Megatron sequence parallelism (it is on wherever tp > 1 by default). ``options``: an :class:`~costmodel.options.Options` as every verb takes (its device, batch, sequence,
    flash, precision, optimizer, implementation, communication overlap and stack replace the planner's defaults;
    its fine-tuning choices, ``lora``, ``lora_targets``, ``freeze``, ``base_dtype``, ``qlora``, rewrite the graph).
    ``implementation``: whose kernels and loop the memory describes (``estimate --implementation``). ``stack``: the
    software stack whose
    ``sustained`` factor the step uses (:func:`~costmodel.devices.table.with_stack`; default the device's own),
    then named in the result's ``stack``.
    The layouts are searched in chunks of ``chunk`` by the sweeps' chunk
    engine (:mod:`.search`): in ``workers`` local processes, or on a Dask cluster at ``dask`` (a scheduler
    address or a ``distributed.Client``); the result is the same."""
    started = time.perf_counter()
    if options is not None:  # the choices every verb takes: they replace the planner's own defaults
        given = Options.make(options)
        hardware = hardware if hardware is not None else given.hardware
        batch = batch if batch is not None else given.batch
        seq = seq if seq is not None else given.seq
        flash, precision, optimizer = given.flash, given.precision, given.optimizer
        implementation = given.implementation
        overlap_comm = given.overlap_comm if overlap_comm is None else overlap_comm
        stack = stack if stack is not None else getattr(given, "stack", None)
        devices = devices if devices is not None else (given.layout.devices if given.layout.devices > 1 else None)
    missing = [
        k for k, v in (("hardware", hardware), ("devices", devices), ("batch", batch), ("seq", seq)) if v is None
    ]
    if missing:
        raise CostModelError(f"plan: give {', '.join(missing)} (keywords, or in options)")
    if reference:
        check_reference(reference)  # before the search, not after it
    if only:
        check_reference(only, "plan --only")
    if plot is not None:
        check_path(plot)  # a bad name is refused before the search
    m = model if isinstance(model, Model) else load(model, settings)
    if options is not None:  # fine-tuning (LoRA, QLoRA, frozen weights): the graph whose states are planned
        m = finetuned(m, given)
    dev = with_stack(device(hardware), stack)
    if options is not None:  # the cluster and attention kernel the options describe
        dev = with_attention(on_cluster(dev, cluster_of(given)), given.attention_kernel)[0]
    options = Options.make(
        batch=batch,
        seq=seq,
        flash=flash,
        precision=precision,
        optimizer=optimizer,
        overlap_comm=overlap_comm,
        implementation=implementation,
    )
    values = resolve(m, options)
    if progress and sys.stderr.isatty():
        print("plan: deriving the step formula...", file=sys.stderr, flush=True)
    c = derive(m, dev, values, options, options.overlap_comm, megatron_sp)
    heads = next((int(values[s]) for s in values if str(s) == "h"), None)
    sp = layout_space(
        devices, batch, c.layers, seq, dev.attained.node_size, heads, experts=c.experts, eps=ep, only=only
    )
    n = sp.size
    t0 = time.perf_counter()
    need = max(4 * top, CHARTED if plot is not None else 1)  # more than top: duplicates fold into distinct rows
    while True:
        found = run_search(
            Search(sp, c, evaluate, float(dev.memory_bytes), reference or None),
            need,
            workers=workers,
            dask=dask,
            chunk=chunk,
            progress=(lambda done: _progress(done, n, started)) if progress else None,
        )
        kept = distinct(found.rows["step_rank"], found.rows["memory"])
        if len(kept) >= top or len(found.rows["step_rank"]) >= found.fitting:
            break
        need *= 4
    rate = n / max(time.perf_counter() - t0, 1e-9)
    rows = found.rows
    times = rows["step_s"]
    tokens_step = batch * seq

    def row(j: int) -> dict[str, object]:  # j: a position in found.rows, which are in ranking order
        out = {k: int(rows[k][j]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero")}
        out.update(
            rank=int(rows["place"][j]),  # the place in the ranking (the ties broken, see rank)
            step_rank=int(rows["step_rank"][j]),  # the place of its step among the distinct steps
            tie_size=int(rows["tie_size"][j]),  # layouts with this step
            tie_position=int(rows["tie_position"][j]),  # its place among them
        )
        out.update(
            micro_batch=int(rows["b"][j]),
            micro_batches=int(rows["m"][j]),
            recompute=RECOMPUTE[rows["recompute"][j]],
            schedule=SCHEDULES[rows["schedule"][j]],
            step_s=float(times[j]),
            tokens_per_s=tokens_step / float(times[j]),
            memory_bytes=float(rows["memory"][j]),
            memory_by="peak" if rows["pp"][j] == 1 else "total",  # which number memory_bytes is (sections.fits)
        )
        if tokens is not None:
            out["training_days"] = tokens / tokens_step * float(times[j]) / units.DAY
        return out

    order = range(min(need, found.fitting))
    best = [row(j) for j in order[:top]]
    folded = []  # the first top distinct layouts, each with the layouts of the same step and memory it stands for
    for j, same in kept[:top]:
        r = row(j)
        r["same"] = len(same)  # layouts after it in the ranking with its step and memory
        r["same_as"] = [{k: v for k, v in row(i).items() if k in FOLDED and v != r[k]} for i in same]
        folded.append(r)
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
                implementation=implementation,
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
            need, by = judged(e["memory_bytes"], "")
            r["verified"] = {"step_s": e["time"]["step_s"], "memory_bytes": need, "memory_by": by}
    extra: dict[str, object] = {}
    if reference:
        j = found.reference
        if j is not None:
            extra["reference"] = {**row(j), "of_best": float(times[j] / times[0])}
        else:
            extra["reference"] = None  # no fitting layout has those fields
            extra["reference_reason"] = _why_not(reference, c.layers, devices)
    out = {
        "model": m.name,
        "hardware": dev.name,
        "devices": devices,
        "batch": batch,
        "seq": seq,
        "searched": n,
        "fitting": found.fitting,
        "layouts_per_s": rate,
        "layouts": best,
        "distinct": folded,  # the text table's rows: layouts of equal step and memory folded into the first
        "pareto": [row(int(j)) for j in found.front],
        **extra,
        **({"stack": stack} if stack is not None else {}),  # only when chosen: the default's output is unchanged
    }
    if plot is not None:
        plan_chart({**out, "chart": [row(j) for j in order[:CHARTED]]}, plot, capacity=int(dev.memory_bytes))
    return out


__all__ = ["derive", "distinct", "evaluate", "layouts", "pareto", "plan", "rank"]
