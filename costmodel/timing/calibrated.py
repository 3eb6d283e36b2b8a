"""The calibrated step: compute at attained rates, communication on its tier, overlap, bubble, optimizer.

One step of one device, from the graph and the layout (:class:`Knobs`: numbers for an estimate, symbols for
the planner, so the planner compiles this very derivation once)::

    step = m · t_max + bubble + exposed DP communication + optimizer step

* Each pipeline stage runs, per micro-batch, its ops' forward and backward kernels
  (:mod:`costmodel.timing.kernels`: each op at its size on the device, on the device's efficiency curves),
  the forward again where activations are recomputed (full: every layer; selective: the attention core), and
  its exposed communication: tensor-parallel all-reduces (and their recomputed ones), context-parallel ring
  passes and expert all-to-alls not hidden, pipeline point-to-point sends (Megatron's scatter/gather: each of
  the ``tp`` ranks sends 1/tp; interleaving sends ``v`` times as often). ``t_i`` is that stage's time; the first
  stage also runs what precedes the layers (embeddings), the last what follows (final norm, head, loss).
* The schedule (:mod:`costmodel.memory.schedules`) sets the bubble: ``β · (Σ t_i − t_max)``.
* Data-parallel collectives (:func:`dp_seconds`) each in their own window: the gradient all-reduce (no ZeRO)
  or reduce-scatter (ZeRO-1/2) behind the last micro-batch's backward, ZeRO-1/2's parameter all-gather behind
  the next step's forward, ZeRO-3's per-unit gathers and reduce-scatters behind the units they prefetch for;
  only what sticks out is exposed.
* The optimizer step reads and writes the states of the fuller stage at the memory efficiency, under ZeRO
  only the device's 1/dp shard (:func:`optimizer_step_bytes`).

What hides behind compute is a choice (``overlap_comm``): by default data-parallel reduction (bucketed, as
PyTorch DDP/FSDP and Megatron-Core with ``--overlap-grad-reduce`` do) and context-parallel ring passes (ring
attention overlaps them with the blocks of attention), and with ``dp`` ZeRO's parameter all-gather
(``param_gather``; Megatron's ``--overlap-grad-reduce`` and ``--overlap-param-gather`` set the two apart); tensor-parallel all-reduces, pipeline sends and expert
all-to-alls are exposed (DualPipe hides the all-to-alls). A hidden kind costs ``max(0, its time − the compute
it hides behind)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import sympy

from .. import units
from ..devices.attention import with_attention
from ..devices.efficiency import Efficiency
from ..devices.network import collective_seconds, per_node, strides
from ..devices.table import Device
from ..formulas.quantities import Quantities, maximum
from ..graph.analysis import op_nodes, repeated_blocks
from ..graph.cost import Zero
from ..graph.passes import fuse_elementwise
from ..memory.activations import attention_cores, inputs_of_blocks
from ..memory.parallel import split_axes, stage_of
from ..memory.schedules import SCHEDULES, bubble_share
from ..options import Counting
from ..symbols import B
from .data_parallel import dp_seconds, optimizer_step_bytes
from .host import Host, host_of
from .kernels import (
    Split,
    divisors,
    gemm_dtype,
    in_compute_copy,
    kv_bytes,
    on_device,
    op_time,
    routed_bytes,
    tp_bytes,
    tp_collectives,
)
from .links import LINKS, comm_seconds
from .overlap import DEFAULT_OVERLAP, hide, megatron_overlap, overlap_flags, overlap_text


@dataclass(frozen=True)
class Knobs:
    """Every layout choice of a step as an expression (0/1 flags for the one-hot choices)."""

    tp: sympy.Expr
    pp: sympy.Expr
    dp: sympy.Expr
    cp: sympy.Expr
    ep: sympy.Expr
    vpp: sympy.Expr
    micro: sympy.Expr  # sequences per micro-batch on one device
    micro_batches: sympy.Expr
    recompute: Mapping[str, sympy.Expr]  # "selective", "full" → 1 when chosen
    schedule: Mapping[str, sympy.Expr]  # one-hot over SCHEDULES
    megatron_sp: sympy.Expr
    single: sympy.Expr  # 1 when pp == 1
    zero3: sympy.Expr
    # kind of communication → 1 when it hides behind compute (absent: 0, exposed); a symbol in the planner
    overlap: Mapping[str, sympy.Expr] = field(default_factory=lambda: overlap_flags(None, 0))
    stage_layers: tuple[int, int] | None = None  # uneven stages: layers of the first and the last
    pp_number: int | None = None  # pp when it is a number (a 2-stage pipeline has no middle stage)
    dp_sends: sympy.Expr | None = None  # 0/1: whether dp sends anything (default: whether dp_bytes is not 0)
    sharded: sympy.Expr = Zero  # 1 under ZeRO-1/2: a reduce-scatter and an all-gather instead of the all-reduce
    host: Host = field(default_factory=host_of)  # the host's launch floor and overheads (costmodel.timing.host)
    tp_comm_overlap: sympy.Expr = Zero  # 1: TP collectives pipelined with their GEMMs (:func:`tp_overlapped`)
    sm_share: sympy.Expr = Zero  # the share of compute an overlapped collective takes while it runs


@dataclass
class _Region:
    """Per-micro-batch seconds of a region of ops (what precedes the layers, the layers, what follows)."""

    forward: sympy.Expr = Zero
    backward: sympy.Expr = Zero
    selective: sympy.Expr = Zero  # forward of the attention core (selective recompute)
    tp_forward: sympy.Expr = Zero
    tp_backward: sympy.Expr = Zero
    cp: sympy.Expr = Zero
    ep: sympy.Expr = Zero
    tp_overlapped_forward: sympy.Expr = Zero  # exposed TP seconds under --tp-comm-overlap (:func:`tp_overlapped`)
    tp_overlapped_backward: sympy.Expr = Zero
    parts: dict = field(default_factory=dict)


def time_graph(G: nx.DiGraph, fuse: bool = False) -> nx.DiGraph:
    """The kernels a device runs: the graph's ops as declared (each a kernel), or with ``fuse`` its element-wise
    chains folded into their producers (what backward needs is still written).

    Unfused is the default: it reproduces Megatron-LM's measured per-layer times (Korthikanti et al. 2022,
    Table 4: 22B, TP 8) within 3%, where the fused graph is 20% fast (Megatron's real softmax, dropout and
    bias kernels do not reach the bandwidth the fused count assumes)."""
    return fuse_elementwise(G, training=True) if fuse else G


def regions(
    H: nx.DiGraph, dev: Device, eff: Efficiency, dtype: str, k: Knobs, counting: Counting, gemm: str | None = None
) -> dict[str, _Region]:
    """Seconds per micro-batch of ``"first"`` (before the layers), ``"block"`` (all layers) and ``"last"``.
    ``gemm``: the dtype the layers' weight GEMMs run in (:func:`~costmodel.timing.kernels.gemm_dtype`); what
    precedes and follows the layers runs in ``dtype``."""
    split = frozenset(split_axes(H))
    seq_tp = 1 + k.megatron_sp * (k.tp - 1)
    s = Split(k.micro, k.tp, k.cp, k.ep, seq_tp, split)
    F = time_graph(H)
    cores = {n for chain, context in attention_cores(H) for n in (*chain, context)}
    out = {r: _Region() for r in ("first", "block", "last")}
    times = {}
    for name, data in op_nodes(F):
        op = data["op"]
        stage = stage_of(F, name)
        own = gemm if in_compute_copy(op, stage) else None  # Transformer Engine's fp8 scope (kernels' notes)
        t = times[name] = op_time(
            on_device(op, divisors(op, s), k.micro), dev, eff, dtype, counting, k.host.launch_s, own
        )
        where = out[stage]
        count = data["count"]
        where.forward += t.forward * count
        where.backward += t.backward * count
        if name in cores or any(n in cores for n in (op.attr("names") or ())):
            where.selective += t.forward * count
    if k.host.layer_s != 0:  # the host's own time per layer, in each pass of each micro-batch
        out["block"].forward += k.host.layer_s * layers(H)
        out["block"].backward += k.host.layer_s * layers(H)
    st = strides(k.tp, k.cp, k.dp)
    for name, items in tp_collectives(H, split).items():
        where = out[stage_of(H, name)]
        count = H.nodes[name]["count"]
        for phase, op in items:
            sec = collective_seconds("all_reduce", tp_bytes(op, phase, k.micro, k.cp), dev, eff, k.tp, st["tp"])
            if phase == "forward":
                where.tp_forward += sec * count
            else:
                where.tp_backward += sec * count
            if k.tp_comm_overlap != 0 and name in times:
                hidden = tp_overlapped(sec, phase, times[name], k) * count
                if phase == "forward":
                    where.tp_overlapped_forward += hidden
                else:
                    where.tp_overlapped_backward += hidden
    sent: set[tuple] = set()
    for name, data in op_nodes(H):
        op, count, where = data["op"], data["count"], out[stage_of(H, name)]
        if "kv_cache" in data.get("tags", ()):  # ring attention: gather k, v forward; scatter their grads back
            where.cp += (
                2
                * count
                * collective_seconds("all_gather", kv_bytes(op, split, k.micro, k.tp), dev, eff, k.cp, st["cp"])
            )
        route = op.attr("route")
        if op.attr("experts") and route:
            dispatch = str(route) in op.parsed.output
            if dispatch and (data["inputs"][0], count) in sent:
                continue  # SwiGLU's gate and up share one dispatch
            if dispatch:
                sent.add((data["inputs"][0], count))
            nbytes = routed_bytes(op, k.micro) / (seq_tp * k.cp)
            where.ep += 2 * count * collective_seconds("all_to_all", nbytes, dev, eff, k.ep, st["ep"])
    return out


def tp_overlapped(sec: sympy.Expr, phase: str, t, k: Knobs) -> sympy.Expr:
    """Exposed seconds of one tensor-parallel collective (``sec`` in all) under ``--tp-comm-overlap``.

    * Forward (a row-parallel output's all-reduce, or Megatron SP's reduce-scatter and next all-gather): the GEMM it
      depends on is split into ``tp`` chunks and each chunk's exchange runs behind the next chunk's GEMM
      (Transformer Engine's pipelined and ring-exchange overlap; Wang et al., ASPLOS 2023, decomposition): the
      first chunk's exchange is exposed, the rest where it exceeds the GEMM, ``sec/n + max(0, (n − 1)/n·(sec −
      t_GEMM))``.
    * Backward (a column-parallel input gradient): Megatron runs it asynchronously behind that op's other
      backward GEMM — the weight gradient's (half the backward's two GEMMs) without sequence parallelism; with it
      the re-gather of the input behind the input-gradient GEMM and the reduce-scatter behind the weight
      gradient's, so behind the whole backward: ``max(0, sec − window)``.
    """
    n = k.tp
    if phase == "forward":
        return sec / n + maximum(0, (n - 1) / n * (sec - t.forward))
    window = t.backward * (1 + k.megatron_sp) / 2
    return maximum(0, sec - window)


def p2p_seconds(H: nx.DiGraph, dev: Device, eff: Efficiency, k: Knobs) -> sympy.Expr:
    """Pipeline sends per micro-batch on one stage: the layer input forward and its gradient backward, once per
    chunk (``vpp``); each tensor-parallel rank sends 1/tp of it (Megatron's scatter/gather)."""
    nbytes = sympy.Add(*(k.saved.bytes for inputs in inputs_of_blocks(H).values() for k in inputs.values()))
    nbytes = nbytes.xreplace({B: k.micro}) / (k.tp * k.cp)
    st = strides(k.tp, k.cp, k.dp)
    return 2 * k.vpp * (1 - k.single) * collective_seconds("p2p", nbytes, dev, eff, 2, st["pp"])


def step(
    H: nx.DiGraph,
    dev: Device,
    dtype: str,
    k: Knobs,
    *,
    dp_bytes: sympy.Expr,
    optimizer_bytes: sympy.Expr,
    counting: Counting = Counting(),
    dp_parts: Mapping[str, sympy.Expr] | None = None,
    gemm: str | None = None,
) -> dict[str, sympy.Expr]:
    """Seconds of one step and its parts (see the module notes), as expressions of the knobs and the graph.
    ``gemm``: the dtype the layers' weight GEMMs run in (:func:`regions`; default ``dtype``).

    ``dp_bytes``: what one device sends for data parallelism per step (the memory section's
    ``communication_bytes.dp``); ``dp_parts``: under ZeRO, its ``reduce_scatter`` and ``all_gather`` bytes
    (``communication.dp.*``), and under EP the experts' part of each (``expert_all_reduce``,
    ``expert_reduce_scatter``, ``expert_all_gather``: over the expert data-parallel group, :func:`dp_seconds`); ``optimizer_bytes``: what its optimizer step reads and writes.
    """
    eff = dev.attained
    R = regions(H, dev, eff, dtype, k, counting, gemm)
    p2p = p2p_seconds(H, dev, eff, k)
    blk, pre, post = R["block"], R["first"], R["last"]
    shares = dict.fromkeys(("first", "middle", "last"), 1 / k.pp)
    if k.stage_layers is not None:  # uneven: the first and last stages' own layers, the middle ones the rest
        n, (first, last) = layers(H), k.stage_layers
        shares = {
            "first": first / n,
            "middle": (n - first - last) / ((k.pp - 2) * n) if k.pp_number != 2 else Zero,
            "last": last / n,
        }
    rec_sel, rec_full = k.recompute.get("selective", 0), k.recompute.get("full", 0)
    stages = {}
    for stage, share in shares.items():
        own = [(blk, share)]
        if stage == "first":
            own += [(pre, 1), (post, k.single)]
        elif stage == "last":
            own += [(post, 1 - k.single)]
        f = sympy.Add(*(r.forward * w for r, w in own))
        b = sympy.Add(*(r.backward * w for r, w in own))
        rec = share * (rec_full * blk.forward + rec_sel * blk.selective)
        tp = sympy.Add(*(w * (r.tp_forward * (1 + (rec_full if r is blk else 0)) + r.tp_backward) for r, w in own))
        cp = sympy.Add(*(r.cp * w for r, w in own))
        ep = sympy.Add(*(r.ep * w for r, w in own))
        c = f + b + rec
        tp_exposed = hide("tp", tp, c, k.overlap)
        if k.tp_comm_overlap != 0:  # pipelined with the GEMMs (recomputed forwards all-reduce again)
            piped = sympy.Add(
                *(
                    w * (r.tp_overlapped_forward * (1 + (rec_full if r is blk else 0)) + r.tp_overlapped_backward)
                    for r, w in own
                )
            )
            tp_exposed = k.tp_comm_overlap * piped + (1 - k.tp_comm_overlap) * tp_exposed
        exposed = (
            tp_exposed + hide("sp", cp, c, k.overlap) + hide("ep", ep, c, k.overlap) + hide("pp", p2p, c, k.overlap)
        )
        if k.sm_share != 0:  # a collective behind compute takes its share of the SMs while it runs
            exposed += k.sm_share * (tp + cp + ep + p2p - exposed)
        stages[stage] = {"f": f, "b": b + rec, "c": c, "t": c + exposed, "tp": tp, "sp": cp, "ep": ep, "pp": p2p}
    names = ("first", "last") if k.pp_number == 2 else ("first", "middle", "last")
    t_max = maximum(*(stages[s]["t"] for s in names))
    c_max = maximum(*(stages[s]["c"] for s in names))
    total = stages["first"]["t"] * k.single + (1 - k.single) * (
        stages["first"]["t"] + (k.pp - 2) * stages["middle"]["t"] + stages["last"]["t"]
    )
    mid = stages["middle"]
    beta = sympy.Add(
        *(
            flag * bubble_share(name, k.pp, k.vpp, mid["f"], mid["b"])
            for name, flag in k.schedule.items()
            if flag != 0 and name in SCHEDULES
        )
    )
    m = k.micro_batches
    bubble = (1 - k.single) * beta * (total - t_max)
    alive = k.dp_sends if k.dp_sends is not None else sympy.Integer(0) if dp_bytes == 0 else 1
    parts = dict(dp_parts or {})
    experts = {kind: parts.get(f"expert_{kind}", Zero) for kind in ("all_reduce", "reduce_scatter", "all_gather")}
    dp_s, dp_exposed = dp_seconds(
        dev,
        eff,
        k,
        alive,
        dp_bytes,
        parts.get("reduce_scatter", Zero),
        parts.get("all_gather", Zero),
        mid,
        layers(H),
        experts,
    )
    if k.sm_share != 0:  # the hidden part of the dp collectives slows the compute it hides behind
        dp_exposed += k.sm_share * (dp_s - dp_exposed)
    optimizer_s = optimizer_bytes / (dev.memory_bandwidth * eff.memory * eff.sustained) + eff.overhead_s
    pipeline = m * t_max + bubble
    comm = {kind: m * stages["first"][kind] for kind in ("tp", "pp", "sp", "ep")}
    comm["dp"] = dp_s
    exposed = m * t_max - m * c_max + dp_exposed
    optimizer_s = optimizer_s + k.host.step_s  # the host's per-step time, with the step's end
    return {
        "step_s": pipeline + dp_exposed + optimizer_s,
        "compute_s": m * c_max,
        "exposed_communication_s": exposed,
        "hidden_communication_s": maximum(0, sympy.Add(*comm.values()) - exposed),
        "bubble_s": bubble,
        "optimizer_s": optimizer_s,
        "pipeline_bubble": bubble / pipeline,
        **{f"comm.{kind}": v for kind, v in comm.items()},
    }


def knobs(options, q_exprs: Mapping[str, sympy.Expr], devices: int) -> Knobs:
    """The knobs of one estimate: its layout as numbers (micro-batches from the memory section)."""
    lay = options.layout
    micro = q_exprs.get("memory.layout.micro_batch", B)
    n_micro = q_exprs.get("memory.layout.micro_batches", sympy.Integer(1))
    dp = lay.dp
    if lay.devices == 1 and devices > 1:  # --devices without a layout: the batch spread evenly, no gradients sent
        micro, dp = micro / devices, devices
    one = sympy.Integer
    schedule = {s: one(int(lay.schedule == s)) for s in SCHEDULES}
    overlap = megatron_overlap(overlap_flags(options.overlap_comm, schedule["dualpipe"]), options)
    return Knobs(
        one(lay.tp),
        one(lay.pp),
        one(dp),
        one(lay.sp),
        one(lay.ep),
        one(lay.vpp),
        micro,
        n_micro,
        {r: one(int(options.recompute == r)) for r in ("selective", "full")},
        schedule,
        one(int(lay.megatron_sp)),
        one(int(lay.pp == 1)),
        one(int(lay.zero == 3)),
        overlap,
        lay.stage_layers,
        lay.pp,
        sharded=one(int(lay.zero in (1, 2) and dp > 1)),
        host=host_of(options.stack, cuda_graphs=options.cuda_graphs, launch_us=options.launch_us),
        tp_comm_overlap=one(int(options.tp_comm_overlap)),
        sm_share=sympy.Rational(options.comm_sm_share or 0),
    )


def calibrated_quantities(
    G: nx.DiGraph,
    dev: Device,
    dtype: str,
    n: int,
    options,
    q: Quantities,
    model_flops: sympy.Expr,
    hardware_flops: sympy.Expr,
    bound: sympy.Expr,
    tokens: sympy.Expr,
) -> Quantities:
    """The ``time.*``, ``mfu`` and ``hfu`` keys on the calibrated basis (the module notes): what
    :func:`costmodel.timing.quantities.time_quantities` returns when no rate is given. ``options.comm_bytes``
    (extra traffic on named links) is added as exposed communication (hidden with ``options.overlap``)."""

    out = Quantities()
    k = knobs(options, q.exprs, n)
    get = lambda key: q.exprs.get(key, sympy.Integer(0))  # noqa: E731
    opt_bytes = optimizer_step_bytes(
        get("memory_bytes.params"), get("memory_bytes.grads"), get("memory_bytes.optimizer"), options.layout
    )
    # the kernels' own work: a causal FlashAttention kernel skips the masked half, a materialised one does not
    counting = Counting(causal="half" if options.flash else "full")
    dp_parts = {kind: get(f"communication.dp.{kind}_bytes") for kind in ("reduce_scatter", "all_gather")}
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):  # the experts' part, on their own group
        dp_parts[f"expert_{kind}"] = get(f"communication.dp.expert_{kind}_bytes")
    parts = step(
        G,
        dev,
        dtype,
        k,
        dp_bytes=get("communication_bytes.dp"),
        optimizer_bytes=opt_bytes,
        counting=counting,
        dp_parts=dp_parts,
        gemm=gemm_dtype(options, dtype),
    )
    extra = comm_seconds(
        {key: sympy.Integer(v) for key, v in options.comm_bytes}, dev, dict(options.comm_links) or LINKS
    )
    extra_s = sympy.Add(*extra.values())
    exposed_extra = maximum(0, extra_s - parts["compute_s"]) if options.overlap else extra_s
    step_s = parts["step_s"] + exposed_extra
    peak = dev.peak(gemm_dtype(options, dtype))  # MFU: a share of the peak the layers' matmuls run at
    out.info.update(
        {
            "time.hardware": dev.name,
            "time.devices": n,
            "time.dtype": dtype,
            "time.basis": "calibrated",
            "time.efficiency_source": dev.attained.source,
            "time.overlap": options.overlap,
            "time.overlap_comm": overlap_text(k.overlap),
        }
    )
    if gemm_dtype(options, dtype) != dtype:  # the layers' weight GEMMs in the compute copy (MFU: its peak's share)
        out.info["time.gemm_dtype"] = gemm_dtype(options, dtype)
    if options.stack is not None:  # the software stack whose sustained factor this step uses (with_stack)
        out.info["time.stack"] = options.stack
    if options.attention_kernel is not None:  # the fused kernel's measured share (costmodel.devices.attention)
        out.info["time.attention_kernel"] = options.attention_kernel
        out.info["time.attention_source"] = with_attention(dev, options.attention_kernel)[1]
    if any(v is not None for v in (options.gpus_per_node, options.scale_out, options.cluster)):  # on_cluster's
        out.info["time.gpus_per_node"] = dev.attained.node_size
        if dev.scale_out_bandwidth is not None:
            out.add("time.scale_out_bandwidth", dev.scale_out_bandwidth, "number")
    out.add("time.peak_flops", peak, "number")
    out.add("time.model_flops_per_s", model_flops / (step_s * n), "number")
    out.add("time.hardware_flops_per_s", hardware_flops / (step_s * n), "number")
    out.add("time.roofline_step_s", bound / n, "float")
    out.add("time.compute_s", parts["compute_s"], "float")
    lay = options.layout
    kinds = {
        "tp": lay.tp > 1,
        "pp": lay.pp > 1,
        "sp": lay.sp > 1,
        "ep": lay.ep > 1,
        "dp": get("communication_bytes.dp") != 0,
    }
    comm = {kind: parts[f"comm.{kind}"] for kind, used in kinds.items() if used}
    out.info.update({f"time.tier.{kind}": tier(dev, kind, k) for kind in comm})
    comm.update(extra)
    out.add("time.comm_s", sympy.Add(*comm.values()), "float")
    out.add("time.step_s", step_s, "float")
    out.add("time.tokens_per_s", tokens / step_s, "float")
    out.add("mfu", model_flops / (step_s * n * peak), "float")
    out.add("hfu", hardware_flops / (step_s * n * peak), "float")
    for kind, v in comm.items():
        out.add(f"time.comm_by_kind.{kind}", v, "float")
    parts = {
        **parts,
        "exposed_communication_s": parts["exposed_communication_s"] + exposed_extra,
        "hidden_communication_s": parts["hidden_communication_s"] + extra_s - exposed_extra,
    }
    for key in ("compute_s", "exposed_communication_s", "hidden_communication_s", "bubble_s", "optimizer_s"):
        out.add(f"time.breakdown.{key}", parts[key], "float")
    if lay.pp > 1:
        out.add("time.pipeline_bubble", parts["pipeline_bubble"], "float")
    if options.tokens is not None:
        run_s = step_s * q.exprs["flops.training_total"] / model_flops
        out.add("time.training_s", run_s, "float")
        out.add("time.training_days", run_s / units.DAY, "float")
        out.add("time.gpu_hours", run_s * n / 3600, "float")
    return out


def tier(dev: Device, group: str, k: Knobs) -> str:
    """The network tier a parallel ``group`` crosses (``time.tier.*``): ``scale-up`` inside a node, else
    ``scale-out`` with its members per node (TP 16 over 8-GPU nodes: ``scale-out, 8 of 16 a node``)."""
    n = {"tp": k.tp, "pp": k.pp, "sp": k.cp, "ep": k.ep, "dp": k.dp}[group]
    n = 2 if group == "pp" else n  # a pipeline send goes between two neighbouring stages
    g = per_node(n, strides(k.tp, k.cp, k.dp)[group], dev.attained.node_size)
    if not (g.is_number and sympy.sympify(n).is_number):  # a degree left as a symbol (a live report's devices)
        return "as the degrees put it"
    if g >= n:
        return "scale-up"
    return f"scale-out, {g} of {n} a node" if g > 1 else "scale-out, one a node"


def layers(H: nx.DiGraph) -> sympy.Expr:
    """Layers of the repeated blocks (what the pipeline splits)."""
    return sympy.Add(*repeated_blocks(H).values()) if repeated_blocks(H) else sympy.Integer(1)


__all__ = [
    "DEFAULT_OVERLAP",
    "calibrated_quantities",
    "dp_seconds",
    "Knobs",
    "knobs",
    "layers",
    "megatron_overlap",
    "optimizer_step_bytes",
    "overlap_flags",
    "overlap_text",
    "regions",
    "step",
    "tier",
    "time_graph",
]
