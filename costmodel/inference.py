"""Inference: prefill (compute-bound) and per-token decode (memory-bound) on a device.

*Prefill* runs the forward pass over a prompt of T tokens for B sequences (no
loss). *Decode* produces one token per sequence: every op runs on one query
position (axis ``t`` → 1) while attention reads the whole KV cache of C tokens
(key axis ``s`` → C). Nothing architecture-specific is assumed beyond these
two axis names (the convention of every block in ``graphs/``); the KV cache
tensors are the nodes tagged ``"kv_cache"``.

A decode step reads every weight once and every sequence's KV cache once:
``bytes ≈ weights + B·kv(C)``, ``FLOPs ≈ B·(2·params + attention(C))``. Both are
affine in B, so the batch where the step's intensity reaches the ridge point
solves a linear equation: :func:`critical_batch`.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from .analysis import as_int, evaluate, op_nodes, totals
from .cost import dtype_bytes
from .errors import CostModelError
from .hardware import Device
from .ops import Conventions, Op
from .pattern import elements
from .roofline import Bound, roofline, total
from .symbols import B, C, T


def _without_loss(G: nx.DiGraph) -> nx.DiGraph:
    H = G.copy()
    H.graph = {**G.graph, "blocks": dict(G.graph.get("blocks", {}))}
    H.remove_nodes_from([n for n, d in op_nodes(G) if d["op"].kind == "loss"])
    return H


def prefill_graph(G: nx.DiGraph) -> nx.DiGraph:
    """The forward pass over the prompt (sequence length T), without the loss."""
    return _without_loss(G)


def decode_graph(G: nx.DiGraph, *, query_axis: str = "t", key_axis: str = "s") -> nx.DiGraph:
    """One decode step: ``query_axis`` sized 1, ``key_axis`` sized C (the KV cache length).

    Every other occurrence of T becomes 1 (only the new token is computed);
    causal masking no longer applies (one query sees all C keys).
    """
    H = _without_loss(G)
    found = []

    def decoded(op: Op) -> Op:
        sizes = []
        for axis, size in op.sizes:
            if axis == key_axis and size.has(T):
                found.append(axis)
                sizes.append((axis, size.subs(T, C)))
            else:
                sizes.append((axis, size.subs(T, 1)))
        attrs = tuple((k, tuple(decoded(p) for p in v) if k == "parts" else v) for k, v in op.attrs if k != "causal")
        return Op(op.kind, op.pattern, tuple(sizes), op.dtype, attrs)

    for name, data in op_nodes(H):
        data["op"] = decoded(data["op"])
    if not found:
        raise CostModelError(f"decode: graph {G.graph.get('name')!r} has no key-position axis {key_axis!r} sized "
                             f"by T; expected attention with keys on axis {key_axis!r} (e.g. 'b h t k, b h s k')")
    H.graph["passes"] = (*G.graph.get("passes", ()), "decode")
    return H


def kv_cache_bytes(G: nx.DiGraph, conventions: Conventions = Conventions()) -> sympy.Expr:
    """Bytes of KV cache for B sequences of C tokens: the ``"kv_cache"``-tagged tensors at T = C."""
    out = sympy.Integer(0)
    for name, data in op_nodes(G):
        if "kv_cache" in data.get("tags", ()):
            op = data["op"]
            n = elements(op.parsed.output, op.size).subs(T, C)
            out += n * dtype_bytes(op.dtype) * data["count"]
    return sympy.expand(out)


def weight_bytes(G: nx.DiGraph, conventions: Conventions = Conventions()) -> sympy.Expr:
    """Bytes a decode step reads whatever the batch: its B⁰ term, i.e. the weights.

    Derived from the op rules, not from op kinds, so any weight-carrying op
    counts (matmuls, routed expert matmuls, norm gains, biases) and a gather
    counts only the rows it reads; tensors shared by the whole batch (a position
    table's row) are included too.
    """
    moved = sympy.expand(totals(decode_graph(G), conventions).forward.bytes)
    return sympy.expand(moved.subs(B, 0))


def decode_cost(G: nx.DiGraph, values: Mapping | None = None, conventions: Conventions = Conventions()):
    """FLOPs and bytes of one decode step as functions of B and C (other symbols from ``values``)."""
    fwd = totals(decode_graph(G), conventions).forward
    keep = {k: v for k, v in (values or {}).items() if k not in (B, C)}
    return fwd.map(lambda e: sympy.expand(e.subs(keep)))


def decode_intensity(G: nx.DiGraph, conventions: Conventions = Conventions()) -> sympy.Expr:
    """FLOPs per byte of one whole decode step, as an expression of B, C and the model's sizes."""
    f = totals(decode_graph(G), conventions).forward
    return sympy.cancel(f.flops / f.bytes)


def critical_batch(G: nx.DiGraph, ridge: sympy.Expr, conventions: Conventions = Conventions()) -> sympy.Expr:
    """The batch B* where a decode step's intensity equals ``ridge`` (symbolic or a number).

    FLOPs = f·B and bytes = q0 + q1·B (weights once, per-sequence KV cache and
    activations B times), so B* = ridge·q0 / (f − ridge·q1). Where f ≤ ridge·q1
    (each sequence's own intensity is below the ridge, as with a long context)
    decoding never becomes compute-bound: the result is then not positive.
    """
    fwd = totals(decode_graph(G), conventions).forward
    flops, moved = sympy.expand(fwd.flops), sympy.expand(fwd.bytes)
    f, q1 = flops.coeff(B, 1), moved.coeff(B, 1)
    q0 = sympy.expand(moved - q1 * B)
    if sympy.expand(flops - f * B) != 0 or q0.has(B):
        raise CostModelError("critical_batch: decode FLOPs and bytes are not affine in B; cannot solve")
    return ridge * q0 / (f - ridge * q1)


def decode_step(G: nx.DiGraph, values: Mapping, dev: Device, *, dtype: str | None = None,
                conventions: Conventions = Conventions()) -> tuple[list[Bound], Bound]:
    """Per-op roofline and total of one decode step (``values`` gives B and C)."""
    rows = roofline(decode_graph(G), values, dev, dtype=dtype, conventions=conventions)
    return rows, total(rows)


def prefill(G: nx.DiGraph, values: Mapping, dev: Device, *, dtype: str | None = None,
            conventions: Conventions = Conventions()) -> tuple[list[Bound], Bound]:
    """Per-op roofline and total of a prefill over B prompts of T tokens: time to first token."""
    rows = roofline(prefill_graph(G), values, dev, dtype=dtype, conventions=conventions)
    return rows, total(rows)


def _ratio(expr: sympy.Expr) -> str:
    """``a/(b - c*C)`` printed with a positive numerator."""
    num, den = sympy.fraction(sympy.cancel(expr))
    if num.is_number and num < 0:
        num, den = -num, sympy.expand(-den)
    return f"{num}/({den})"


def summary(G: nx.DiGraph, values: Mapping, dev: Device, *, dtype: str | None = None,
            batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
            conventions: Conventions = Conventions()) -> dict[str, object]:
    """Decode numbers at ``values`` (B, C and the model's sizes): step time, tokens/s,
    weights and KV bytes, the critical batch, and throughput versus batch."""
    dtype = dtype or G.graph.get("dtype", "bf16")
    _, step = decode_step(G, values, dev, dtype=dtype, conventions=conventions)
    b = int(values[B])
    ridge = dev.ridge(dtype)
    b_star_c = sympy.cancel(critical_batch(G, ridge, conventions).subs(
        {k: v for k, v in values.items() if k not in (B, C)}))  # B*(C)
    b_star = evaluate(b_star_c, {C: values[C]}, "critical batch")
    x = sympy.Symbol("x", real=True)  # C is declared an integer; the boundary need not be one
    c_max = sympy.solve(sympy.denom(b_star_c).subs(C, x), x)  # beyond this context B* does not exist
    curve = []
    for n in batches:
        _, s = decode_step(G, {**values, B: n}, dev, dtype=dtype, conventions=conventions)
        curve.append({"batch": n, "step_s": float(s.time_s), "tokens_per_s": float(n / s.time_s),
                      "bound": s.bound})
    no_b = {k: v for k, v in values.items() if k != B}
    per_step = decode_cost(G, values, conventions)
    return {
        "flops_expr": str(per_step.flops), "bytes_expr": str(per_step.bytes),
        "step_s": float(step.time_s), "tokens_per_s": float(b / step.time_s),
        "latency_per_token_s": float(step.time_s), "bound": step.bound,
        "flops": as_int(step.flops, "decode flops"), "bytes": as_int(step.bytes, "decode bytes"),
        "weights_bytes": as_int(evaluate(weight_bytes(G, conventions), no_b, "weight bytes"), "weight bytes"),
        "kv_cache_bytes": as_int(evaluate(kv_cache_bytes(G), values, "KV cache bytes"), "KV cache bytes"),
        "critical_batch": float(b_star) if b_star > 0 else None,
        "critical_batch_expr": _ratio(b_star_c),
        "max_context_compute_bound": float(c_max[0]) if len(c_max) == 1 and c_max[0] > 0 else None,
        "ridge": float(ridge), "throughput": curve,
    }
