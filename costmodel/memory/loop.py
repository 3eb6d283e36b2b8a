"""The training loop's own tensors: gradients made during backward, and the optimizer step's temporary.

With ``optimizer.zero_grad()`` (``set_to_none=True``, torch's default since 2.0) no gradient exists when a
backward starts: each is born at its weight's backward (a tied unembedding's at the unembedding, the first of
its two users backward reaches) and all exist at the end of backward, until the step. Under gradient
accumulation, ``set_to_none=False`` or a resident buffer (Megatron's, DDP's buckets) they are held throughout:
then they are a constant of the model states, as :mod:`costmodel.memory.states` counts them.

``optimizer.step()`` of torch's AdamW (``torch/optim/adamw.py``, ``_multi_tensor_adam`` / ``_single_tensor_adam``
/ ``_fused_adam``), measured under MemTracker (``tests/memory/test_memtracker.py``):

* ``foreach``: ``torch._foreach_sqrt(exp_avg_sqs)`` makes the denominators of every tensor at once: one copy of
  a state, N × the states' bytes, alive with all the states and gradients;
* ``fused``: one kernel per group updates in place: nothing;
* ``forloop``: ``exp_avg_sq.sqrt() / bias_correction2_sqrt`` holds two tensors of the weight's size at its
  division: 2 × the largest weight tensor × the states' bytes (the previous tensor's denominator, still bound
  to its name until the new one is made, is left out: a small norm gain before the unembedding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import sympy

from ..formulas.quantities import maximum
from ..graph.cost import Zero, dtype_bytes
from ..options.policies import optimizer, precision
from .states import tied_matrices, weights


@dataclass(frozen=True)
class Loop:
    """What the training loop adds to a liveness walk.

    ``grads``: bytes of the gradients born at each op node's backward (every run of it, a block's layers
    together); empty when gradients are resident (counted in the states). ``step``: the optimizer step's
    temporary, on top of the states and every gradient.
    """

    grads: Mapping[str, sympy.Expr] = field(default_factory=dict)
    step: sympy.Expr = Zero


def grads_by_op(G: nx.DiGraph, policy: str, share=None) -> dict[str, sympy.Expr]:
    """Bytes of the gradients each op node's backward makes: its trainable weights' (× ``share(weight)``, the
    fraction a device holds), a tied matrix's at the op reading it through the tie (owned elsewhere)."""
    size = dtype_bytes(precision(policy).grads)
    terms: dict[str, list[sympy.Expr]] = {}
    for w in weights(G):
        if w.trainable:
            part = share(w) if share is not None else 1
            terms.setdefault(w.node, []).append(w.elements * w.count * part * size)
    for w in tied_matrices(G):
        owner = G.nodes[w.node]["op"].attr("tied")
        if owner in G and any(p.trainable for p in weights(G) if p.node == owner):
            moved = w.elements * w.count * size
            terms.setdefault(w.node, []).append(moved)
            terms.setdefault(owner, []).append(-moved)
    return {n: sympy.expand(sympy.Add(*v)) for n, v in terms.items() if sympy.expand(sympy.Add(*v)) != 0}


def step_temporary(G: nx.DiGraph, policy: str, opt: str, impl: str, share=None) -> sympy.Expr:
    """Bytes ``optimizer.step()`` allocates on top of the states and gradients, by torch's path (module notes)."""
    o, p = optimizer(opt), precision(policy)
    if impl == "fused" or not o.states:
        return Zero
    size = dtype_bytes(p.states)
    trainable = [w for w in weights(G) if w.trainable]
    if impl == "foreach":
        return sympy.expand(
            size * sympy.Add(Zero, *(w.elements * w.count * (share(w) if share else 1) for w in trainable))
        )
    largest = {w.elements * (share(w) if share else 1) for w in trainable}
    return 2 * size * maximum(*largest) if largest else Zero


def training_loop(G: nx.DiGraph, options, share=None) -> Loop:
    """The :class:`Loop` of ``options`` (``grads_kept``: no gradients in the walk; ``optimizer_impl``)."""
    step = step_temporary(G, options.precision, options.optimizer, options.optimizer_impl, share)
    grads = {} if options.grads_kept else grads_by_op(G, options.precision, share)
    return Loop(grads, step)


def grads_total(loop: Loop) -> sympy.Expr:
    return sympy.expand(sympy.Add(Zero, *loop.grads.values()))


__all__ = ["Loop", "grads_by_op", "grads_total", "step_temporary", "training_loop"]
