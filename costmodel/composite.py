"""Rules of composite ops: fused attention and routed (mixture-of-experts) matmuls.

Registered in the one registry of :mod:`costmodel.ops`, with the same shared
derivations (:func:`~costmodel.ops.contraction`); ``costmodel.ops`` imports this
module so the rules exist whenever the registry does.
"""

from __future__ import annotations

from .cost import Cost, OpCost, Saved, Zero, dtype_bytes
from .errors import CostModelError
from .ops import ELEMENTWISE, Conventions, Op, causal_scale, contraction, elements_of, rule
from .pattern import parse


@rule("attention")
def _attention(op: Op, conventions: Conventions) -> OpCost:
    """Fused attention (FlashAttention): ``"q, k, v -> out"`` without materialising scores.

    Split scores (MLA's ``q_nope·k_nope + q_rope·k_rope``) give more q, k pairs:
    ``"q1, k1, q2, k2, v -> out"``; the scores are the sum of the pairs' contractions.

    Attributes: ``scores`` (axes of the score tensor, e.g. ``"b h t s"``),
    ``causal``, ``repeats`` (indices of operands that are an earlier operand's
    tensor, read once: MLA decode's latent as both k and v), ``epilogue`` (element-wise fns applied to the scores before the
    softmax, e.g. ``("scale", "mask")``). The FLOPs are those of the unfused ops;
    the bytes are only q, k, v, the output and the per-row log-sum-exp. Backward
    recomputes the scores (``recompute_flops``), as FlashAttention does.
    """
    p = op.parsed
    if len(p.inputs) < 3 or len(p.inputs) % 2 == 0:
        raise CostModelError(f"attention pattern {p.text!r}: expected 'q, k, v -> out' (or 'q1, k1, q2, k2, v -> out')")
    *qk_operands, v = p.inputs
    pairs = list(zip(qk_operands[::2], qk_operands[1::2]))
    q = pairs[0][0]
    out = p.output
    scores = parse(str(op.attr("scores", ""))).output if op.attr("scores") else None
    if scores is None or any(a not in op.size for a in scores):
        raise CostModelError(f"attention pattern {p.text!r}: attribute scores must name the score axes")
    scale = causal_scale(op, conventions)
    qk = sum((contraction(op, pair, scores, scale=scale) for pair in pairs), Cost())
    pv = contraction(op, (scores, v), out, scale=scale)
    # the softmax and epilogue run over every score, as the unfused ops count them: ``causal`` halves
    # only the contractions, so the flash_attention pass preserves FLOPs under either convention
    n_scores = elements_of(op, scores)
    epilogue = op.attr("epilogue", ()) if conventions.elementwise == "all" else ()
    per_score_fwd = conventions.softmax_flops[0] + sum(ELEMENTWISE[fn].forward for fn in epilogue)
    per_score_bwd = conventions.softmax_flops[1] + sum(ELEMENTWISE[fn].backward for fn in epilogue)
    size = dtype_bytes(op.dtype)
    rows = elements_of(op, tuple(a for a in scores if a in q))  # one log-sum-exp per query row
    again = op.attr("repeats", ())  # operands that are an earlier operand's tensor (MLA's absorbed latent): read once
    io_read = sum((elements_of(op, axes) for i, axes in enumerate(p.inputs) if i not in again), Zero) * size
    forward = Cost(flops=qk.flops + pv.flops + per_score_fwd * n_scores, matmul_flops=qk.flops + pv.flops,
                   bytes_read=io_read, bytes_written=elements_of(op, out) * size + rows * 4)
    grads = 2 * (qk.flops + pv.flops)  # dq, dk from the scores; dv, dscores from the context
    backward = Cost(flops=grads + per_score_bwd * n_scores, matmul_flops=grads,
                    bytes_read=io_read + 2 * elements_of(op, out) * size + rows * 4,
                    bytes_written=io_read, recompute_flops=qk.flops + per_score_fwd * n_scores)
    names = [n for i in range(len(pairs)) for n in (f"q{i}", f"k{i}")] + ["v"]
    saved = (*(Saved(name, f"input{i}", elements_of(op, axes), op.dtype) for i, (name, axes) in enumerate(zip(names, p.inputs))),
             Saved("out", "output", elements_of(op, out), op.dtype), Saved("lse", "own", rows, "fp32", role="stats"))
    return OpCost(forward, backward, Zero, saved)


@rule("routed_matmul", weight_operand=1)
def _routed_matmul(op: Op, conventions: Conventions) -> OpCost:
    """Input × one of ``experts`` weight sets chosen per token (mixture of experts).

    Pattern ``"b t d, e d f -> b t r f"`` with attributes ``experts="e"`` (the
    weight axis that is *selected*, not contracted: each of the ``r`` copies of a
    token uses one weight set) and ``route="r"`` (the copies: ``top_k``). The
    route axis is new in the output (each token is sent to ``r`` experts) or is
    summed away with the contraction (``"b t r f, e f d -> b t d"`` adds the ``r``
    expert outputs back into one token).

    FLOPs are those of the routed tokens: 2 × the product of the distinct axes
    *without* ``experts``; backward is the input and the weight gradient, each as
    much (no weight gradient when ``trainable=False``, as for a matmul). Parameters
    are all ``e`` weight sets; ``active`` ones are the ``r`` a token uses (``params · r / e``).
    """
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"routed_matmul pattern {p.text!r}: expected 'input, weight -> output'")
    x, w = p.inputs
    y = p.output
    e, r = str(op.attr("experts", "")), str(op.attr("route", ""))
    if e not in w or e in x or e in y:
        raise CostModelError(f"routed_matmul pattern {p.text!r}: experts={e!r} must be an axis of the weight only")
    if not r or r in w or (r in x) == (r in y):
        raise CostModelError(f"routed_matmul pattern {p.text!r}: route={r!r} must be an axis of exactly one of "
                             "the input and the output (not of the weight)")
    stray = [a for a in y if a not in x and a not in w and a != r]
    if stray:
        raise CostModelError(f"routed_matmul pattern {p.text!r}: output axes {stray} appear in no input")
    per_token_w = tuple(a for a in w if a != e)  # the weight one routed copy of a token meets
    # bytes: every expert's weights are read (and their gradients written) once, which is
    # what happens when B·T·r ≥ e tokens hit every expert; contraction() counts one set
    extra = (elements_of(op, w) - elements_of(op, per_token_w)) * dtype_bytes(op.dtype)
    forward = contraction(op, (x, per_token_w), y) + Cost(bytes_read=extra)
    backward = contraction(op, (y, per_token_w), x) + Cost(bytes_read=extra)  # input gradient
    trainable = op.attr("trainable", True) is not False
    if trainable:  # weight gradient, written for every expert
        backward += contraction(op, (x, y), per_token_w) + Cost(bytes_written=extra)
    params = elements_of(op, w)
    active = params * op.size[r] / op.size[e]
    # as for a matmul: the input is kept only for the weight gradient (none for a frozen weight)
    saved = (Saved("input", "input0", elements_of(op, x), op.dtype),) if trainable else ()
    return OpCost(forward, backward, params, saved, active)
