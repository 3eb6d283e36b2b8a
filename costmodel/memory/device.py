"""Per-device memory of a step (the report's memory section), as quantities.

:func:`memory_quantities` composes :mod:`.states` (model states), :mod:`.activations` (kept tensors),
:mod:`.peak` (liveness), :mod:`.inference` (KV cache, inference weights, working set) and :mod:`.parallel`
(layouts) into flat dotted keys, every number per device and an expression of the graph's symbols
(:class:`~costmodel.graph.quantities.Quantities`); ``memory.conventions.*`` says how each
``memory_bytes.*`` line is counted. The global batch B is split into micro-batches: a device runs
``micro_batch`` sequences at a time (default B / dp).
"""

from __future__ import annotations

import networkx as nx
import sympy

from ..formulas import Text
from ..graph.analysis import repeated_blocks
from ..graph.cost import Zero
from ..graph.passes import attention_chains, flash_attention
from ..graph.quantities import Quantities, choose, maximum, whole
from ..options import Layout, Options
from ..symbols import B, C, T
from .activations import activations
from .inference import inference_weights, kv_cache, state_cache, working_set
from .parallel import activation_share, communication, device_states, in_flight, layout_checks, weight_share
from .peak import peak
from .policies import precision, weight_format

STATE_KEYS = ("params", "grads", "optimizer")
LAYOUT_KEYS = ("dp", "tp", "pp", "sp", "ep", "zero", "megatron_sp", "devices")


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def prepared(G: nx.DiGraph, options: Options) -> nx.DiGraph:
    """The graph the memory numbers describe: with FlashAttention applied when asked (an error where it
    cannot remove the T×T scores)."""
    return flash_attention(G) if options.flash else G


def attention_text(G: nx.DiGraph, H: nx.DiGraph) -> str:
    """How attention is counted, read off the rewritten graph ``H`` (not off a flag)."""
    fused = H.graph.get("rewritten", {}).get("flash_attention", ())
    if fused and not any(True for _ in attention_chains(H)):
        return "FlashAttention (no T×T)"
    if not fused and not any(True for _ in attention_chains(G)):
        return "none materialised (no attention chain in the graph)"
    return "scores materialised"


def micro_batches(options: Options) -> tuple[sympy.Expr, sympy.Expr, list]:
    """(micro-batch per device, micro-batches per step, checks): B = micro-batch × dp × micro-batches."""
    dp = options.layout.dp
    micro = sympy.Integer(options.micro_batch) if options.micro_batch else B / dp
    checks = []
    if options.micro_batch or dp > 1:
        m = options.micro_batch or 1
        checks.append((sympy.Eq(sympy.Mod(B, dp * m), 0),
                       f"--batch is the global batch (sequences per step over dp = {dp} replicas); expected a "
                       f"multiple of dp × micro-batch = {dp * m}, e.g. --batch {dp * m} for {m} sequence(s) "
                       "per device"))
    return micro, B / (micro * dp), checks


def training_memory(G: nx.DiGraph, options: Options) -> Quantities:
    """``memory_bytes.*``, ``communication_bytes.*``, ``flops.recompute`` and ``memory.*`` of one training step."""
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

    acts = activations(H, options.recompute, counting)
    stages = ("first", "last") if layout.pp > 1 else ("first",)
    per_stage = {}
    for stage in stages:
        raw, states = device_states(H, options.precision, options.optimizer, layout, stage)
        flight = in_flight(layout, m, stage)
        act = sympy.Add(*(k.bytes * activation_share(H, k, layout, stage, flight) for k in acts.tensors.values()))
        nums = {k: whole(states[k].xreplace(on_device)) for k in STATE_KEYS}
        nums["activations"] = whole(act.xreplace(on_device))
        per_stage[stage] = (nums, raw, states)
    totals = {s: sympy.Add(*per_stage[s][0].values()) for s in stages}
    if len(stages) == 1:
        nums, states, sharded = per_stage["first"]
    else:  # the fuller stage is the device to fit (the first on a tie)
        pick = lambda x, y: choose(totals["first"], totals["last"], x, y)  # noqa: E731
        nums = {k: pick(per_stage["first"][0][k], per_stage["last"][0][k]) for k in per_stage["first"][0]}
        states = {k: pick(per_stage["first"][1][k], per_stage["last"][1][k]) for k in per_stage["first"][1]}
        sharded = {k: pick(per_stage["first"][2][k], per_stage["last"][2][k]) for k in STATE_KEYS}
        q.choices["memory.layout.stage"] = ((put(totals["first"]), put(totals["last"])), ("first", "last"))
    for k, v in nums.items():
        q.add(f"memory_bytes.{k}", put(v))
    q.add("memory_bytes.total", put(sympy.Add(*nums.values())))
    group = {"weights": "params", "compute_copy": "params", "grads": "grads"}  # the rest: optimizer
    for key, v in states.items():
        if key in ("params", "optimizer", "trainable", "frozen") or (key in ("compute_copy", "master") and v == 0):
            continue
        g = group.get(key, "optimizer")
        ratio = sharded[g] / states[g] if states[g] != 0 else 1  # ZeRO's share of this part's group
        q.add(f"memory_bytes.parts.{key}", put((v * ratio).xreplace(on_device)))
    for role, v in acts.by_role().items():
        if layout.devices == 1:
            q.add(f"memory_bytes.activations_by_role.{role}", put(v.xreplace(on_device)))
        else:
            q.info[f"memory_bytes.activations_by_role.{role}"] = None
    q.add("memory.parameters_trainable", put(states["trainable"]))
    q.add("memory.parameters_frozen", put(states["frozen"]))
    if layout.tp == layout.pp == layout.sp == 1:
        p = peak(H, options.recompute, sympy.Add(*(nums[k] for k in STATE_KEYS)), counting)
        # each point of the walk is a sum of whole bytes (the ledger rounds up per iteration): no rounding here
        cands = tuple(c.xreplace(on_device).xreplace(final) for c in p.candidates)
        q.add("memory_bytes.peak", put(p.states) + maximum(*cands))
        q.choices["memory.peak_at"] = (cands, p.labels)
        q.label_ties.add("memory.peak_at")
    else:
        q.info["memory_bytes.peak"] = None
        q.info["memory.peak_at"] = "not modelled under tp/pp/sp > 1 (see memory_bytes.total)"
    q.add("flops.recompute", acts.recompute_flops)
    comm = communication(H, layout, states["grads"], states["params"], m)
    for k, v in comm.items():
        q.add(f"communication_bytes.{k}", put(v.xreplace(on_device)))
    q.info.update({f"memory.layout.{k}": getattr(layout, k) for k in LAYOUT_KEYS})
    q.add("memory.layout.micro_batch", micro)
    q.add("memory.layout.micro_batches", n_micro)
    if layout.pp == 1:
        q.info["memory.layout.stage"] = "all"
    q.info.update(_conventions(options, layout, attention_text(G, H)))
    return q


def _conventions(options: Options, layout: Layout, attention: str) -> dict[str, object]:
    p = precision(options.precision)
    z = layout.zero

    per = (f"per device ({layout.devices} devices: dp {layout.dp}, tp {layout.tp}, pp {layout.pp}, "
           f"sp {layout.sp}, ep {layout.ep}; ZeRO-{z}" + ("; pipeline {memory__layout__stage} stage" if layout.pp > 1
                                                         else "") + ")")
    return {
        "memory.conventions.params": Text(_escape(f"{p.weights} weights" + (f" + a cached {p.compute_copy} copy"
                                                                            if p.compute_copy else "") + "; ")
                                          + per + _escape(f"; sharded over dp by ZeRO-{z}" if z >= 3 else "")),
        "memory.conventions.grads": f"{p.grads} gradients of trainable weights (frozen: none)"
                                    + (f"; sharded over dp by ZeRO-{z}" if z >= 2 else ""),
        "memory.conventions.optimizer": f"{options.optimizer} states in {p.states}"
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


def inference_memory(G: nx.DiGraph, options: Options) -> Quantities:
    """Inference memory keys: weights in ``weights_dtype``, the KV cache of ``context`` tokens, working set."""
    layout = options.layout
    H = prepared(G, options)
    q = Quantities()
    q.checks += layout_checks(H, layout)
    context = sympy.Integer(options.context) if options.context else T
    at_context = {T: context, C: context}
    # a pipeline stage holds 1/pp of the repeated layers, the first stage the embeddings, the last the final
    # norm and head (as training counts them): the fuller of the two stages is the device to fit
    stages = ("first", "last") if layout.pp > 1 else ("first",)
    by_stage = {s: inference_weights(H, options.weights_dtype, weight_share(H, Layout(pp=layout.pp), s))
                for s in stages}
    if len(stages) == 1:
        w = by_stage["first"]
    else:
        w = {k: choose(by_stage["first"]["total"], by_stage["last"]["total"], by_stage["first"][k], by_stage["last"][k])
             for k in by_stage["first"]}
        q.choices["memory.layout.stage"] = ((by_stage["first"]["total"], by_stage["last"]["total"]),
                                            ("first", "last"))
    kv = kv_cache(H, C, options.kv_dtype)
    state = state_cache(H)  # a state-space model's cache: its size does not grow with the context
    tp = sympy.Integer(layout.tp)
    work, labels = working_set(H)
    cands = tuple(c.xreplace(at_context) for c in work)
    params = whole((w["total"] / tp).xreplace(at_context))
    cache = whole((kv / tp / layout.pp).xreplace(at_context))
    states = whole((state / tp / layout.pp).xreplace(at_context))
    q.add("memory_bytes.params", params)
    q.add("memory_bytes.grads", Zero)
    q.add("memory_bytes.optimizer", Zero)
    q.add("memory_bytes.kv_cache", cache)
    if state != 0:
        q.add("memory_bytes.state_cache", states)
    q.add("memory_bytes.activations", maximum(*cands))
    q.add("memory_bytes.parts.scales", whole((w["scales"] / tp).xreplace(at_context)))
    q.choices["memory.working_set_at"] = (cands, labels)
    q.add("memory_bytes.total", params + cache + states + maximum(*cands))
    fmt = weight_format(options.weights_dtype)
    stage_text = ("; pipeline {memory__layout__stage} stage of pp = " + str(layout.pp) + " (1/pp of the repeated "
                  "layers, plus the embeddings on the first stage, the final norm and head on the last)"
                  if layout.pp > 1 else "")
    q.info.update({
        "memory.conventions.params": Text(_escape(f"inference weights: matmuls in {fmt.about}, tables and norms in "
                                                  f"the graph dtype; divided by tp = {layout.tp}") + stage_text),
        "memory.conventions.kv_cache": Text("every tensor tagged kv_cache for " + (str(options.context) if
                                                                                 options.context else "{T}")
                                            + _escape(f" tokens × batch (a sliding window keeps its last W − 1), in "
                                                      f"{options.kv_dtype or 'the op dtype'}; divided by tp and pp")),
        "memory.conventions.activations": "forward working set of a prefill of the whole context: the largest op's "
                                          "inputs + output",
        "memory.conventions.total": "params + kv_cache + activations" + (" + state_cache" if state != 0 else ""),
    })
    if state != 0:
        q.info["memory.conventions.state_cache"] = ("the recurrent state of every op that keeps one (a causal "
                                                    "convolution's last inputs in the op dtype, a selective scan's "
                                                    "state in fp32) × batch, whatever the context; divided by tp "
                                                    "and pp")
    return q


def memory_quantities(G: nx.DiGraph, options: Options) -> Quantities:
    """Training or (``options.inference``) inference memory keys for one device."""
    return (inference_memory if options.inference else training_memory)(G, options)


__all__ = ["inference_memory", "memory_quantities", "repeated_blocks", "training_memory"]
