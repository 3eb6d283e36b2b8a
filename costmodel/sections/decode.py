"""The serving step on a device, from the decode and prefill graphs (:mod:`costmodel.graph.decode`).

A decode step reads every weight once and every sequence's KV cache once:
``bytes ≈ weights + B·kv(C)``, ``FLOPs ≈ B·(2·params + attention(C))``. A state-space model reads and
writes its recurrent state instead, whose size does not depend on C. Both are
affine in B, so the batch where the step's intensity reaches the ridge point
solves a linear equation: :func:`critical_batch`.

A mixture of experts reads only the experts its B tokens touch, E·(1 − (1 − k/E)^B) per layer
(:func:`~costmodel.graph.composite.experts_touched`; ``expected_experts``, what :func:`summary` reports): its bytes
are not affine in B. Its critical batch is then solved numerically (:func:`_routed_critical_batch`), and
:func:`critical_batch`'s closed form, where every expert is read, is the large-batch limit: an upper bound (fewer
experts read means fewer bytes, a higher intensity).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from ..devices.table import Device
from ..errors import CostModelError
from ..graph.analysis import as_int, evaluate, op_nodes, totals
from ..graph.composite import experts_touched
from ..graph.decode import decode_graph, prefill_graph
from ..graph.registry import weight_use
from ..memory.inference import kv_cache, state_cache
from ..options import Counting
from ..symbols import B, C
from ..timing.roofline import Bound, roofline, total


def kv_cache_bytes(G: nx.DiGraph) -> sympy.Expr:
    """Bytes of KV cache for B sequences of C tokens: :func:`costmodel.memory.inference.kv_cache` at context C."""
    return kv_cache(G, C)


def state_cache_bytes(G: nx.DiGraph) -> sympy.Expr:
    """Bytes of recurrent state for B sequences, whatever C: :func:`costmodel.memory.inference.state_cache`."""
    return state_cache(G)


def weight_bytes(G: nx.DiGraph, counting: Counting = Counting(), *, expected_experts: bool = False) -> sympy.Expr:
    """Bytes a decode step reads that are not B times a sequence's own: the weights.

    Derived from the op rules, not from op kinds, so any weight-carrying op
    counts (matmuls, routed expert matmuls, norm gains, biases) and a gather
    counts only the rows it reads; tensors shared by the whole batch (a position
    table's row) are included too. Bytes affine in B give their B⁰ term; with ``expected_experts`` the experts
    touched grow with B, and the result is the step's bytes less their B¹ term (an expression of B).
    """
    moved = sympy.expand(totals(decode_graph(G, expected_experts=expected_experts), counting).forward.bytes)
    return sympy.expand(moved - B * moved.coeff(B, 1))


def decode_cost(
    G: nx.DiGraph, values: Mapping | None = None, counting: Counting = Counting(), *, expected_experts: bool = False
):
    """FLOPs and bytes of one decode step as functions of B and C (other symbols from ``values``)."""
    fwd = totals(decode_graph(G, expected_experts=expected_experts), counting).forward
    keep = {k: v for k, v in (values or {}).items() if k not in (B, C)}
    return fwd.map(lambda e: sympy.expand(e.subs(keep)))


def decode_intensity(G: nx.DiGraph, counting: Counting = Counting()) -> sympy.Expr:
    """FLOPs per byte of one whole decode step, as an expression of B, C and the model's sizes."""
    f = totals(decode_graph(G), counting).forward
    return sympy.cancel(f.flops / f.bytes)


def critical_batch(G: nx.DiGraph, ridge: sympy.Expr, counting: Counting = Counting()) -> sympy.Expr:
    """The batch B* where a decode step's intensity equals ``ridge`` (symbolic or a number).

    FLOPs = f·B and bytes = q0 + q1·B (weights once, per-sequence KV cache and
    activations B times), so B* = ridge·q0 / (f − ridge·q1). Where f ≤ ridge·q1
    (each sequence's own intensity is below the ridge, as with a long context)
    decoding never becomes compute-bound: the result is then not positive.
    """
    fwd = totals(decode_graph(G), counting).forward
    flops, moved = sympy.expand(fwd.flops), sympy.expand(fwd.bytes)
    f, q1 = flops.coeff(B, 1), moved.coeff(B, 1)
    q0 = sympy.expand(moved - q1 * B)
    if sympy.expand(flops - f * B) != 0 or q0.has(B):
        raise CostModelError("critical_batch: decode FLOPs and bytes are not affine in B; cannot solve")
    return ridge * q0 / (f - ridge * q1)


def decode_step(
    G: nx.DiGraph,
    values: Mapping,
    dev: Device,
    *,
    dtype: str | None = None,
    counting: Counting = Counting(),
    expected_experts: bool = False,
) -> tuple[list[Bound], Bound]:
    """Per-op roofline and total of one decode step (``values`` gives B and C)."""
    rows = roofline(decode_graph(G, expected_experts=expected_experts), values, dev, dtype=dtype, counting=counting)
    return rows, total(rows)


def _routed_critical_batch(G: nx.DiGraph, values: Mapping, ridge: float, upper: float, counting: Counting) -> float:
    """The batch where a routed model's decode intensity FLOPs(B)/bytes(B) reaches ``ridge``, the experts read
    growing with B (``expected_experts``): bisection on B in (0, ``upper``], ``upper`` the every-expert closed
    form (:func:`critical_batch`), which bounds it from above. FLOPs are f·B; bytes are concave in B, so the
    intensity rises with B and crosses the ridge once."""
    cost = decode_cost(G, {k: v for k, v in values.items() if k != B}, counting, expected_experts=True)
    flops, moved = (sympy.lambdify(B, e.xreplace({C: values[C]}), "math") for e in (cost.flops, cost.bytes))
    lo, hi = 0.0, float(upper)
    for _ in range(100):  # 2^-100 of the bound: far below one sequence
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if flops(mid) >= ridge * moved(mid) else (mid, hi)
    return hi


def prefill(
    G: nx.DiGraph, values: Mapping, dev: Device, *, dtype: str | None = None, counting: Counting = Counting()
) -> tuple[list[Bound], Bound]:
    """Per-op roofline and total of a prefill over B prompts of T tokens: time to first token."""
    rows = roofline(prefill_graph(G), values, dev, dtype=dtype, counting=counting)
    return rows, total(rows)


def _touched(G: nx.DiGraph, values: Mapping) -> dict[str, object]:
    """The experts a decode step of B tokens is expected to touch per routed layer (the first routed op's E and
    k), for a summary: ``experts_touched``, ``experts``, ``top_k``."""
    op = next(d["op"] for _, d in op_nodes(G) if weight_use(d["op"]) == "routed")
    e, k = (int(evaluate(op.size[str(op.attr(a))], values, a)) for a in ("experts", "route"))
    return {"experts_touched": float(experts_touched(e, k, int(values[B]))), "experts": e, "top_k": k}


def _roots(expr: sympy.Expr, x: sympy.Symbol) -> list[sympy.Expr]:
    """Real roots of ``expr`` in ``x``; a sliding window's ``Min(x, W)`` is solved on its rising branch
    (``x``) and a root kept only where that branch holds."""
    branch = expr.replace(lambda e: isinstance(e, sympy.Min) and e.has(x), lambda e: x)
    return [r for r in sympy.solve(branch, x) if sympy.simplify(expr.subs(x, r)) == 0]


def _ratio(expr: sympy.Expr) -> str:
    """``a/(b - c*C)`` printed with a positive numerator."""
    num, den = sympy.fraction(sympy.cancel(expr))
    if num.is_number and num < 0:
        num, den = -num, sympy.expand(-den)
    return f"{num}/({den})"


def summary(
    G: nx.DiGraph,
    values: Mapping,
    dev: Device,
    *,
    dtype: str | None = None,
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    counting: Counting = Counting(),
) -> dict[str, object]:
    """Decode numbers at ``values`` (B, C and the model's sizes): step time, tokens/s,
    weights and KV bytes, the critical batch, and throughput versus batch."""
    dtype = dtype or G.graph.get("dtype", "bf16")
    routed = any(weight_use(d["op"]) == "routed" for _, d in op_nodes(G))
    _, step = decode_step(G, values, dev, dtype=dtype, counting=counting, expected_experts=routed)
    b = int(values[B])
    ridge = dev.ridge(dtype)
    b_star_c = sympy.cancel(
        critical_batch(G, ridge, counting).subs({k: v for k, v in values.items() if k not in (B, C)})
    )  # B*(C), every expert read: for a mixture of experts the large-batch limit, an upper bound
    b_star = evaluate(b_star_c, {C: values[C]}, "critical batch")
    if routed and b_star > 0:
        b_star = _routed_critical_batch(G, values, float(ridge), float(b_star), counting)
    x = sympy.Symbol("x", real=True)  # C is declared an integer; the boundary need not be one
    c_max = _roots(sympy.denom(b_star_c).subs(C, x), x)  # beyond this context B* does not exist
    curve = []
    for n in batches:
        _, s = decode_step(G, {**values, B: n}, dev, dtype=dtype, counting=counting, expected_experts=routed)
        curve.append({"batch": n, "step_s": float(s.time_s), "tokens_per_s": float(n / s.time_s), "bound": s.bound})
    at_b = values if routed else {k: v for k, v in values.items() if k != B}  # the experts read depend on B
    per_step = decode_cost(G, values, counting, expected_experts=routed)
    return {
        "flops_expr": str(per_step.flops),
        "bytes_expr": str(per_step.bytes),
        "step_s": float(step.time_s),
        "tokens_per_s": float(b / step.time_s),
        "latency_per_token_s": float(step.time_s),
        "bound": step.bound,
        "flops": as_int(step.flops, "decode flops"),
        "bytes": as_int(step.bytes, "decode bytes"),
        "weights_bytes": as_int(
            evaluate(weight_bytes(G, counting, expected_experts=routed), at_b, "weight bytes"), "weight bytes"
        ),
        "kv_cache_bytes": as_int(evaluate(kv_cache_bytes(G), values, "KV cache bytes"), "KV cache bytes"),
        **(
            {
                "state_cache_bytes": as_int(
                    evaluate(state_cache_bytes(G), values, "state cache bytes"), "state cache bytes"
                )
            }
            if state_cache(G) != 0
            else {}
        ),
        **(_touched(G, values) if routed else {}),
        "critical_batch": float(b_star) if b_star > 0 else None,
        "critical_batch_expr": _ratio(b_star_c),
        "max_context_compute_bound": float(c_max[0]) if len(c_max) == 1 and c_max[0] > 0 else None,
        "ridge": float(ridge),
        "throughput": curve,
    }
