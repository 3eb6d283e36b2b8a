"""The planner's memory per device: the memory section's own numbers, vectorised over layouts.

``estimate`` derives a device's memory stage by stage (:func:`costmodel.memory.device.training_memory`): each
weight's model states times the share one device of a stage holds (:func:`~costmodel.memory.parallel.
weight_share`), ZeRO over dp (experts over dp/ep), each kept tensor times its share
(:func:`~costmodel.memory.parallel.activation_share`) and the micro-batches in flight, each of params, grads,
optimizer and activations rounded up to whole bytes, and the fullest stage (the first of equal ones) is the
device's. Those shares are products of a few facts of each weight or tensor (the stage that runs it, the
repeated block it belongs to, whether tensor parallelism splits it, whether it is an expert's, whether it has
the sequence axis) and of the layout; so the model states and the activations are summed **once per class of
those facts** here, and a layout's memory is those sums times the class's share, on arrays of layouts.

The planner's layouts hold only what this replays: even stages (``layers % pp == 0``: no
``stage_layers``), Megatron sequence parallelism whenever ``tp > 1`` (every kept tensor ÷ tp) or never,
the memory section's default norm statistics and no recompute fraction. ``tests/verbs/test_plan_exact.py``
checks the result against ``estimate`` layout by layout.

A layout fits by the rule of every verb (:func:`costmodel.sections.fits.judged`): on one pipeline stage the
liveness peak, else the sum. The peak's walk (:func:`costmodel.memory.peak.peak`) is derived once per recompute
policy with tp and cp symbols (each tensor's share ÷ tp, ÷ cp as the walk of one device splits it) and the
micro-batch ``B``, compiled, and evaluated on the arrays of layouts: the states plus the largest live point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import sympy

from ...errors import CostModelError
from ...formulas.chunks import _fn  # the engine's cache of compiled sources (a worker compiles each once)
from ...formulas.compiled import float_mode
from ...formulas.python import source
from ...formulas.quantities import maximum
from ...graph.analysis import structure
from ...memory.activations import activations
from ...memory.loop import step_temporary
from ...memory.parallel import is_expert, split_axes, tensor_share
from ...memory.peak import peak
from ...memory.schedules import SCHEDULES
from ...memory.states import model_state, weights
from ...options import Options
from ...options.policies import precision
from ...symbols import B, T

#: The stages a report compares (``costmodel.memory.parallel.stages``): the first, a middle one, the last.
STAGES = ("first", "middle", "last")
STATE_KEYS = ("params", "grads", "optimizer")


@dataclass(frozen=True)
class MemoryTable:
    """Model-state bytes by class of weight and activation bytes by class of kept tensor.

    ``states``: (where, block count, tp-split, expert) → (params, grads, optimizer) bytes of the whole model;
    ``acts``: recompute policy → (where, block count, has the sequence axis, tp-split) → (bytes independent
    of the micro-batch, bytes per sequence). ``where`` is ``"first"``, ``"block"`` or ``"last"``; the block count is
    the layers of the repeated block (1 outside one)."""

    states: Mapping[tuple, tuple[float, float, float]]
    acts: Mapping[str, Mapping[tuple, tuple[float, float]]]
    weights: Mapping[tuple, float] = field(default_factory=dict)  # the weights' own bytes (what ZeRO gathers)
    peaks: Mapping[str, str] = field(default_factory=dict)  # recompute → source of the walk's live peak (tp, cp, B)
    steps: Mapping[tuple, float] = field(default_factory=dict)  # the optimizer step's temporary bytes by class


def table(
    H: nx.DiGraph, options: Options, values: Mapping, recompute: tuple[str, ...], megatron_sp: bool = True
) -> MemoryTable:
    """The :class:`MemoryTable` of the prepared graph ``H`` under ``options`` (precision, optimizer,
    counting) with the model's ``values`` put in (every symbol but the batch); ``megatron_sp`` as :func:`memory`'s
    (how the peak's walk splits a tensor without a split axis)."""
    st = structure(H)
    split = split_axes(H)
    sub = {s: v for s, v in values.items() if s is not B}

    def count(node: str) -> int:
        block = st.block_of.get(node)
        return int(sympy.sympify(st.blocks[block]).xreplace(sub)) if block is not None else 1

    def weight_class(w) -> tuple:
        return (st.stage(w.node), count(w.node), any(a in split for a, _ in w.axes), is_expert(w))

    classes = {weight_class(w) for w in weights(H)}
    autocast = precision(options.precision).copy_of == "matrices"
    casts_are_activations = options.implementation == "transformers" and autocast  # as training_memory counts
    states, own = {}, {}
    for c in classes:
        s = model_state(H, options.precision, options.optimizer, lambda w, c=c: int(weight_class(w) == c))
        if casts_are_activations:
            s = {**s, "params": s["params"] - s["compute_copy"]}
        states[c] = tuple(float(sympy.sympify(s[k]).xreplace(sub)) for k in STATE_KEYS)
        own[c] = float(sympy.sympify(s["weights"]).xreplace(sub))
    acts: dict[str, dict[tuple, tuple[float, float]]] = {}
    for r in recompute:
        a = activations(
            H,
            r,
            options.counting,
            norm_stats=options.norm_stats,
            implementation=options.implementation,
            autocast=autocast,
        )
        sums: dict[tuple, sympy.Expr] = {}
        for kept in a.tensors.values():
            where = "block" if all(st.stage(s) == "block" for s in kept.savers) else st.stage(kept.savers[0])
            key = (
                where,
                count(kept.savers[0]) if where == "block" else 1,
                any(s == T for _, s in kept.axes),
                any(a in split for a, _ in kept.axes),
            )
            sums[key] = sums.get(key, sympy.Integer(0)) + kept.bytes
        acts[r] = {}
        for key, e in sums.items():
            poly = sympy.Poly(sympy.expand(sympy.sympify(e).xreplace(sub)), B)
            if poly.degree() > 1 or poly.free_symbols - {B}:
                raise CostModelError(
                    f"plan: the activations of {key} are {e}; expected bytes linear in the micro-batch B "
                    "with every other size a number"
                )
            acts[r][key] = (float(poly.coeff_monomial(1)), float(poly.coeff_monomial(B)))
    if options.optimizer_impl == "forloop":
        raise CostModelError(
            "plan: --optimizer-impl forloop (its step's temporary is a maximum over tensors, not a sum the planner "
            "can split by class) is not searched; estimate a layout with it, or plan with foreach or fused"
        )
    # the optimizer step's temporary (costmodel.memory.loop.step_temporary): foreach's one copy of a state per
    # trainable weight, summed by class as the states are; fused: none
    steps = {
        c: float(
            sympy.sympify(
                step_temporary(
                    H,
                    options.precision,
                    options.optimizer,
                    options.optimizer_impl,
                    lambda w, c=c: int(weight_class(w) == c),
                )
            ).xreplace(sub)
        )
        for c in classes
    }
    share = lambda axes: tensor_share(axes, split, TP, CP, megatron_sp)  # noqa: E731
    peaks = {}
    for r in recompute:
        p = peak(
            H,
            r,
            counting=options.counting,
            norm_stats=options.norm_stats,
            every_point=False,
            implementation=options.implementation,
            autocast=autocast,
            share=share,
        )
        peaks[r] = source([maximum(*(c.xreplace(sub) for c in p.candidates))], (TP, CP, B))
    return MemoryTable(states, acts, own, peaks, steps)


#: The degrees of the peak's compiled walk (its third argument: the micro-batch, ``B`` on one device).
TP, CP = sympy.symbols("tp cp", positive=True, integer=True)


def peak_bytes(t: MemoryTable, lay: Mapping[str, np.ndarray], states: np.ndarray) -> np.ndarray:
    """The liveness peak per device of each layout: ``states`` (its params + grads + optimizer bytes) plus the
    walk's largest live point at its tp, cp, micro-batch and recompute (NaN where pp > 1: not modelled)."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, cp, b, pp = (f(lay[k]) for k in ("tp", "cp", "b", "pp"))
    rec = np.asarray(lay["recompute"])
    out = np.full(tp.shape, np.nan)
    for r, name in enumerate(("none", "selective", "full")):
        pick = (rec == r) & (pp == 1)
        if pick.any() and name in t.peaks:
            (live,) = _fn(t.peaks[name])(float_mode(), tp[pick], cp[pick], b[pick])
            out[pick] = states[pick] + np.broadcast_to(live, tp[pick].shape)
    return out


def _in_flight(stage: str, s: np.ndarray, pp: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Micro-batches in flight on ``stage`` (``costmodel.memory.parallel.layout_in_flight``; even stages)."""
    i = SCHEDULES.index
    if stage == "middle":  # the first stage holding ⌈L/pp⌉ layers: stage 0 when pp divides them
        return np.minimum(pp, m)
    if stage == "first":
        sched = np.select(
            [s == i("gpipe"), s == i("dualpipe"), s == i("interleaved")],
            [m, pp + 1, np.minimum(pp, m) * (1 + (pp - 1) / (pp * v))],
            np.minimum(pp, m),
        )
    else:
        sched = np.select(
            [s == i("gpipe"), s == i("dualpipe"), s == i("interleaved")],
            [m, pp + 1, ((v - 1) * pp + 1) / v],
            np.ones_like(pp),
        )
    return np.where(pp == 1, 1.0, sched)


def _stage_share(where: str, layers: int, stage: str, pp: np.ndarray, copies: np.ndarray) -> np.ndarray:
    """The share of a class one device of ``stage`` holds, before tensor/expert parallelism and ZeRO."""
    if where == "block":
        if stage == "middle":
            return np.where(pp == 1, 1.0, np.ceil(layers / pp) / layers)
        return np.where(pp == 1, 1.0, copies / pp)
    return np.where((pp == 1) | (where == stage), 1.0, 0.0) * (1.0 if stage != "middle" else 0.0)


def memory(t: MemoryTable, lay: Mapping[str, np.ndarray], megatron_sp: bool = True) -> dict[str, np.ndarray]:
    """Per device, for every layout (``megatron_sp``: Megatron sequence parallelism where tp > 1, so every kept
    tensor is split by tp; without it only those with a split axis): ``total`` (the fullest stage's bytes), ``need``
    (what the device must hold by the rule of every verb: the peak at pp = 1, else ``total``), its ``params``, ``grads``,
    ``optimizer`` and ``activations``, and ``dp_bytes``, what it sends for data parallelism per step
    (``communication_bytes.dp``)."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep, v, b, m, z, s = (
        f(lay[k]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "b", "m", "zero", "schedule")
    )
    rec = np.asarray(lay["recompute"])
    copies = np.where(s == SCHEDULES.index("dualpipe"), 2.0, 1.0)
    zero_div = {k: np.where(z >= n, 1.0, 0.0) for k, n in (("optimizer", 1), ("grads", 2), ("params", 3))}
    per_stage = []
    for stage in STAGES:
        raw = {k: np.zeros(tp.shape) for k in (*STATE_KEYS, "weights")}
        step = np.zeros(tp.shape)
        sharded = {k: np.zeros(tp.shape) for k in STATE_KEYS}
        for (where, layers, tsplit, expert), nbytes in t.states.items():
            share = _stage_share(where, layers, stage, pp, copies)
            if tsplit:
                share = share / tp
            if expert:
                share = share / ep
            over = dp / ep if expert else dp  # ZeRO shards an expert over the devices holding the same experts
            for k, x in zip(STATE_KEYS, nbytes):
                raw[k] += x * share
                sharded[k] += x * share / np.where(zero_div[k] > 0, over, 1.0)
            raw["weights"] += t.weights.get((where, layers, tsplit, expert), 0.0) * share
            step += t.steps.get((where, layers, tsplit, expert), 0.0) * share / np.where(z >= 1, dp, 1.0)
        flight = _in_flight(stage, s, pp, m, v)
        act = np.zeros(tp.shape)
        for r, name in enumerate(("none", "selective", "full")):
            pick = rec == r
            if not pick.any() or name not in t.acts:
                continue
            for (where, layers, has_t, tsplit), (c0, c1) in t.acts[name].items():
                part = np.where(tp > 1, 1 / tp, 1.0) if megatron_sp or tsplit else 1.0
                part = part * (np.where(cp > 1, 1 / cp, 1.0) if has_t else 1.0)
                if where == "block":
                    if stage == "middle":
                        part = part * flight * np.where(pp == 1, 1.0, np.ceil(layers / pp) / layers)
                    else:
                        part = part * flight * np.where(pp == 1, 1.0, copies / pp) / copies
                else:
                    here = np.where((pp == 1) | (where == stage), 1.0, 0.0) * (stage != "middle")
                    part = part * here * (flight if where == "first" else 1.0)
                act += np.where(pick, (c0 + c1 * b) * part, 0.0)
        nums = {k: np.ceil(sharded[k] - 1e-9 * np.abs(sharded[k])) for k in STATE_KEYS}
        nums["activations"] = np.ceil(act - 1e-9 * np.abs(act))
        nums["step"] = step
        per_stage.append((nums, raw))
    totals = np.stack([sum(n[k] for k in (*STATE_KEYS, "activations")) for n, _ in per_stage])
    totals[1] = np.where(pp >= 3, totals[1], -np.inf)  # a middle stage only from three stages on
    totals[2] = np.where(pp >= 2, totals[2], -np.inf)
    full = np.argmax(totals, axis=0)  # the first of equal stages
    pick = lambda key, i=0: np.choose(full, [p[i][key] for p in per_stage])  # noqa: E731
    out = {k: pick(k) for k in (*STATE_KEYS, "activations")}
    out["total"] = np.max(totals, axis=0)
    # the optimizer step's point (gradients resident: a planned layout chooses its micro-batch, as estimate
    # --micro-batch does): the states and the step's temporary, on each device's shard under ZeRO
    step = pick("step")
    peak_at = np.maximum(peak_bytes(t, lay, sum(out[k] for k in STATE_KEYS)), sum(out[k] for k in STATE_KEYS) + step)
    # the rule of every verb (costmodel.sections.fits.judged): the peak where modelled (pp = 1), else the sum
    out["need"] = np.where(np.isnan(peak_at), out["total"], peak_at)
    grads, own = pick("grads", 1), pick("weights", 1)
    # communication_bytes.dp (costmodel.memory.parallel.dp_collectives): a ring all-reduce of the gradients,
    # 2(n−1)/n; ZeRO a reduce-scatter of them and an all-gather of the weights, (n − 1)·⌈X/n⌉ each (the padding
    # counted); ZeRO 3 gathers the weights twice and runs all three every micro-batch
    up = lambda x: np.ceil(x - 1e-9 * np.abs(x))  # noqa: E731
    rs = np.where(z > 0, (dp - 1) * up(grads / dp), 0.0) * np.where(z == 3, m, 1.0)
    ag = np.where(z > 0, (dp - 1) * up(own / dp), 0.0) * np.where(z == 3, 2 * m, 1.0)
    out["dp_bytes"] = np.where(z > 0, rs + ag, up(2 * (dp - 1) / dp * grads))
    out["dp_reduce_scatter"], out["dp_all_gather"] = rs, ag
    return out


__all__ = ["MemoryTable", "memory", "peak_bytes", "table"]
