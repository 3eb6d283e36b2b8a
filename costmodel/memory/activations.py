"""Activation memory: the tensors kept for backward, under a recompute choice.

Activations are the tensors ops save for backward (each op rule's ``Saved``
list), each distinct tensor once, × the runs that keep a copy. Choices:

* ``recompute="none"``: everything saved is kept (what eager PyTorch does).
* ``"selective"``: the attention core (score → epilogue → softmax → dropout →
  context, found as :func:`costmodel.graph.passes.flash_attention` finds it) is
  recomputed in backward, as in Korthikanti et al. 2022: its T×T tensors are
  not kept; q, k, v are.
* ``"full"``: only the input of every iteration of each repeated block (the
  transformer layers) is kept; the block's forward runs again in backward.
* ``fraction=F`` (partial rematerialisation): a share F of each repeated block's
  iterations is recomputed whole (keeps only its input), the rest as ``recompute``
  says. PaLM 540B (Chowdhery et al. 2022, Appendix B) recomputes the attention of
  every layer and 75 % of the rest: ``recompute="selective"``, F = 3/4.

``norm_stats=False`` leaves out the fp32 statistics norms keep (mean and 1/std), as
Korthikanti et al. 2022 do in their Table 2.

FlashAttention is a graph pass (:func:`costmodel.graph.passes.flash_attention`);
activation dtype is the graph's dtype (a builder option). Recomputed forward
FLOPs are returned as ``recompute_flops`` (hardware FLOPs, not model FLOPs).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import networkx as nx
import sympy

from ..errors import CostModelError
from ..formulas.quantities import maximum
from ..graph.analysis import Structure, in_block, order, repeated_blocks, structure
from ..graph.cost import Saved, Zero, dtype_bytes
from ..graph.passes import attention_chains
from ..graph.pattern import Axes, elements
from ..graph.registry import data_operands, kind_of, op_cost
from ..options import Counting
from ..options.policies import RECOMPUTE
from .implementation import implementation_tensors, residual
from .kept import Kept


def _axes_of(op, s: Saved) -> Axes:
    p = op.parsed
    if s.source == "output":
        return p.output
    if s.source.startswith("input"):
        return data_operands(op)[int(s.source.removeprefix("input"))]  # "inputN": the node's N-th input
    if s.elements.is_number:
        return ()  # a scalar (nll_loss's total_weight): no axis to split
    first = p.inputs[0]
    reduced = str(op.attr("axis", first[-1]))
    for axes in (p.output, first, tuple(a for a in first if a != reduced)):
        if _equal(elements(axes, op.size), s.elements):
            return axes
    return p.output


@functools.lru_cache(maxsize=4096)
def _equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """``a == b`` once expanded, once per pair (the layers of a model save tensors of a few shapes)."""
    return sympy.expand(a - b) == 0


def requires_grad(G: nx.DiGraph, counting: Counting = Counting(), carried: frozenset[str] = frozenset()) -> set[str]:
    """Op nodes whose output needs a gradient: they hold a trainable weight or read such an output.

    An op outside this set builds no backward node and saves nothing (PyTorch's
    autograd), e.g. everything before the first adapter of a frozen model; nor does an op with
    ``detached=True``, or anything that reads only such ops.
    ``carried``: producers whose output is taken to need a gradient (a repeated
    block's input after its first iteration, which is the block's own output).
    """
    out: set[str] = set(carried)
    for name in order(G):
        data = G.nodes[name]
        op = data["op"]
        if op.attr("detached"):  # gradients stop here (see op_cost)
            continue
        own = op_cost(op, counting).params != 0 and op.attr("trainable", True) is not False
        if own or any(src in out for src in data["inputs"]):
            out.add(name)
    return out


def _grad_share(G: nx.DiGraph, counting: Counting) -> dict[str, sympy.Expr]:
    """Per op node: the share of its runs whose output needs a gradient (1, 0, or (L−1)/L in a block
    whose first iteration reads a tensor without gradient but whose later iterations read their own output)."""
    st = structure(G)
    first = requires_grad(G, counting)
    share = {n: sympy.Integer(1 if n in first else 0) for n in st.ops}
    learning = [b for b in st.blocks if any(n in first for n in st.members[b])]
    if not learning:
        return share
    # One pass for every block: a block's ops are reached from outside only through its own inputs, which are
    # carried in both, so carrying all the blocks' inputs at once marks each block's ops as carrying its own would.
    carried = frozenset(src for b in learning for src in _block_inputs(G, st, b) if not G.nodes[src].get("shared"))
    later = requires_grad(G, counting, carried)
    for block in learning:
        count = st.blocks[block]
        for n in st.members[block]:
            if (n in first) != (n in later):
                share[n] = (int(n in first) + (count - 1) * int(n in later)) / count
    return share


def kept_tensors(G: nx.DiGraph, counting: Counting = Counting()) -> dict[tuple, Kept]:
    """Each distinct tensor saved for backward (no recompute), keyed by the node that holds its storage.

    Ops whose output needs no gradient (:func:`requires_grad`) save nothing. A tensor from outside a
    repeated block that an op inside saves is a different tensor in each iteration (the residual stream:
    iteration i reads iteration i−1's output), unless its node is marked ``shared`` (the same tensor read
    by every iteration, as a traced model's RoPE tables or attention mask): then it is kept once.
    """
    out: dict[tuple, Kept] = {}
    grad = _grad_share(G, counting)
    for name in order(G):
        data = G.nodes[name]
        op = data["op"]
        if grad[name] == 0:
            continue
        for s in op_cost(op, counting).saved:
            share = grad[name]
            if s.source == "own":
                node, label = name, s.name
            elif s.source == "output":
                node, label = name, "output"
            else:
                i = int(s.source.removeprefix("input"))
                node, label = data["inputs"][i], "output"
            if s.serves is not None:  # kept only for some inputs' gradients (a·b keeps a for b's)
                shares = [grad.get(data["inputs"][j], Zero) for j in s.serves]
                # maximum() of numbers is their max: taken directly (a sympy function call per tensor costs)
                share = max(shares) if all(x.is_Number for x in shares) else maximum(*shares)
                if share == 0:
                    continue
            base = _storage(G, node) if label == "output" else node
            count = data["count"]
            if G.nodes[base].get("shared"):  # the same tensor in every iteration of the saver's block: kept once
                count = G.nodes[base]["count"]
            key = (base, label, count)
            copies = count * share
            if key in out:
                old = out[key]
                out[key] = Kept(
                    old.node, old.saved, old.axes, copies if share == 1 else old.copies, (*old.savers, name)
                )
            elif base != node:  # a view (a sliding window's unfold): the kept tensor is its input's storage
                owner = G.nodes[base]["op"]
                axes = owner.parsed.output
                kept = Saved(s.name, s.source, elements(axes, owner.size), s.dtype, s.role)
                out[key] = Kept(base, kept, tuple((a, owner.size[a]) for a in axes), copies, (name,))
            else:
                axes = _axes_of(op, s)
                out[key] = Kept(node, s, tuple((a, op.size[a]) for a in axes), copies, (name,))
    return out


def storage(G: nx.DiGraph, node: str) -> str:
    """The op node whose output holds ``node``'s storage: a view (a reshape without copy, a sliding window's
    unfold) shares its input's."""
    return _storage(G, node)


def storage_bytes(G: nx.DiGraph, node: str) -> sympy.Expr:
    """Bytes of the storage behind ``node``'s output: its own, or (a view) the tensor it is a view of."""
    base = _storage(G, node)
    op = G.nodes[base]["op"]
    return elements(op.parsed.output, op.size) * dtype_bytes(kind_of(op).output_dtype(op))


def is_view(G: nx.DiGraph, node: str) -> bool:
    """Whether ``node``'s output is a view of another op's storage (it allocates nothing)."""
    return _storage(G, node) != node


def _storage(G: nx.DiGraph, node: str) -> str:
    """The op node whose output holds ``node``'s storage: a view (a reshape without copy) shares its input's."""
    while True:
        op = G.nodes[node].get("op")
        if op is None or not kind_of(op).view(op):
            return node
        source = G.nodes[node]["inputs"][0]
        if "op" not in G.nodes[source]:
            return node  # a view of a graph input: keep the view's own size
        node = source


def _block_ops(st: Structure, block: str) -> list[str]:
    """The op nodes inside ``block``, in order (an outermost repeated block's from the graph's structure)."""
    if block in st.members:
        return st.members[block]
    return [n for n in st.ops if in_block(n, block)]


def block_inputs(G: nx.DiGraph, block: str) -> dict[str, Kept]:
    """Tensors from outside ``block`` read inside it (a layer's input), one Kept per producer."""
    return _block_inputs(G, structure(G), block)


def inputs_of_blocks(G: nx.DiGraph) -> dict[str, dict[str, Kept]]:
    """:func:`block_inputs` of every outermost repeated block, the graph's structure looked up once (a lookup
    checks its cache with a pass over the adjacency: once per block was quadratic in distinct blocks)."""
    st = structure(G)
    return {block: _block_inputs(G, st, block) for block in st.blocks}


def _block_inputs(G: nx.DiGraph, st: Structure, block: str) -> dict[str, Kept]:
    count = G.graph["blocks"][block]
    out: dict[str, Kept] = {}
    for name in _block_ops(st, block):
        op = G.nodes[name]["op"]
        for i, src in enumerate(G.nodes[name]["inputs"]):
            if in_block(src, block):
                continue
            if src in out:
                out[src] = dataclasses.replace(out[src], savers=(*out[src].savers, name))
                continue
            axes = data_operands(op)[i]
            n = elements(axes, op.size)
            dtype = "int64" if "op" not in G.nodes[src] else op.dtype
            copies = G.nodes[src]["count"] if G.nodes[src].get("shared") else count  # shared: one tensor
            out[src] = Kept(
                src, Saved("block_input", f"input{i}", n, dtype), tuple((a, op.size[a]) for a in axes), copies, (name,)
            )
    return out


def attention_cores(G: nx.DiGraph) -> list[tuple[list[str], str]]:
    """Each materialised attention core: ([score, epilogue, softmax, dropout nodes], context node).

    The chains :func:`costmodel.passes.flash_attention` fuses (split MLA scores too),
    found by the same walk: selective recompute drops exactly what FlashAttention fuses.
    """
    return [
        ([*scores, *epilogue, softmax, *dropouts], context)
        for scores, epilogue, softmax, dropouts, context in attention_chains(G)
    ]


@dataclass(frozen=True)
class Activations:
    """Activation memory of one step under a recompute choice."""

    tensors: dict[tuple, Kept]
    recompute: str
    recompute_flops: sympy.Expr

    @property
    def bytes(self) -> sympy.Expr:
        return sympy.expand(sympy.Add(Zero, *(k.bytes for k in self.tensors.values())))  # summed once

    def by_role(self) -> dict[str, sympy.Expr]:
        terms: dict[str, list[sympy.Expr]] = {}
        for k in self.tensors.values():
            terms.setdefault(k.saved.role, []).append(k.bytes)
        return {role: sympy.expand(sympy.Add(*v)) for role, v in terms.items()}


def activations(
    G: nx.DiGraph,
    recompute: str = "none",
    counting: Counting = Counting(),
    *,
    fraction: object = None,
    norm_stats: bool = True,
    implementation: str = "fused",
    autocast: bool = False,
) -> Activations:
    """The tensors kept for backward under ``recompute`` and the forward FLOPs done again.

    ``fraction``: the share of each repeated block's iterations recomputed whole (the rest follow
    ``recompute``); ``norm_stats=False``: without the norms' fp32 statistics (see the module notes);
    ``implementation``: ``"transformers"`` adds what transformers' modules keep beyond the op rules
    (:mod:`costmodel.memory.implementation`; ``autocast``: under ``torch.autocast``).

    >>> from costmodel import load
    >>> G = load("gpt", {"dropout_p": True}).graph
    >>> a = activations(G, "full")
    >>> a.bytes  # L layer inputs; outside the layers: embedding mask, ln_f in, lm_head in, ids, ...
    2*B*L*T*d + 4*B*T*V + 5*B*T*d + 24*B*T + 8*T + 4
    """
    if recompute not in RECOMPUTE:
        raise CostModelError(f"recompute must be one of {RECOMPUTE}, received {recompute!r}")
    if fraction is not None and fraction != 0:
        return _partial(G, recompute, counting, sympy.Rational(fraction), norm_stats, implementation, autocast)
    tensors = kept_tensors(G, counting)
    if implementation != "fused":
        tensors = implementation_tensors(G, tensors, implementation, autocast)
    if not norm_stats:  # the norms' statistics (Saved "stats" of a norm rule), left out as Korthikanti et al. do
        tensors = {k: v for k, v in tensors.items() if not (v.saved.role == "stats" and v.saved.name == "stats")}
    flops = Zero
    if recompute == "selective":
        cores, terms = set(), []  # every core's tensors dropped in one pass, its FLOPs summed once
        for core, context in attention_cores(G):
            cores.update(core)
            terms += [op_cost(G.nodes[n]["op"], counting).forward.flops * G.nodes[n]["count"] for n in (*core, context)]
        tensors = {k: v for k, v in tensors.items() if v.node not in cores}
        flops = sympy.Add(Zero, *terms)
    elif recompute == "full":
        st = structure(G)
        # a tensor every saver of which sits in one repeated block is recomputed in the backward of that block
        tensors = {
            k: v
            for k, v in tensors.items()
            if not (
                st.block_of.get(v.savers[0]) is not None
                and all(st.block_of.get(s) == st.block_of[v.savers[0]] for s in v.savers)
            )
        }
        terms = []
        for block, count in st.blocks.items():
            for src, kept in _block_inputs(G, st, block).items():
                if implementation == "transformers" and autocast and residual(G, src):
                    # transformers under autocast: the residual stream is fp32, and so the checkpointed input
                    kept = dataclasses.replace(kept, saved=dataclasses.replace(kept.saved, dtype="fp32"))
                tensors[(src, "block_input", count)] = kept
            terms += [
                op_cost(G.nodes[n]["op"], counting).forward.flops * G.nodes[n]["count"] for n in st.members[block]
            ]
        flops = sympy.Add(*terms)
    return Activations(tensors, recompute, sympy.expand(flops))


def _partial(
    G: nx.DiGraph,
    recompute: str,
    counting: Counting,
    fraction: sympy.Rational,
    norm_stats: bool,
    implementation: str = "fused",
    autocast: bool = False,
) -> Activations:
    """A share ``fraction`` of each repeated block's iterations keeps only its input (and runs its forward
    again); the other iterations keep what ``recompute`` keeps."""
    how = dict(norm_stats=norm_stats, implementation=implementation, autocast=autocast)
    rest = activations(G, recompute, counting, **how)
    whole = activations(G, "full", counting, **how)
    blocks = repeated_blocks(G)

    def inside(k: Kept) -> bool:
        return any(all(in_block(s, b) for s in k.savers) for b in blocks)

    tensors = {
        key: Kept(k.node, k.saved, k.axes, k.copies * (1 - fraction), k.savers) if inside(k) else k
        for key, k in rest.tensors.items()
    }
    for key, k in whole.tensors.items():
        if key[1] == "block_input":
            tensors[key] = Kept(k.node, k.saved, k.axes, k.copies * fraction, k.savers)
    flops = sympy.expand((1 - fraction) * rest.recompute_flops + fraction * whole.recompute_flops)
    return Activations(tensors, f"{recompute} + {fraction} full", flops)


def per_iteration(
    G: nx.DiGraph, block: str = "layers", recompute: str = "none", counting: Counting = Counting()
) -> dict[str, sympy.Expr]:
    """Bytes one iteration of ``block`` keeps (one transformer layer), by role.

    With the GPT-3 recipe (bf16, dropout on) this is Korthikanti et al.'s
    ``s·b·h·(34 + 5·a·s/h)`` plus the LayerNorm statistics (``role="stats"``).
    """
    if block not in G.graph.get("blocks", {}):
        raise CostModelError(
            f"no block {block!r} in graph {G.graph.get('name')!r}; blocks: {sorted(G.graph['blocks'])}"
        )
    count = G.graph["blocks"][block]
    out: dict[str, sympy.Expr] = {}
    for k in activations(G, recompute, counting).tensors.values():
        if all(in_block(s, block) for s in k.savers):
            out[k.saved.role] = sympy.expand(out.get(k.saved.role, Zero) + k.bytes / count)
    return out
