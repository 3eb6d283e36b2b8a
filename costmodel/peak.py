"""Peak memory of a training step by liveness in the graph's order, not only a sum.

The step is walked as PyTorch runs it: the forward in topological order, the
backward in reverse, each repeated block's iterations one after another (the
block is not unrolled: an iteration's numbers are multiplied). Live at a point:

* every tensor kept for backward (:func:`costmodel.memory.activations`) from the
  forward of the first op that saves it to the backward of that op;
* under recompute, an iteration's recomputed tensors from the start of its
  backward until the op that used them is done;
* the running op's transients: in forward its input and output tensors that
  are not kept anyway, in backward the gradients of its output and inputs
  (in the op's dtype; the loss also holds the gradient of its log-probs).

Not counted: tensors held across ops without being saved (the forward
residual stream, the running gradient of the residual stream beyond the op
that touches it), allocator caching and fragmentation, kernels' workspaces,
the CUDA context. Model states are added as one constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from .analysis import evaluate
from .cost import Zero, dtype_bytes
from .memory import Kept, activations, in_block, order, repeated_blocks
from .ops import Conventions, data_operands
from .pattern import elements


@dataclass(frozen=True)
class Peak:
    """The largest live activation bytes of a step, where it happens, and the states added to it."""

    activations: int  # live activation bytes at the peak (kept + recomputed + transients)
    states: int
    phase: str  # "forward" or "backward"
    node: str

    @property
    def bytes(self) -> int:
        return self.activations + self.states


def _segments(G: nx.DiGraph, ops: list[str]) -> list[tuple[str | None, list[str]]]:
    blocks = repeated_blocks(G)
    segs: list[tuple[str | None, list[str]]] = []
    for n in ops:
        block = next((b for b in blocks if in_block(n, b)), None)
        if segs and segs[-1][0] == block:
            segs[-1][1].append(n)
        else:
            segs.append((block, [n]))
    return segs


def _ledger(tensors: Mapping[tuple, Kept], values, iters: Mapping[str | None, int]) -> dict[str, int]:
    """Per first saver: bytes it allocates/frees per iteration of its block."""
    at: dict[str, int] = {}
    for k in tensors.values():
        first = k.savers[0]
        block = next((b for b in iters if b and in_block(first, b) and all(in_block(s, b) for s in k.savers)), None)
        total = evaluate(k.bytes, values, f"kept tensor {k.node}")
        at[first] = at.get(first, 0) + int(-(-total // iters[block]))  # per iteration, rounded up
    return at


def _operand_bytes(G: nx.DiGraph, name: str, values, skip: set[str]) -> tuple[int, int]:
    """(forward transient bytes, backward gradient bytes) of one run of op ``name``."""
    op = G.nodes[name]["op"]
    p = op.parsed
    data = data_operands(op)  # a weight operand is a parameter, not a transient activation
    size = dtype_bytes(op.dtype)
    fwd = Zero
    for axes, src in zip(data, G.nodes[name]["inputs"]):
        if src not in skip:
            fwd += elements(axes, op.size) * size
    out = elements(p.output, op.size) * size
    if name not in skip:
        fwd += out
    grads = out + sum((elements(a, op.size) for a in data), Zero) * size
    if op.kind == "gather":
        grads = out  # the ids get no gradient
    if op.kind == "loss":  # the gradient of the log-probs exists before the logits' gradient is made from it
        grads += elements(p.inputs[0], op.size) * dtype_bytes(str(op.attr("probs_dtype", "fp32")))
    return int(evaluate(fwd, values, f"op {name}")), int(evaluate(grads, values, f"op {name}"))


def peak(G: nx.DiGraph, values: Mapping, recompute: str = "none", states: int = 0,
         conventions: Conventions = Conventions()) -> Peak:
    """Peak memory of one training step of ``G`` for the numbers ``values`` (see the module notes)."""
    ops = order(G)
    segs = _segments(G, ops)
    iters: dict[str | None, int] = {None: 1}
    iters.update({b: int(evaluate(c, values, f"count of block {b}")) for b, c in repeated_blocks(G).items()})
    kept = activations(G, recompute, conventions).tensors
    full = activations(G, "none", conventions).tensors
    alloc_kept = _ledger(kept, values, iters)
    alloc_full = _ledger(full, values, iters)
    skip = {k.node for k in kept.values()}
    transient = {n: _operand_bytes(G, n, values, skip) for n in ops}

    best = (0, "forward", ops[0] if ops else "")
    live = 0
    for block, nodes in segs:
        n = iters[block]
        per_iter = sum(alloc_kept.get(x, 0) for x in nodes)
        running = live + (n - 1) * per_iter  # the last iteration holds the most
        for x in nodes:
            running += alloc_kept.get(x, 0)
            best = max(best, (running + transient[x][0], "forward", x))
        live += n * per_iter
    for block, nodes in reversed(segs):
        n = iters[block]
        kept_iter = sum(alloc_kept.get(x, 0) for x in nodes)
        full_iter = sum(alloc_full.get(x, 0) for x in nodes)
        running = live - kept_iter + full_iter  # the iteration's recomputed tensors are back
        for x in reversed(nodes):
            best = max(best, (running + transient[x][1], "backward", x))
            running -= alloc_full.get(x, 0)
        live -= n * kept_iter
    return Peak(best[0], states, best[1], best[2])
