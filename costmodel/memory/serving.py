"""Per-device memory of inference (the report's memory section under ``inference=True``), as quantities.

A device holds its share of the weights (in the inference format, divided by tp; under pp its stage's
layers, the embeddings on the first stage, the final norm and head on the last), its share of the KV cache
of C tokens (and of a recurrent state), and the forward working set of the prefill of the prompt: the
largest op's operands and output, split by tp where an axis is split. The fullest pipeline stage is the
device to fit.

The prompt is one length for the prefill's FLOPs and its memory: P = min(T, C) (T: ``seq``, the model's
by default; C: ``context``, T by default). A generation's prefill keeps only the last position's logits
(``logits="last"``, :func:`~costmodel.graph.passes.last_logits`); scoring a text keeps all of them
(``logits="all"``). A sliding window's unfolded keys are a view of the cached keys: no memory of their own.
"""

from __future__ import annotations

import networkx as nx
import sympy

from ..formulas.compiled import Text, verbatim
from ..formulas.quantities import Quantities, maximum, whole
from ..graph.cost import Zero
from ..graph.passes import last_logits
from ..graph.registry import kind_of
from ..options import Layout, Options
from ..options.policies import ATTENTION_ABOUT, weight_format
from ..symbols import C, T
from .device import fullest, prepared
from .inference import inference_weights, kv_cache, state_cache, working_set
from .parallel import (
    _block_share,
    kv_head_checks,
    kv_share,
    layout_checks,
    split_axes,
    stage_of,
    stages,
    weight_share,
)


def prompt(options: Options) -> sympy.Expr:
    """The prompt length P of a prefill: min(T, C) — the sequence, capped by the KV cache's context."""
    return sympy.Min(T, options.context) if options.context else T


def prefill(G: nx.DiGraph, options: Options) -> nx.DiGraph:
    """The graph of the prefill the memory and FLOP numbers describe: the last position's logits only
    unless ``logits="all"``."""
    return last_logits(G) if options.logits == "last" else G


def inference_memory(G: nx.DiGraph, options: Options) -> Quantities:
    """Inference memory keys: weights in ``weights_dtype``, the KV cache of ``context`` tokens, working set."""
    layout = options.layout
    H = prepared(G, options)
    q = Quantities()
    q.checks += layout_checks(H, layout) + kv_head_checks(H, layout.tp)
    context = sympy.Integer(options.context) if options.context else T
    at = {T: prompt(options), C: context}
    tp = sympy.Integer(layout.tp)
    split = split_axes(H)
    P = prefill(H, options)

    def share_axes(axes) -> sympy.Expr:  # tensor parallelism splits an activation with a split axis
        return 1 / tp if layout.tp > 1 and any(a in split for a in axes) else sympy.Integer(1)

    names = stages(layout.pp)
    per_stage = {}
    stored = checkpoint(H, options)
    for stage in names:
        w = inference_weights(
            H, options.weights_dtype, weight_share(H, Layout(pp=layout.pp, dp=layout.ep, ep=layout.ep), stage), stored
        )

        def on(node: str, stage: str = stage) -> sympy.Expr:  # this stage's share of a node's layers
            where = stage_of(H, node)
            if where == "block":
                return _block_share(H, node, layout.pp, stage)
            return sympy.Integer(1 if layout.pp == 1 or where == stage else 0)

        def runs(node: str, stage: str = stage) -> bool:
            return not kind_of(P.nodes[node]["op"]).training_only and (
                layout.pp == 1 or stage_of(P, node) in ("block", stage)
            )

        work, labels = working_set(P, share_axes, runs)
        nums = {
            "params": whole((w["total"] / tp).xreplace(at)),
            "scales": whole((w["scales"] / tp).xreplace(at)),
            "kv_cache": whole(
                kv_cache(H, C, options.kv_dtype, lambda n, on=on: on(n) * kv_share(H, n, layout.tp, split)).xreplace(at)
            ),
            "activations": maximum(*(c.xreplace(at) for c in work)),
        }
        per_stage[stage] = (nums, work, labels)
    state = state_cache(H)  # a state-space model's cache: its size does not grow with the context
    states = whole((state / tp / layout.pp).xreplace(at))
    totals = [n["params"] + n["kv_cache"] + n["activations"] for n, _, _ in per_stage.values()]
    nums = {k: fullest(totals, [per_stage[s][0][k] for s in names]) for k in per_stage["first"][0]}
    if len(names) > 1:
        q.choices["memory.layout.stage"] = (tuple(totals), names)
    q.add("memory_bytes.params", nums["params"])
    q.add("memory_bytes.grads", Zero)
    q.add("memory_bytes.optimizer", Zero)
    q.add("memory_bytes.kv_cache", nums["kv_cache"])
    if state != 0:
        q.add("memory_bytes.state_cache", states)
    q.add("memory_bytes.activations", nums["activations"])
    q.add("memory_bytes.parts.scales", nums["scales"])
    work, labels = working_set(P, share_axes, lambda n: not kind_of(P.nodes[n]["op"]).training_only)
    q.choices["memory.working_set_at"] = (tuple(c.xreplace(at) for c in work), labels)
    q.add("memory_bytes.total", nums["params"] + nums["kv_cache"] + states + nums["activations"])
    q.info.update(_conventions(options, layout, state != 0, stored))
    q.info["memory.attention_implementation"] = ATTENTION_ABOUT[options.attention] + (
        " (the inference default: serving engines run fused attention)" if options.attention_default else ""
    )
    return q


def checkpoint(G: nx.DiGraph, options: Options):
    """The :class:`~costmodel.options.policies.Checkpoint` the weights are counted in: the graph's (a config's
    ``quantization_config``) unless ``weights_dtype`` was chosen, else None."""
    return G.graph.get("checkpoint") if options.weights_default else None


def _conventions(options: Options, layout: Layout, state: bool, stored=None) -> dict[str, object]:
    """The convention texts of an inference estimate, as templates (filled at each point's numbers)."""
    fmt = weight_format(options.weights_dtype)
    stored_text = f"as the checkpoint stores them ({stored.about}; --weights-dtype chooses another)" if stored else None
    stage_text = (
        "; pipeline {memory__layout__stage} stage of pp = "
        + str(layout.pp)
        + verbatim(
            " (its share of the repeated layers, plus the embeddings on the first stage, the final norm and head on "
            "the last)"
        )
        if layout.pp > 1
        else ""
    )
    logits = (
        "the last position's logits (a generation)" if options.logits == "last" else "every position's logits (scoring)"
    )
    out: dict[str, object] = {
        "memory.conventions.params": Text(
            verbatim(
                f"inference weights: {stored_text or 'matmuls in ' + fmt.about}, tables and norms in "
                f"the graph dtype; divided by tp = {layout.tp}"
            )
            + stage_text
        ),
        "memory.conventions.kv_cache": Text(
            "every tensor tagged kv_cache for "
            + (str(options.context) if options.context else "{T}")
            + verbatim(
                f" tokens × batch (a sliding window keeps its last W − 1), in "
                f"{options.kv_dtype or 'the op dtype'}; "
                + (
                    "divided by tp"
                    if layout.tp == 1
                    else f"whole heads on each of tp = {layout.tp} devices (⌈heads/tp⌉: a tp above the head count "
                    "replicates them)"
                )
                + ", a pipeline stage's share of the layers"
            )
        ),
        "memory.conventions.activations": Text(
            verbatim("forward working set of a prefill of the prompt (min(T, C) = ")
            + "{prompt:,}"
            + verbatim(
                f" tokens), keeping {logits}: the largest op's inputs + output (a view, such as a sliding "
                "window's unfolded keys, is its storage); split by tp where an axis is split"
            ),
            {"prompt": prompt(options)},
        ),
        "memory.conventions.total": "params + kv_cache + activations" + (" + state_cache" if state else ""),
    }
    if state:
        out["memory.conventions.state_cache"] = (
            "the recurrent state of every op that keeps one (a causal "
            "convolution's last inputs in the op dtype, a selective scan's "
            "state in fp32) × batch, whatever the context; divided by tp "
            "and pp"
        )
    return out


__all__ = ["inference_memory", "prefill", "prompt"]
