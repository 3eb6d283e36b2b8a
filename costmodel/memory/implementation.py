"""What an implementation's modules keep for backward beyond the op rules (``fused``: nothing more).

The op rules keep what fused kernels keep (Korthikanti et al. 2022's per-layer count). ``transformers``: what
transformers' modules, written as Python ops in eager PyTorch, keep besides — each a rule with its closed form,
e = the elements of the op's output, s = the graph's activation bytes (2 in bf16), checked against
``saved_tensors_hooks`` and MemTracker on the real modules (``tests/memory/test_transformers_saved.py``,
``tests/memory/test_peak_memtracker.py``):

* **RMSNorm** (``weight * (x.float() * rsqrt(mean(x²) + eps)).to(dtype)``): x in fp32 (4e) and the normalised
  tensor in the input's dtype (i·e) where the rule keeps the input (s·e): ``(4 + i − s)·e`` more. i = 4 under
  autocast for a norm of the residual stream (it runs in fp32: the embedding and the residual adds are fp32 ops),
  else s (Qwen3's q/k norms read a bf16 projection).
* **LayerNorm** under autocast (an fp32 op): its fp32 input, ``(4 − s)·e`` more.
* **Casts per matmul** under autocast: each matmul that reads a norm's fp32 output casts it to bf16 itself and
  keeps its cast: ``(k − 1)·2·e`` more for k readers (LLaMA's q, k, v: 2; gate, up: 1). GPT-2's q, k, v are one
  ``c_attn``: one cast.

Facts of one family's modules are data of its graph (``G.graph["transformers"]``, set by its builder in
``graphs/``): ``fused_qkv`` (q, k, v one projection), ``gelu_saves`` (tensors a Python-ops GELU keeps besides
its input).
* **Weight casts** under autocast: each matmul keeps its weight's bf16 cast (a tied unembedding casts the table
  again) from its forward to its backward: activations of the walk, not states (``weight_cast``); under full
  recompute those inside a layer are made again in its backward (only the unembedding's is kept), but
  autocast's cache holds every cast until the forward ends (the walk: :func:`costmodel.memory.peak.peak`).
* **Checkpointed layer inputs** under autocast and full recompute: the residual stream is fp32, so is each
  layer's kept input (:func:`costmodel.memory.activations.activations`).
* **RoPE**: ``cos`` and ``sin`` (T × d_head each, in the hidden states' dtype: fp32 under autocast), made once
  and kept by every layer's multiplies.
* **GPT-2's gelu_new** as Python ops: ``0.5·x``, ``tanh(...)`` and ``1 + tanh(...)``: 3e more.
* **Eager GQA**: ``repeat_kv`` copies k and v to every query head before the eager matmuls, which keep the
  copies: ``(r − 1)·e_k`` more for each of the two, r the query heads per KV head (the axes of the matmul's
  first operand and output that its second lacks, the rows aside).
* **GPT-2 under SDPA**: the key is a view of the fused q‖k‖v output, which stays whole: 2·e_k more per layer.
* **The loss** (:func:`loss_workspace`): transformers upcasts the logits to fp32, so its forward holds that
  copy (4·B·T·V) beside the low-precision logits and the log-probabilities, and its backward the fp32 gradients
  of the log-probabilities and of the logits: 8·B·T·V bytes, (4 − s)·B·T·V more than the rule's.
"""

from __future__ import annotations

import networkx as nx
import sympy

from ..graph.cost import Saved, Zero, dtype_bytes
from ..graph.pattern import elements
from ..graph.registry import weight_operand, weight_use
from .kept import Kept

#: The roles of the tensors these rules add: tensors of their own, beside the op's output (which they do not
#: keep: the liveness walk still counts that output as the op's transient).
ROLES = ("implementation", "weight_cast", "rope")


def _kept(node: str, name: str, nbytes: sympy.Expr, count: sympy.Expr, savers: tuple[str, ...], role: str) -> Kept:
    """A tensor of ``nbytes`` (per run) kept from ``savers[0]``'s forward to its backward, as int8 elements (1 byte each)."""
    return Kept(node, Saved(name, "own", sympy.expand(nbytes), "int8", role), (), count, savers)


def _out(op) -> sympy.Expr:
    return elements(op.parsed.output, op.size)


def residual(G: nx.DiGraph, src: str) -> bool:
    """Whether ``src`` is a residual-stream tensor under autocast (an fp32 op's output: not a matmul's)."""
    op = G.nodes[src].get("op")
    return op is not None and op.kind not in ("matmul", "contraction", "norm")


def _readers(G: nx.DiGraph, node: str) -> list[str]:
    return [n for n in G.successors(node) if "op" in G.nodes[n]]


def implementation_tensors(G: nx.DiGraph, tensors: dict, implementation: str, autocast: bool) -> dict:
    """``tensors`` and what ``implementation`` keeps besides (module notes), each a :class:`Kept` of its own."""
    out = dict(tensors)
    if implementation != "transformers":
        return out
    s = dtype_bytes(G.graph.get("dtype", "bf16"))
    family = G.graph.get("transformers", {})  # a builder's facts of transformers' modules (graphs/gpt.py)
    fused_qkv, gelu_saves = family.get("fused_qkv", False), family.get("gelu_saves", 0)
    rope_done = False
    for name, data in G.nodes(data=True):
        op = data.get("op")
        if op is None:
            continue
        kind, count = op.kind, data["count"]
        extra = Zero
        if kind == "norm":
            src = G.nodes[data["inputs"][0]].get("op")
            residual = src is None or src.kind not in ("matmul", "norm")
            i = 4 if autocast and residual else s
            extra = (4 + i - s) * _out(op) if op.attr("rms") else (4 - s) * _out(op) * int(autocast)
            readers = [n for n in _readers(G, name) if G.nodes[n]["op"].kind == "matmul"]
            casts = 1 if fused_qkv and len(readers) == 3 else len(readers)
            if autocast and casts > 1:
                extra += (casts - 1) * 2 * _out(op)
        elif kind == "elementwise" and op.attr("fn") == "rope" and not rope_done:
            rope_done = True
            k = op.size.get("k")
            if k is not None and "t" in op.size:
                size = 4 if autocast else s
                out[(name, "cos_sin", 1)] = _kept(name, "cos_sin", 2 * op.size["t"] * k * size, 1, (name,), "rope")
        elif kind == "elementwise" and op.attr("fn") == "gelu" and gelu_saves:
            extra = gelu_saves * _out(op) * s
        elif kind == "contraction" and not _sdpa(G):
            a, b = op.parsed.inputs[0], op.parsed.inputs[1]
            repeat = sympy.Mul(*(op.size[x] for x in a[:-2] if x in op.parsed.output and x not in b))
            if repeat != 1:
                extra = (repeat - 1) * elements(b, op.size) * s
        elif kind == "matmul" and weight_use(op) in ("dense", "routed"):
            if autocast:
                w = op.parsed.inputs[weight_operand(op)]
                cast = elements(w, op.size) * 2
                out[(name, "weight_cast", count)] = _kept(name, "weight_cast", cast, count, (name,), "weight_cast")
            if fused_qkv and name.endswith("attn.k") and _sdpa(G):
                extra = 2 * _out(op) * s
        if extra != 0:
            out[(name, "implementation", count)] = _kept(name, kind, extra, count, (name,), "implementation")
    return out


def _sdpa(G: nx.DiGraph) -> bool:
    return bool(G.graph.get("rewritten", {}).get("flash_attention"))


def loss_workspace(G: nx.DiGraph, name: str, implementation: str) -> tuple[sympy.Expr, sympy.Expr]:
    """(forward, backward) bytes the loss of ``implementation`` holds beyond its rule's transients: transformers'
    fp32 copy of low-precision logits (``logits.float()``), beside the log-probabilities in forward, and the
    fp32 gradients of log-probabilities and logits in backward (8·B·T·V, the rule's 6)."""
    op = G.nodes[name]["op"]
    s = dtype_bytes(op.dtype)
    if implementation != "transformers" or op.kind != "loss" or s >= 4:
        return Zero, Zero
    logits = elements(op.parsed.inputs[0], op.size)
    return 4 * logits, (4 - s) * logits
