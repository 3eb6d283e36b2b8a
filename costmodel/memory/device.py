"""Per-device memory of a step (the report's memory section), as quantities.

:func:`memory_quantities` composes :mod:`.states` (model states), :mod:`.activations` (kept tensors),
:mod:`.peak` (liveness), :mod:`.inference` (KV cache, inference weights, working set) and :mod:`.parallel`
(layouts) into flat dotted keys, every number per device and an expression of the graph's symbols
(:class:`~costmodel.formulas.quantities.Quantities`); ``memory.conventions.*`` says how each
``memory_bytes.*`` line is counted. The global batch B is split into micro-batches: a device runs
``micro_batch`` sequences at a time (default B / dp).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from collections.abc import Mapping

import networkx as nx
import sympy

from .. import units
from ..formulas.compiled import Text, verbatim
from ..formulas.quantities import Quantities, choose, maximum, whole
from ..graph.analysis import in_block, repeated_blocks, structure
from ..graph.cost import Zero
from ..graph.passes import attention_chains, attention_pass
from ..options import Layout, Options
from ..options.policies import ATTENTION_ABOUT, optimizer, precision, weight_format
from ..symbols import B
from .activations import activations
from .loop import training_loop
from .parallel import (
    activation_shares,
    communication,
    device_states,
    dp_by_group,
    expert_states,
    layout_checks,
    layout_in_flight,
    layout_share,
    split_axes,
    split_share,
    stages,
    weight_share,
)
from .peak import peak

#: The categories of ``memory_bytes.peak_breakdown``, as MemTracker's PARAM, GRAD, OPT, ACT and TEMP.
PEAK_PARTS = ("params", "grads", "optimizer", "activations", "temporaries")

STATE_KEYS = ("params", "grads", "optimizer")
LAYOUT_KEYS = ("dp", "tp", "pp", "sp", "ep", "zero", "megatron_sp", "devices")


#: The prepared graph of each graph and attention implementation, made once: the memory, time and serving
#: sections and the planner all describe the same prepared graph (weak keys: a graph nobody holds is dropped).
_PREPARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prepared(G: nx.DiGraph, options: Options) -> nx.DiGraph:
    """The graph the memory numbers describe: the attention implementation's pass applied
    (:func:`~costmodel.graph.passes.attention_pass`: FlashAttention, an error where it cannot remove the T×T
    scores; transformers' eager attention, its softmax in fp32). Applied once per graph and implementation
    (graphs are not changed once built: every pass returns a new one)."""
    done = _PREPARED.setdefault(G, {})
    if options.attention not in done:
        done[options.attention] = attention_pass(G, options.attention)
    return done[options.attention]


def attention_text(G: nx.DiGraph, H: nx.DiGraph) -> str:
    """How attention is counted, read off the rewritten graph ``H`` (not off a flag)."""
    fused = H.graph.get("rewritten", {}).get("flash_attention", ())
    if fused and not any(True for _ in attention_chains(H)):
        return "FlashAttention (no T×T)"
    if not fused and not any(True for _ in attention_chains(G)):
        return "none materialised (no attention chain in the graph)"
    if H.graph.get("rewritten", {}).get("eager_attention"):
        return "scores materialised, softmax in fp32 (transformers' eager)"
    return "scores materialised"


def micro_batches(options: Options) -> tuple[sympy.Expr, sympy.Expr, list]:
    """(micro-batch per device, micro-batches per step, checks): B = micro-batch × dp × micro-batches.

    Without ``micro_batch``: one sequence per micro-batch under a pipeline (pp > 1: one micro-batch of the whole
    batch would leave every stage but one idle, a bubble no pipeline run has), else the replica's whole batch."""
    dp, given = options.layout.dp, options.micro_batch
    given = given or (1 if options.layout.pp > 1 else None)
    micro = sympy.Integer(given) if given else B / dp
    checks = []
    if given or dp > 1:
        m = given or 1
        checks.append(
            (
                sympy.Eq(sympy.Mod(B, dp * m), 0),
                f"--batch is the global batch (sequences per step over dp = {dp} replicas); expected a "
                f"multiple of dp × micro-batch = {dp * m}, e.g. --batch {dp * m} for {m} sequence(s) "
                "per device",
            )
        )
    return micro, B / (micro * dp), checks


def fullest(totals: list[sympy.Expr], values: list[sympy.Expr]) -> sympy.Expr:
    """The value of the stage with the largest total (the first of equal ones): nested ``choose``."""
    if len(values) == 1:
        return values[0]
    return choose(totals[0], maximum(*totals[1:]), values[0], fullest(totals[1:], values[1:]))


def _per_layer(H: nx.DiGraph, acts, layout: Layout) -> sympy.Expr | None:
    """Bytes one iteration of the main repeated block (``layers``, else the one with most ops) keeps on one
    device for one micro-batch: Korthikanti et al.'s per-layer activations, under tp and sp."""
    blocks = repeated_blocks(H)
    if not blocks:
        return None
    block_of = structure(H).block_of  # each node's outermost repeated block: one pass, not one per block
    size = Counter(block_of[n] for n in H if n in block_of)
    main = "layers" if "layers" in blocks else max(blocks, key=lambda b: size[b])
    inside = [k for k in acts.tensors.values() if all(in_block(s, main) for s in k.savers)]
    split = split_axes(H)
    per = sympy.Add(*(k.bytes * split_share(H, k, layout, split) for k in inside)) / blocks[main]
    # with frozen weights an average over the iterations: the first layer keeps less than the later ones
    # (LoRA's q output is kept for the scores' backward only where k needs a gradient: (L − 1)/L of it)
    frozen = any(d["op"].attr("trainable", True) is False for _, d in H.nodes(data=True) if "op" in d)
    return whole(per, force=True) if frozen else per


def _composed(*maps: Mapping) -> dict:
    """One map that does what ``xreplace(maps[0]).xreplace(maps[1])...`` does (keys are symbols), without the
    entries that map a symbol to itself: B → micro-batch → B / dp is nothing to do when dp = 1."""
    out: dict = {}
    for m in maps:
        out = {k: v.xreplace(m) for k, v in out.items()}
        for k, v in m.items():
            out.setdefault(k, v)
    return {k: v for k, v in out.items() if k != v}


def _substituted(exprs: tuple[sympy.Expr, ...], *maps: Mapping) -> tuple[sympy.Expr, ...]:
    """``e.xreplace(maps[0]).xreplace(maps[1])...`` for each sum ``e`` (symbols as keys), term by term with
    each distinct term substituted once: the points of a liveness walk share most of their terms, and
    rebuilding each whole sum per map was most of the memory section."""
    one = _composed(*maps)
    if not one:
        return tuple(exprs)
    done: dict[sympy.Expr, sympy.Expr] = {}

    def sub(term: sympy.Expr) -> sympy.Expr:
        got = done.get(term)
        if got is None:
            got = done[term] = term.xreplace(one)
        return got

    out = []
    for e in exprs:
        terms = sympy.Add.make_args(e)
        new = [sub(t) for t in terms]
        # a map that changes no term (one device's micro-batch is the global batch B) leaves the sum as it is
        out.append(e if all(n == t for n, t in zip(new, terms)) else sympy.Add(*new))
    return tuple(out)


def training_memory(G: nx.DiGraph, options: Options, *, every_point: bool = True) -> Quantities:
    """``memory_bytes.*``, ``communication_bytes.*``, ``flops.recompute`` and ``memory.*`` of one training step.

    ``every_point``: the peak is the maximum of every point of the liveness walk (what ``derive`` prints); else
    of its maximal points only (:func:`~costmodel.memory.peak.maximal`: the same number and label).
    """
    layout, counting = options.layout, options.counting
    H = prepared(G, options)
    q = Quantities()
    q.checks += layout_checks(H, layout)
    micro, n_micro, checks = micro_batches(options)
    q.checks += checks
    # a device's tensors hold one micro-batch; how many micro-batches a step has is a function of the global
    # B. Both are dummies while the per-device numbers are derived, and are put in place once, together.
    b = sympy.Dummy("micro_batch", positive=True, integer=True)
    m = sympy.Dummy("micro_batches", positive=True, integer=True)
    on_device = {B: b}
    final = {b: micro, m: n_micro}

    def put(expr: sympy.Expr) -> sympy.Expr:
        return whole(sympy.sympify(expr).xreplace(final))

    autocast = precision(options.precision).copy_of == "matrices"
    acts = activations(
        H,
        options.recompute,
        counting,
        fraction=options.recompute_fraction,
        norm_stats=options.norm_stats,
        implementation=options.implementation,
        autocast=autocast,
    )
    names = stages(layout.pp)
    per_stage = {}
    for stage in names:
        raw, states = device_states(H, options.precision, options.optimizer, layout, stage)
        experts = expert_states(H, options.precision, options.optimizer, layout, stage) if layout.ep > 1 else {}
        if options.implementation == "transformers" and autocast:  # the casts are activations of the walk
            states = {**states, "params": states["params"] - states.get("compute_copy", Zero)}
        flight = layout_in_flight(layout, m, stage, H)
        shares = activation_shares(H, acts.tensors, layout, stage, flight)
        act = sympy.Add(*(k.bytes * shares[key] for key, k in acts.tensors.items()))
        nums = {k: whole(states[k].xreplace(on_device)) for k in STATE_KEYS}
        nums["activations"] = whole(act.xreplace(on_device))
        by_role: dict[str, list[sympy.Expr]] = {}  # summed once: a += per tensor re-flattens a growing sum
        for key, k in acts.tensors.items():
            by_role.setdefault(k.saved.role, []).append(k.bytes * shares[key])
        roles = {role: sympy.Add(*terms) for role, terms in by_role.items()}
        per_stage[stage] = (nums, raw, states, roles, experts)
    totals = [sympy.Add(*per_stage[s][0].values()) for s in names]  # on one device (B → its micro-batch)

    def pick(i: int, key: str) -> sympy.Expr:  # the fullest stage's number (the first on a tie)
        return fullest(totals, [per_stage[s][i][key] for s in names])

    nums = {k: pick(0, k) for k in per_stage["first"][0]}
    states = {k: pick(1, k) for k in per_stage["first"][1]}
    sharded = {k: pick(2, k) for k in per_stage["first"][2] if k not in ("trainable", "frozen")}
    if len(names) > 1:
        q.choices["memory.layout.stage"] = (tuple(put(t) for t in totals), names)
    for k, v in nums.items():
        q.add(f"memory_bytes.{k}", put(v))
    q.add("memory_bytes.total", put(sympy.Add(*nums.values())))
    for key, v in states.items():
        if key in ("params", "optimizer", "trainable", "frozen") or (key in ("compute_copy", "master") and v == 0):
            continue
        # ZeRO's shard of this part, rounded up on its own (a flat buffer padded to a multiple of dp)
        q.add(f"memory_bytes.parts.{key}", put(whole(sharded[key].xreplace(on_device))))
    for role in per_stage["first"][3]:  # per device: the fullest stage's, each role rounded up to whole bytes
        q.add(
            f"memory_bytes.activations_by_role.{role}",
            put(
                whole(
                    fullest(totals, [per_stage[s][3].get(role, Zero).xreplace(on_device) for s in names]),
                    force=layout.pp > 1,
                )
            ),
        )  # a stage's share of the layers (interleaved: 1/(pp·vpp)) may be fractional
    per_layer = _per_layer(H, acts, layout)
    if per_layer is not None:
        q.add("memory_bytes.activations_per_layer", put(per_layer.xreplace(on_device)))
    # the states before ZeRO shards them (the fullest stage's): what ZeRO-3 over more devices would divide
    q.add("memory.states_unsharded_bytes", put(sympy.Add(*(states[k] for k in STATE_KEYS)).xreplace(on_device)))
    q.add("memory.parameters_trainable", put(states["trainable"]))
    q.add("memory.parameters_frozen", put(states["frozen"]))
    if layout.pp == 1 and not options.recompute_fraction:
        loop = training_loop(H, options, weight_share(H, layout, "first"))
        if layout.zero >= 1:  # the step runs on each device's shard of the states
            loop = dataclasses.replace(loop, step=loop.step / layout.dp)
        constant = {k: nums[k] for k in STATE_KEYS if k != "grads" or options.grads_kept}
        p = peak(
            H,
            options.recompute,
            sympy.Add(*constant.values()),
            counting,
            options.norm_stats,
            acts,
            every_point=every_point,
            loop=loop,
            implementation=options.implementation,
            autocast=autocast,
            share=layout_share(H, layout),
        )
        # each point of the walk is a sum of whole bytes (the ledger rounds up per iteration): no rounding here
        cands = _substituted(p.candidates, on_device, final)
        q.add("memory_bytes.peak", put(p.states) + maximum(*cands))
        q.choices["memory.peak_at"] = (cands, p.labels)
        q.label_ties.add("memory.peak_at")
        _breakdown(q, p, constant, put, on_device, final)
        # the phase of the peak (of equal points the same one: the phases' names sort as the labels do)
        q.choices["memory.peak_phase"] = (tuple(cands[i] for i in p.top), tuple(phase(p.labels[i]) for i in p.top))
        q.label_ties.add("memory.peak_phase")
        q.info["memory.peak_iteration"] = "a steady-state step (the second: the optimizer's states exist)"
    else:
        q.info["memory_bytes.peak"] = None
        q.info["memory.peak_at"] = (
            "not modelled with a recompute fraction (see memory_bytes.total)"
            if options.recompute_fraction
            else "not modelled under pp > 1 (see memory_bytes.total)"
        )
    q.add("flops.recompute", acts.recompute_flops)
    # the experts' gradients and weights (their own data-parallel group: memory.parallel.expert_states)
    experts = (pick(4, "grads"), pick(4, "weights")) if layout.ep > 1 else None
    comm = communication(H, layout, states["grads"], states["params"], m, states["weights"], experts)
    for k, v in comm.items():
        q.add(f"communication_bytes.{k}", put(v.xreplace(on_device)))
    dense, expert = dp_by_group(layout, states["grads"], states["weights"], m, experts)
    if layout.zero and layout.dp > 1:  # ZeRO's two collectives, each priced on its own in the calibrated step
        for k in ("reduce_scatter", "all_gather"):
            q.add(f"communication.dp.{k}_bytes", put((dense[k] + expert.get(k, Zero)).xreplace(on_device)))
    if expert and layout.dp > 1:  # the experts' part, on the dp/ep group (the calibrated step's own tier)
        for k, v in expert.items():
            q.add(f"communication.dp.expert_{k}_bytes", put(v.xreplace(on_device)))
    q.info.update({f"memory.layout.{k}": getattr(layout, k) for k in LAYOUT_KEYS})
    q.add("memory.layout.micro_batch", micro)
    q.add("memory.layout.micro_batches", n_micro)
    if layout.pp == 1:
        q.info["memory.layout.stage"] = "all"
    q.info.update(_conventions(options, layout, attention_text(G, H)))
    q.info["memory.attention_implementation"] = ATTENTION_ABOUT[options.attention]
    q.info["memory.conventions.loop"] = _loop_text(options)
    q.info["memory.implementation"] = options.implementation
    return q


def phase(label: str) -> str:
    """The phase of a point of the walk: ``forward``, ``backward``, ``end of backward`` or ``optimizer step``."""
    return label if label in ("end of backward", "optimizer step", "nothing") else label.split(" of ")[0]


def _breakdown(q: Quantities, p, constant: dict, put, *maps) -> None:
    """``memory_bytes.peak_breakdown.*``: the categories at the peak (the states, and the walk's activations,
    gradients and temporaries at the point that is the peak; of equal points the one ``memory.peak_at`` names)."""
    tops = sorted(p.top, key=lambda i: p.labels[i], reverse=True)  # fullest() takes the first of equal totals
    totals = _substituted(tuple(p.candidates[i] for i in tops), *maps)
    for k in PEAK_PARTS:
        walk = [p.parts[p.top.index(i)].get(k, Zero) for i in tops] if k in p.parts[0] else None
        value = fullest(list(totals), list(_substituted(tuple(walk), *maps))) if walk else Zero
        q.add(f"memory_bytes.peak_breakdown.{k}", put(constant.get(k, Zero)) + value)


def _states_dtype(opt: str, dtype: str) -> str:
    """The dtype an optimizer's states are kept in, in words: the policy's, or 8-bit block-wise."""
    o = optimizer(opt)
    return f"int8 with an fp32 absmax per {o.block}" if o.quantized and not o.states else dtype


def _loop_text(options: Options) -> str:
    """How the training loop holds gradients and steps (``memory.conventions.loop``)."""
    grads = (
        "gradients resident through the step (a buffer, accumulation or set_to_none=False)"
        if options.grads_kept
        else "gradients born at each weight's backward (zero_grad(set_to_none=True)), all alive at the step"
    )
    return f"{options.implementation} implementation; {grads}; optimizer step: torch's {options.optimizer_impl} path"


def _conventions(options: Options, layout: Layout, attention: str) -> dict[str, object]:
    p = precision(options.precision)
    z = layout.zero

    per = (
        f"per device ({units.devices(layout.devices)}: dp {layout.dp}, tp {layout.tp}, pp {layout.pp}, "
        f"sp {layout.sp}, ep {layout.ep}; ZeRO-{z}"
        + ("; pipeline {memory__layout__stage} stage" if layout.pp > 1 else "")
        + ")"
    )
    return {
        "memory.conventions.params": Text(
            verbatim(
                f"{p.weights} weights"
                + (
                    f" (the frozen matmul weights of the layers in {options.base_dtype}: "
                    f"{weight_format(options.base_dtype).about})"
                    if options.base_dtype
                    else ""
                )
                + (
                    f" + a cached {p.compute_copy} copy" + (" of each matmul weight" if p.copy_of == "matrices" else "")
                    if p.compute_copy and not (options.implementation == "transformers" and p.copy_of == "matrices")
                    else ""
                )
                + "; "
            )
            + per
            + verbatim(f"; sharded over dp by ZeRO-{z}" if z >= 3 else "")
        ),
        "memory.conventions.grads": f"{p.grads} gradients of trainable weights (frozen: none)"
        + (f"; sharded over dp by ZeRO-{z}" if z >= 2 else ""),
        "memory.conventions.optimizer": f"{options.optimizer} states in {_states_dtype(options.optimizer, p.states)}"
        + (f" + {p.master} master weights" if p.master else "")
        + " (torch's 4-byte step counters per tensor not counted)"
        + (f"; sharded over dp by ZeRO-{z}" if z >= 1 else ""),
        "memory.conventions.activations": f"saved for backward in {p.activations} (dtypes per op), recompute "
        f"{options.recompute}, attention {attention}; micro-batch on one device"
        + ("; 1F1B in flight" if layout.pp > 1 else ""),
        "memory.conventions.total": "params + grads + optimizer + activations (a sum, not a peak)",
        "memory.conventions.peak": "states + live activations by liveness in graph order (kept tensors, recomputed "
        "tensors, the running op's transients; no allocator overhead)",
    }


__all__ = ["fullest", "prepared", "repeated_blocks", "training_memory"]
