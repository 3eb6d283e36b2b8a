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
  division, and the previous tensor's denominator is still bound to its name until the new one is made: the
  largest of 2 × a tensor + the tensor before it (in the graph's order, as the parameters are registered) ×
  the states' bytes; about twice the largest tensor.
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


def _part(w, share) -> sympy.Expr:
    """The fraction of weight ``w`` one device holds (``share(w)``; all of it without a share)."""
    return share(w) if share is not None else sympy.Integer(1)


def grads_by_op(G: nx.DiGraph, policy: str, share=None) -> dict[str, sympy.Expr]:
    """Bytes of the gradients each op node's backward makes: its trainable weights' (× ``share(weight)``, the
    fraction a device holds), a tied matrix's at the op reading it through the tie (owned elsewhere)."""
    size = dtype_bytes(precision(policy).grads)
    terms: dict[str, list[sympy.Expr]] = {}
    owners = {}  # node → the share of its trainable weights (a tie moves the owner's gradient)
    for w in weights(G):
        if w.trainable:
            terms.setdefault(w.node, []).append(w.elements * w.count * _part(w, share) * size)
            owners.setdefault(w.node, _part(w, share))
    for w in tied_matrices(G):
        owner = G.nodes[w.node]["op"].attr("tied")
        if owner in owners:
            moved = w.elements * w.count * owners[owner] * size
            terms.setdefault(w.node, []).append(moved)
            terms.setdefault(owner, []).append(-moved)
    sums = {n: sympy.expand(sympy.Add(*v)) for n, v in terms.items()}
    return {n: v for n, v in sums.items() if v != 0}


def step_temporary(G: nx.DiGraph, policy: str, opt: str, impl: str, share=None) -> sympy.Expr:
    """Bytes ``optimizer.step()`` allocates on top of the states and gradients, by torch's path (module notes)."""
    o, p = optimizer(opt), precision(policy)
    if impl == "fused" or not o.states:
        return Zero
    size = dtype_bytes(p.states)
    trainable = [w for w in weights(G) if w.trainable]
    if impl == "foreach":
        return sympy.expand(size * sympy.Add(Zero, *(w.elements * w.count * _part(w, share) for w in trainable)))
    # one tensor at a time, in the parameters' order (the graph's): at tensor i's division its two temporaries
    # and tensor i − 1's denominator, still bound to its name; a repeated block's last tensor precedes its first
    sizes = [(w.elements * _part(w, share), w.count != 1) for w in trainable]
    pairs = {2 * e + (sizes[i - 1][0] if i else 0) for i, (e, _) in enumerate(sizes)}
    first = next((i for i, (_, repeated) in enumerate(sizes) if repeated), None)
    if first is not None:
        last = max(i for i, (_, repeated) in enumerate(sizes) if repeated)
        pairs.add(2 * sizes[first][0] + sizes[last][0])
    return size * maximum(*pairs) if pairs else Zero


def training_loop(G: nx.DiGraph, options, share=None) -> Loop:
    """The :class:`Loop` of ``options`` (``grads_kept``: no gradients in the walk; ``optimizer_impl``)."""
    step = step_temporary(G, options.precision, options.optimizer, options.optimizer_impl, share)
    grads = {} if options.grads_kept else grads_by_op(G, options.precision, share)
    return Loop(grads, step)


def grads_total(loop: Loop) -> sympy.Expr:
    """Bytes of every gradient the loop makes during backward (all alive at its end)."""
    return sympy.expand(sympy.Add(Zero, *loop.grads.values()))


__all__ = ["Loop", "grads_by_op", "grads_total", "step_temporary", "training_loop"]
