"""Activation memory (with recompute choices), peak memory by liveness, KV cache, inference weights.

Activations are the tensors ops save for backward (each op rule's ``Saved``
list), each distinct tensor once, × the runs that keep a copy. Choices:

* ``recompute="none"``: everything saved is kept (what eager PyTorch does).
* ``"selective"``: the attention core (score → epilogue → softmax → dropout →
  context, found as :func:`costmodel.passes.flash_attention` finds it) is
  recomputed in backward, as in Korthikanti et al. 2022: its T×T tensors are
  not kept; q, k, v are.
* ``"full"``: only the input of every iteration of each repeated block (the
  transformer layers) is kept; the block's forward runs again in backward.

FlashAttention is a graph pass (:func:`costmodel.passes.flash_attention`);
activation dtype is the graph's dtype (a builder option). Recomputed forward
FLOPs are returned as ``recompute_flops`` (hardware FLOPs, not model FLOPs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx
import sympy

from .analysis import evaluate, op_nodes
from .cost import Saved, Zero, dtype_bytes
from .errors import CostModelError
from .ops import Conventions, data_operands, op_cost
from .pattern import Axes, elements
from .symbols import C, T

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Kept:
    """One distinct tensor kept for backward: what it is, its axes, who keeps it, how many copies."""

    node: str  # the node that makes it
    saved: Saved
    axes: tuple[tuple[str, sympy.Expr], ...]  # (axis, size)
    copies: sympy.Expr
    savers: tuple[str, ...]  # ops that save it, in graph order

    @property
    def bytes(self) -> sympy.Expr:
        return self.saved.bytes * self.copies


def order(G: nx.DiGraph) -> list[str]:
    """Op nodes in a topological order that follows insertion order where it can."""
    index = {n: i for i, n in enumerate(G.nodes)}
    return [n for n in nx.lexicographical_topological_sort(G, key=index.__getitem__) if "op" in G.nodes[n]]


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
        if sympy.expand(elements(axes, op.size) - s.elements) == 0:
            return axes
    return p.output


def requires_grad(G: nx.DiGraph, conventions: Conventions = Conventions(),
                  carried: frozenset[str] = frozenset()) -> set[str]:
    """Op nodes whose output needs a gradient: they hold a trainable weight or read such an output.

    An op outside this set builds no backward node and saves nothing (PyTorch's
    autograd), e.g. everything before the first adapter of a frozen model.
    ``carried``: producers whose output is taken to need a gradient (a repeated
    block's input after its first iteration, which is the block's own output).
    """
    out: set[str] = set(carried)
    for name in order(G):
        data = G.nodes[name]
        op = data["op"]
        own = op_cost(op, conventions).params != 0 and op.attr("trainable", True) is not False
        if own or any(src in out for src in data["inputs"]):
            out.add(name)
    return out


def _grad_share(G: nx.DiGraph, conventions: Conventions) -> dict[str, sympy.Expr]:
    """Per op node: the share of its runs whose output needs a gradient (1, 0, or (L−1)/L in a block
    whose first iteration reads a tensor without gradient but whose later iterations read their own output)."""
    first = requires_grad(G, conventions)
    share = {n: sympy.Integer(1 if n in first else 0) for n in order(G)}
    for block, count in repeated_blocks(G).items():
        if not any(in_block(n, block) and n in first for n in share):
            continue
        later = requires_grad(G, conventions, frozenset(block_inputs(G, block)))
        for n in share:
            if in_block(n, block) and (n in first) != (n in later):
                share[n] = (int(n in first) + (count - 1) * int(n in later)) / count
    return share


def kept_tensors(G: nx.DiGraph, conventions: Conventions = Conventions()) -> dict[tuple, Kept]:
    """Each distinct tensor saved for backward (no recompute), keyed by the node that holds its storage.

    Ops whose output needs no gradient (:func:`requires_grad`) save nothing.
    """
    out: dict[tuple, Kept] = {}
    grad = _grad_share(G, conventions)
    for name in order(G):
        data = G.nodes[name]
        op = data["op"]
        if grad[name] == 0:
            continue
        for s in op_cost(op, conventions).saved:
            share = grad[name]
            if s.source == "own":
                node, label = name, s.name
            elif s.source == "output":
                node, label = name, "output"
            else:
                i = int(s.source.removeprefix("input"))
                node, label = data["inputs"][i], "output"
                if _for_other_input(op) and len(data["inputs"]) == 2:
                    share = grad.get(data["inputs"][1 - i], sympy.Integer(0))  # kept for the other's gradient
                    if share == 0:
                        continue
            base = _storage(G, node) if label == "output" else node
            key = (base, label, data["count"])
            copies = data["count"] * share
            if key in out:
                old = out[key]
                out[key] = Kept(old.node, old.saved, old.axes, copies if share == 1 else old.copies,
                                (*old.savers, name))
            elif base != node:  # a view (a sliding window's unfold): the kept tensor is its input's storage
                owner = G.nodes[base]["op"]
                axes = owner.parsed.output
                kept = Saved(s.name, s.source, elements(axes, owner.size), s.dtype, s.role)
                out[key] = Kept(base, kept, tuple((a, owner.size[a]) for a in axes), copies, (name,))
            else:
                axes = _axes_of(op, s)
                out[key] = Kept(node, s, tuple((a, op.size[a]) for a in axes), copies, (name,))
    return out


def _storage(G: nx.DiGraph, node: str) -> str:
    """The op node whose output holds ``node``'s storage: a view (a reshape without copy) shares its input's."""
    while True:
        op = G.nodes[node].get("op")
        if op is None or op.kind != "reshape" or op.attr("copy"):
            return node
        source = G.nodes[node]["inputs"][0]
        if "op" not in G.nodes[source]:
            return node  # a view of a graph input: keep the view's own size
        node = source


def _for_other_input(op) -> bool:
    """Ops whose saved input i serves only the gradient of input 1 − i (a product of two activations)."""
    return op.kind == "contraction" or (op.kind == "elementwise" and op.attr("fn") == "mul")


def repeated_blocks(G: nx.DiGraph) -> dict[str, sympy.Expr]:
    """The outermost repeated blocks (count ≠ 1) of ``G``: block → count."""
    blocks = G.graph.get("blocks", {})
    out: dict[str, sympy.Expr] = {}
    for name in sorted(blocks, key=lambda b: b.count(".")):
        if blocks[name] != 1 and not any(name.startswith(o + ".") for o in out):
            out[name] = blocks[name]
    return out


def in_block(node: str, block: str) -> bool:
    return node.startswith(block + ".")


def block_inputs(G: nx.DiGraph, block: str) -> dict[str, Kept]:
    """Tensors from outside ``block`` read inside it (a layer's input), one Kept per producer."""
    count = G.graph["blocks"][block]
    out: dict[str, Kept] = {}
    for name in order(G):
        if not in_block(name, block):
            continue
        op = G.nodes[name]["op"]
        for i, src in enumerate(G.nodes[name]["inputs"]):
            if in_block(src, block):
                continue
            if src in out:
                out[src] = Kept(**{**out[src].__dict__, "savers": (*out[src].savers, name)})
                continue
            axes = data_operands(op)[i]
            n = elements(axes, op.size)
            dtype = "int64" if "op" not in G.nodes[src] else op.dtype
            out[src] = Kept(src, Saved("block_input", "input%d" % i, n, dtype), tuple((a, op.size[a]) for a in axes),
                            count, (name,))
    return out


def attention_cores(G: nx.DiGraph) -> list[tuple[list[str], str]]:
    """Each materialised attention core: ([score, epilogue, softmax, dropout nodes], context node).

    The chains :func:`costmodel.passes.flash_attention` fuses (split MLA scores too),
    found by the same walk: selective recompute drops exactly what FlashAttention fuses.
    """
    from .passes import attention_chains

    return [([*scores, *epilogue, softmax, *dropouts], context)
            for scores, epilogue, softmax, dropouts, context in attention_chains(G)]


@dataclass(frozen=True)
class Activations:
    """Activation memory of one step under a recompute choice."""

    tensors: dict[tuple, Kept]
    recompute: str
    recompute_flops: sympy.Expr

    @property
    def bytes(self) -> sympy.Expr:
        return sympy.expand(sum((k.bytes for k in self.tensors.values()), Zero))

    def by_role(self) -> dict[str, sympy.Expr]:
        out: dict[str, sympy.Expr] = {}
        for k in self.tensors.values():
            out[k.saved.role] = sympy.expand(out.get(k.saved.role, Zero) + k.bytes)
        return out


def activations(G: nx.DiGraph, recompute: str = "none", conventions: Conventions = Conventions()) -> Activations:
    """The tensors kept for backward under ``recompute`` and the forward FLOPs done again.

    >>> from costmodel import load
    >>> G = load("gpt", {"dropout_p": True}).graph
    >>> a = activations(G, "full")
    >>> a.bytes  # L layer inputs; outside the layers: embedding mask, ln_f in, lm_head in, ids, ...
    2*B*L*T*d + 4*B*T*V + 5*B*T*d + 24*B*T + 8*T + 4
    """
    if recompute not in RECOMPUTE:
        raise CostModelError(f"recompute must be one of {RECOMPUTE}, received {recompute!r}")
    tensors = kept_tensors(G, conventions)
    flops = Zero
    if recompute == "selective":
        for core, context in attention_cores(G):
            tensors = {k: v for k, v in tensors.items() if v.node not in core}
            flops += sum((op_cost(G.nodes[n]["op"], conventions).forward.flops * G.nodes[n]["count"]
                          for n in (*core, context)), Zero)
    elif recompute == "full":
        for block, count in repeated_blocks(G).items():
            tensors = {k: v for k, v in tensors.items() if not all(in_block(s, block) for s in v.savers)}
            for src, kept in block_inputs(G, block).items():
                tensors[(src, "block_input", count)] = kept
            flops += sum((op_cost(d["op"], conventions).forward.flops * d["count"]
                          for n, d in op_nodes(G) if in_block(n, block)), Zero)
    return Activations(tensors, recompute, sympy.expand(flops))


def per_iteration(G: nx.DiGraph, block: str = "layers", recompute: str = "none",
                  conventions: Conventions = Conventions()) -> dict[str, sympy.Expr]:
    """Bytes one iteration of ``block`` keeps (one transformer layer), by role.

    With the GPT-3 recipe (bf16, dropout on) this is Korthikanti et al.'s
    ``s·b·h·(34 + 5·a·s/h)`` plus the LayerNorm statistics (``role="stats"``).
    """
    if block not in G.graph.get("blocks", {}):
        raise CostModelError(f"no block {block!r} in graph {G.graph.get('name')!r}; blocks: {sorted(G.graph['blocks'])}")
    count = G.graph["blocks"][block]
    out: dict[str, sympy.Expr] = {}
    for k in activations(G, recompute, conventions).tensors.values():
        if all(in_block(s, block) for s in k.savers):
            out[k.saved.role] = sympy.expand(out.get(k.saved.role, Zero) + k.bytes / count)
    return out


# ---------------------------------------------------------------------------
# Inference: KV cache, quantised weights, working set


def kv_cache(G: nx.DiGraph, context: sympy.Expr = C, dtype: str | None = None) -> sympy.Expr:
    """Bytes of the KV cache for ``context`` tokens: every tensor tagged ``"kv_cache"``.

    Each tagged tensor (k and v, or MLA's latent) is kept for every token: its
    elements with the sequence length T replaced by ``context``, × its count
    (L layers), in ``dtype`` (default: the op's). For MHA/GQA this is
    ``2 · L · B · C · n_kv · d_head · bytes``.
    """
    total = Zero
    for name, data in op_nodes(G):
        if "kv_cache" in data.get("tags", ()):
            op = data["op"]
            kept = data.get("kv_positions", T).subs(T, context)  # a sliding window keeps only its last tokens
            n = elements(op.parsed.output, op.size).subs(T, kept)
            total += n * data["count"] * dtype_bytes(dtype or op.dtype)
    if total == 0:
        raise CostModelError(f"graph {G.graph.get('name')!r} tags no tensor 'kv_cache'; expected the k and v "
                             "projections (or a latent) tagged with GraphBuilder.tag(t, 'kv_cache')")
    return sympy.expand(total)


@dataclass(frozen=True)
class WeightFormat:
    """How inference weights of matmuls are stored: bits per element + one scale set per group."""

    name: str
    bits: int
    group: int | None  # elements along the input axes sharing a scale; None: one per output row
    scale_bytes: int  # bytes of scales (and zero points) per group
    about: str


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("fp32", 32, None, 0, "fp32, no scales"),
    WeightFormat("bf16", 16, None, 0, "bf16, no scales"),
    WeightFormat("fp16", 16, None, 0, "fp16, no scales"),
    WeightFormat("fp8", 8, 128, 4, "fp8 e4m3 with one fp32 scale per 128 input elements"),
    WeightFormat("int8", 8, None, 2, "int8 with one fp16 scale per output channel (LLM.int8-style)"),
    WeightFormat("int4", 4, 128, 4, "int4 with an fp16 scale and fp16 zero point per 128 (GPTQ/AWQ)"),
)}


def inference_weights(G: nx.DiGraph, fmt: str = "bf16", share=None) -> dict[str, sympy.Expr]:
    """Weight bytes for inference: matmul weights in ``fmt``; tables, norms, biases in the graph dtype.

    ``share(w)``: the fraction of each weight one device holds (default: all of it), as
    :func:`costmodel.parallel.weight_share` gives for a pipeline stage.
    """
    from .training import weights

    if fmt not in WEIGHT_FORMATS:
        raise CostModelError(f"unknown weights dtype {fmt!r}; expected one of {sorted(WEIGHT_FORMATS)}")
    f = WEIGHT_FORMATS[fmt]
    quantised = scales = other = Zero
    for w in weights(G):
        op = G.nodes[w.node]["op"]
        part = sympy.Integer(1) if share is None else share(w)
        if w.name == "weight" and w.kind != "gather":  # a matmul's weight operand; a lookup table stays as is
            quantised += w.elements * w.count * sympy.Rational(f.bits, 8) * part
            per_matrix = w.rows if f.group is None else w.rows * sympy.ceiling(w.cols / f.group)
            groups = w.stack * per_matrix  # each of a stack of matrices (MoE experts) has its own scales
            scales += groups * w.count * f.scale_bytes * part
        else:
            other += w.elements * w.count * dtype_bytes(op.dtype) * part
    return {"matmul_weights": quantised, "scales": scales, "other": other,
            "total": sympy.expand(quantised + scales + other)}


def working_set(G: nx.DiGraph, values: Mapping) -> tuple[int, str]:
    """Forward-only working set: the largest (inputs + output) bytes of one op, and which op."""
    best, where = 0, ""
    for name, data in op_nodes(G):
        op = data["op"]
        p = op.parsed
        n = sum((elements(a, op.size) for a in data_operands(op)), Zero) + elements(p.output, op.size)  # no weights
        b = int(evaluate(n * dtype_bytes(op.dtype), values, f"working set of {name}"))
        if b > best:
            best, where = b, name
    return best, where
