"""The serving step as formulas: TPOT(B, C), TTFT(P) and the batch at which decode turns compute-bound.

Two readings, both derived, never typed:

* **at the config** — the step model (:mod:`costmodel.serving.step`) with its batch sums written out for a steady
  decode of B sequences whose caches hold C tokens (N = R = B, K = S = B·(C + 1), a captured CUDA graph where the engine captures one, B up to its largest) and for
  one prompt of P ≤ ``max_num_batched_tokens`` tokens prefilled in one step (N = P, R = 1, K = P(P + 1)/2, S = P,
  eager): expressions in B, C or P with the device's and the model's numbers in them;
* **symbolic** — the decode step's roofline in the model's own symbols, ``max(F(B, C)/P_peak, Q(B, C)/W)`` with
  F and Q the decode graph's FLOPs and bytes (:func:`costmodel.sections.decode.decode_cost`), and the critical
  batch ``B*(C) = ridge·q₀/(f − ridge·q₁)`` (:func:`costmodel.sections.decode.critical_batch`), the ridge
  ``P_peak/W`` a symbol.
"""

from __future__ import annotations

import networkx as nx
import sympy

from ..graph.composite import experts_touched
from ..options import Counting
from ..sections.decode import critical_batch, decode_cost
from ..symbols import B, C
from .step import TOUCHED, N, R, StepModel

P = sympy.Symbol("P", positive=True, integer=True)
PEAK = sympy.Symbol("P_peak", positive=True)
BANDWIDTH = sympy.Symbol("W", positive=True)


def decode_time(step: StepModel) -> sympy.Expr:
    """TPOT(B, C) at the config: a decode step of B sequences with C cached tokens each."""
    at = {N: B, R: B, step.eager: 0 if step.graph_sizes else 1}  # a captured graph where the engine captures
    for k, s, w in zip(step.pair_symbols, step.read_symbols, step.windows):
        ctx = C + 1 if w is None else sympy.Min(C + 1, w)
        at[k], at[s] = B * ctx, B * ctx
    return step.expression.xreplace({**at, **_touched(step, B)})


def prefill_time(step: StepModel) -> sympy.Expr:
    """TTFT(P) at the config, less queueing: one prompt of P tokens prefilled in one step (P ≤ the chunk)."""
    at = {N: P, R: 1, step.eager: 1}
    for k, s, w in zip(step.pair_symbols, step.read_symbols, step.windows):
        at[k] = P * (P + 1) / 2 if w is None else sympy.Min(P * (P + 1) / 2, w * P)
        at[s] = P if w is None else sympy.Min(P, w)
    return step.expression.xreplace({**at, **_touched(step, P)})


def _touched(step: StepModel, tokens: sympy.Expr) -> dict:
    """Experts a step of ``tokens`` tokens touches per layer, E·(1 − (1 − k/E)^tokens), where the model routes."""
    if step.routing is None:
        return {TOUCHED: 0}
    e, k = step.routing
    return {TOUCHED: experts_touched(sympy.Integer(e), sympy.Integer(k), tokens)}


def symbolic(G: nx.DiGraph, counting: Counting = Counting()) -> dict[str, sympy.Expr]:
    """The decode step's roofline and the critical batch in the model's symbols (see the module notes)."""
    cost = decode_cost(G, None, counting)
    return {
        "decode_flops": cost.flops,
        "decode_bytes": cost.bytes,
        "tpot_roofline_s": sympy.Max(cost.flops / PEAK, cost.bytes / BANDWIDTH),
        "critical_batch": sympy.simplify(critical_batch(G, PEAK / BANDWIDTH, counting)),
    }


def formulas(G: nx.DiGraph, step: StepModel, counting: Counting = Counting()) -> dict[str, dict[str, str]]:
    """Every serving formula as its text and its LaTeX, for a result (``serving.formulas``)."""
    exprs = {"tpot_s": decode_time(step), "ttft_s": prefill_time(step), **symbolic(G, counting)}
    return {name: {"expr": str(e), "latex": sympy.latex(e)} for name, e in exprs.items()}
