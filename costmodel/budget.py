"""Per-device memory of a step (the report's memory section) and "does it fit?".

:func:`device_memory` composes :mod:`costmodel.training` (model states),
:mod:`costmodel.memory` (activations, KV cache, inference weights),
:mod:`costmodel.peak` (liveness) and :mod:`costmodel.parallel` (layouts) into
flat dotted keys, every number per device and exact; ``memory.conventions.*``
says how each ``memory_bytes.*`` line is counted. :func:`fit` solves for the
largest micro-batch (linear: a closed form) or sequence/context (a search over
whole numbers) that fits a memory size, or names the component that overflows.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from .analysis import as_int, evaluate
from .cost import Zero
from .errors import CostModelError
from .memory import WEIGHT_FORMATS, activations, inference_weights, kv_cache, working_set
from .ops import Conventions
from .parallel import (Layout, activation_share, check_layout, communication, device_states, in_flight,
                       weight_share)
from .passes import flash_attention
from .peak import peak
from .symbols import B, C, T
from .training import precision

STATE_KEYS = ("params", "grads", "optimizer")


def _int(expr: sympy.Expr, values: Mapping, what: str) -> int:
    v = evaluate(expr, values, what)
    return as_int(sympy.ceiling(v), what)  # a fraction of a byte (a ZeRO shard) rounds up


def _micro(values: Mapping, options: Mapping, layout: Layout) -> tuple[int, int]:
    """(micro-batch per device, micro-batches per step): batch = micro-batch × dp × micro-batches."""
    batch = int(values[B])
    micro = int(options.get("micro_batch") or max(batch // layout.dp, 1))
    if batch % (micro * layout.dp):
        raise CostModelError(f"--batch {batch} is the global batch (sequences per step over dp = {layout.dp} "
                             f"replicas); expected a multiple of dp × micro-batch = {layout.dp * micro}, e.g. "
                             f"--batch {layout.dp * micro} for {micro} sequence(s) per device")
    return micro, batch // (micro * layout.dp)


def training_memory(G: nx.DiGraph, values: Mapping, options: Mapping) -> dict[str, object]:
    """Flat ``memory_bytes.*``, ``communication_bytes.*`` and ``memory.*`` keys of one training step."""
    policy, opt = str(options.get("policy", "bf16-mixed")), str(options.get("optimizer", "adamw"))
    recompute = str(options.get("recompute", "none"))
    conv = options.get("conventions") or Conventions()
    layout = options.get("layout") or Layout()
    if options.get("flash"):
        G = flash_attention(G)
    check_layout(G, layout, values)
    micro, n_micro = _micro(values, options, layout)
    dev = {**values, B: micro}
    acts = activations(G, recompute, conv)
    flat: dict[str, object] = {}
    best = None
    for stage in ("first", "last") if layout.pp > 1 else ("first",):
        raw, states = device_states(G, policy, opt, layout, stage)
        flight = in_flight(layout, n_micro, stage)
        act = sum((k.bytes * activation_share(G, k, layout, stage, flight) for k in acts.tensors.values()), Zero)
        nums = {k: _int(states[k], dev, f"memory_bytes.{k}") for k in STATE_KEYS}
        nums["activations"] = _int(act, dev, "memory_bytes.activations")
        if best is None or sum(nums.values()) > sum(best[1].values()):
            best = (stage, nums, raw, states)
    stage, nums, states, sharded = best
    for k, v in nums.items():
        flat[f"memory_bytes.{k}"] = v
    flat["memory_bytes.total"] = sum(nums.values())
    group = {"weights": "params", "compute_copy": "params", "grads": "grads"}  # the rest: optimizer
    for key, v in states.items():
        if key in ("params", "optimizer", "trainable", "frozen") or (key in ("compute_copy", "master") and v == 0):
            continue
        g = group.get(key, "optimizer")
        ratio = sharded[g] / states[g] if states[g] != 0 else 1  # ZeRO's share of this part's group
        flat[f"memory_bytes.parts.{key}"] = _int(v * ratio, dev, key)
    for role, v in acts.by_role().items():
        flat[f"memory_bytes.activations_by_role.{role}"] = _int(v, dev, role) if layout.devices == 1 else None
    flat["memory.parameters_trainable"] = _int(states["trainable"], values, "trainable")
    flat["memory.parameters_frozen"] = _int(states["frozen"], values, "frozen")
    if layout.tp == layout.pp == layout.sp == 1:
        p = peak(G, dev, recompute, sum(nums[k] for k in STATE_KEYS), conv)
        flat["memory_bytes.peak"] = p.bytes
        flat["memory.peak_at"] = f"{p.phase} of {p.node}"
    else:
        flat["memory_bytes.peak"] = None
        flat["memory.peak_at"] = "not modelled under tp/pp/sp > 1 (see memory_bytes.total)"
    flat["flops.recompute"] = _int(acts.recompute_flops, values, "flops.recompute")
    comm = communication(G, layout, states["grads"], states["params"], n_micro)
    for k, v in comm.items():
        flat[f"communication_bytes.{k}"] = _int(v, dev, f"communication_bytes.{k}")
    flat.update({f"memory.layout.{k}": getattr(layout, k) for k in ("dp", "tp", "pp", "sp", "ep", "zero",
                                                                     "megatron_sp", "devices")})
    flat.update({"memory.layout.micro_batch": micro, "memory.layout.micro_batches": n_micro,
                 "memory.layout.stage": stage if layout.pp > 1 else "all"})
    flat.update(_conventions(policy, opt, recompute, bool(options.get("flash")), layout, stage))
    return flat


def _conventions(policy: str, opt: str, recompute: str, flash: bool, layout: Layout, stage: str) -> dict[str, str]:
    p = precision(policy)
    per = f"per device ({layout.devices} devices: dp {layout.dp}, tp {layout.tp}, pp {layout.pp}, sp {layout.sp}, " \
          f"ep {layout.ep}; ZeRO-{layout.zero}{'; pipeline ' + stage + ' stage' if layout.pp > 1 else ''})"
    z = layout.zero
    return {
        "memory.conventions.params": f"{p.weights} weights" + (f" + a cached {p.compute_copy} copy" if p.compute_copy
                                                               else "") + f"; {per}" + (f"; sharded over dp by ZeRO-{z}" if z >= 3 else ""),
        "memory.conventions.grads": f"{p.grads} gradients of trainable weights (frozen: none)"
                                    + (f"; sharded over dp by ZeRO-{z}" if z >= 2 else ""),
        "memory.conventions.optimizer": f"{opt} states in {p.states}" + (f" + {p.master} master weights" if p.master
                                                                         else "")
                                        + " (torch's 4-byte step counters per tensor not counted)"
                                        + (f"; sharded over dp by ZeRO-{z}" if z >= 1 else ""),
        "memory.conventions.activations": f"saved for backward in {p.activations} (dtypes per op), recompute {recompute}, "
                                          f"attention {'FlashAttention (no T×T)' if flash else 'scores materialised'}; "
                                          "micro-batch on one device" + ("; 1F1B in flight" if layout.pp > 1 else ""),
        "memory.conventions.total": "params + grads + optimizer + activations (a sum, not a peak)",
        "memory.conventions.peak": "states + live activations by liveness in graph order (kept tensors, recomputed "
                                   "tensors, the running op's transients; no allocator overhead)",
    }


def inference_memory(G: nx.DiGraph, values: Mapping, options: Mapping) -> dict[str, object]:
    """Flat keys of inference: weights in ``weights_dtype``, the KV cache of ``context`` tokens, working set."""
    layout = options.get("layout") or Layout()
    check_layout(G, layout, values)
    fmt = str(options.get("weights_dtype") or "bf16")
    context = int(options.get("context") or values[T])
    if options.get("flash"):
        G = flash_attention(G)
    dev = {**values, T: context, C: context}
    # a pipeline stage holds 1/pp of the repeated layers, the first stage the embeddings, the last the final
    # norm and head (as training counts them): the fuller of the two stages is the device to fit
    stages = ("first", "last") if layout.pp > 1 else ("first",)
    by_stage = {s: inference_weights(G, fmt, weight_share(G, Layout(pp=layout.pp), s)) for s in stages}
    stage = max(stages, key=lambda s: _int(by_stage[s]["total"], dev, "weights"))
    w = by_stage[stage]
    kv = kv_cache(G, C, options.get("kv_dtype"))
    tp = sympy.Integer(layout.tp)
    work, where = working_set(G, dev)
    flat: dict[str, object] = {
        "memory_bytes.params": _int(w["total"] / tp, dev, "weights"),
        "memory_bytes.grads": 0,
        "memory_bytes.optimizer": 0,
        "memory_bytes.kv_cache": _int(kv / tp / layout.pp, dev, "memory_bytes.kv_cache"),
        "memory_bytes.activations": work,
        "memory_bytes.parts.scales": _int(w["scales"] / tp, dev, "scales"),
        "memory.working_set_at": where,
        "memory.conventions.params": f"inference weights: matmuls in {WEIGHT_FORMATS[fmt].about}, tables and "
                                     f"norms in the graph dtype; divided by tp = {layout.tp}"
                                     + (f"; pipeline {stage} stage of pp = {layout.pp} (1/pp of the repeated "
                                        "layers, plus the embeddings on the first stage, the final norm and "
                                        "head on the last)" if layout.pp > 1 else ""),
        "memory.conventions.kv_cache": f"every tensor tagged kv_cache for {context} tokens × batch (a sliding "
                                       f"window keeps its last W − 1), in "
                                       f"{options.get('kv_dtype') or 'the op dtype'}; divided by tp and pp",
        "memory.conventions.activations": "forward working set of a prefill of the whole context: the largest op's "
                                          "inputs + output",
        "memory.conventions.total": "params + kv_cache + activations",
    }
    flat["memory_bytes.total"] = flat["memory_bytes.params"] + flat["memory_bytes.kv_cache"] + work
    return flat


def device_memory(G: nx.DiGraph, values: Mapping, options: Mapping) -> dict[str, object]:
    """Training or (``options["inference"]``) inference memory keys for one device."""
    return (inference_memory if options.get("inference") else training_memory)(G, values, options)


def memory_expressions(G: nx.DiGraph, conventions: Conventions = Conventions()) -> dict[str, sympy.Expr]:
    """Symbolic activation bytes under each recompute choice and FlashAttention, and the KV cache (in C).

    ``memory_bytes.activations`` (no recompute) is the counts' own key; these add to it in ``derive``.
    """
    out = {f"memory_bytes.activations_{r}": activations(G, r, conventions).bytes for r in ("selective", "full")}
    out["memory_bytes.activations_flash"] = activations(flash_attention(G), "none", conventions).bytes
    try:
        out["memory_bytes.kv_cache"] = kv_cache(G, C)
    except CostModelError:
        pass  # no tensor tagged kv_cache: no cache to derive
    return out


def memory_section(step, report: Mapping[str, object]) -> dict[str, object]:
    """The report section: refines ``memory_bytes.*`` (per device) after the counts section."""
    return device_memory(step.model.graph, step.values, step.options)
