"""Rules of composite ops: fused attention, routed (mixture-of-experts) matmuls, fused element-wise chains.

Registered in the one registry (:mod:`costmodel.graph.registry`) with the same shared derivations as the
core rules (:func:`~costmodel.graph.rules.contraction`); the registry imports this module, so the rules
exist whenever it does.
"""

from __future__ import annotations

import sympy

from ..errors import CostModelError
from ..options import Counting
from .cost import Cost, OpCost, Param, Saved, Zero, dtype_bytes
from .pattern import elements, parse
from .registry import Op, data_operands, op_cost, rule, state_bytes, weight_operand
from .rules import causal_scale, contraction, elements_of, matrix, sink_axes, trainable, vector


def _attention_cache_operands(op: Op) -> dict[int, int | None]:
    """Keys (odd operands before v) are contracted with their query; v meets the probabilities (additive
    biases of the scores, after v, read no cache)."""
    n = len(op.parsed.inputs) - int(op.attr("biases", 0))
    return {**{j: j - 1 for j in range(1, n - 1, 2)}, n - 1: None}


@rule("attention", counts_softmax=True, cache_operands=_attention_cache_operands, dedupes_inputs=True)
def _attention(op: Op, counting: Counting) -> OpCost:
    """Fused attention (FlashAttention): ``"q, k, v -> out"`` without materialising scores.

    Split scores (MLA's ``q_nope·k_nope + q_rope·k_rope``) give more q, k pairs:
    ``"q1, k1, q2, k2, v -> out"``; the scores are the sum of the pairs' contractions.

    Attributes: ``scores`` (axes of the score tensor, e.g. ``"b h t s"``),
    ``causal``, ``repeats`` (indices of operands that are an earlier operand's
    tensor, read once: MLA decode's latent as both k and v), ``epilogue`` (the element-wise ops applied to the
    scores before the softmax and to the probabilities after it, as ops: a scale, a soft-cap, a mask, a
    dropout, a bias's add; their FLOPs are their rules'), ``sink`` (the axes of learned sink logits that join
    each row of the softmax, kept from the softmax it fused: their parameters, and softmax FLOPs over one more
    column per row), ``biases`` (how many operands after v are additive biases of the scores,
    ``"q, k, v, bias -> out"``: T5's relative positions; each is read once, its gradient written once, and its
    ``add`` is in the epilogue). The FLOPs are those of the unfused ops;
    the bytes are only q, k, v, the biases, the output and the per-row log-sum-exp. Backward
    recomputes the scores (``recompute_flops``), as FlashAttention does.
    """
    p = op.parsed
    n_bias = int(op.attr("biases", 0))
    n_qkv = len(p.inputs) - n_bias
    if n_qkv < 3 or n_qkv % 2 == 0:
        raise CostModelError(
            f"attention pattern {p.text!r}: expected 'q, k, v -> out' (or 'q1, k1, q2, k2, v -> "
            f"out'), then {n_bias} bias operand(s)"
        )
    *qk_operands, v = p.inputs[:n_qkv]
    pairs = list(zip(qk_operands[::2], qk_operands[1::2]))
    q = pairs[0][0]
    out = p.output
    scores = parse(str(op.attr("scores", ""))).output if op.attr("scores") else None
    if scores is None or any(a not in op.size for a in scores):
        raise CostModelError(f"attention pattern {p.text!r}: attribute scores must name the score axes")
    scale = causal_scale(op, counting)
    qk = sum((contraction(op, pair, scores, scale=scale) for pair in pairs), Cost())
    pv = contraction(op, (scores, v), out, scale=scale)
    # the softmax and epilogue run over every score, as the unfused ops count them: ``causal`` halves
    # only the contractions, so the flash_attention pass preserves FLOPs under either convention
    n_scores = elements_of(op, scores)
    steps = op.attr("epilogue", ())
    if not all(isinstance(part, Op) for part in steps):
        raise CostModelError(
            f"attention pattern {p.text!r}: attribute epilogue must be the element-wise ops "
            f"between the scores and the context (Op records), received {steps!r}"
        )
    epilogue = [op_cost(part, counting) for part in steps]
    epilogue_fwd = sum((c.forward.flops for c in epilogue), Zero)
    epilogue_bwd = sum((c.backward.flops for c in epilogue), Zero)
    size = dtype_bytes(op.dtype)
    rows = elements_of(op, tuple(a for a in scores if a in q))  # one log-sum-exp per query row
    again = op.attr("repeats", ())  # operands that are an earlier operand's tensor (MLA's absorbed latent): read once
    io_read = sum((elements_of(op, axes) for i, axes in enumerate(p.inputs) if i not in again), Zero) * size
    softmax_fwd, softmax_bwd = (n * n_scores for n in counting.softmax_flops)
    sinks = sink_axes(op)
    weights = (vector(op, sinks, "sink"),) if sinks else ()
    # a sink adds one column to each row of the softmax (not to the epilogue, which sees only the scores)
    sink_fwd, sink_bwd = (counting.softmax_flops[0] * rows, counting.softmax_flops[1] * rows) if sinks else (0, 0)
    sink_read = sum((w.elements for w in weights), Zero) * size
    forward = Cost(
        flops=qk.flops + pv.flops + softmax_fwd + epilogue_fwd + sink_fwd,
        matmul_flops=qk.flops + pv.flops,
        bytes_read=io_read + sink_read,
        bytes_written=elements_of(op, out) * size + rows * 4,
    )
    grads = 2 * (qk.flops + pv.flops)  # dq, dk from the scores; dv, dscores from the context
    backward = Cost(
        flops=grads + softmax_bwd + epilogue_bwd + sink_bwd,
        matmul_flops=grads,
        bytes_read=io_read + 2 * elements_of(op, out) * size + rows * 4,
        bytes_written=io_read,
        recompute_flops=qk.flops + softmax_fwd + epilogue_fwd + sink_fwd,
    )
    names = [n for i in range(len(pairs)) for n in (f"q{i}", f"k{i}")] + ["v"] + [f"bias{i}" for i in range(n_bias)]
    saved = (
        *(
            Saved(name, f"input{i}", elements_of(op, axes), op.dtype)
            for i, (name, axes) in enumerate(zip(names, p.inputs))
        ),
        Saved("out", "output", elements_of(op, out), op.dtype),
        Saved("lse", "own", rows, "fp32", role="stats"),
    )
    return OpCost(forward, backward, weights, saved)


def experts_touched(experts, top_k, tokens):
    """The expected number of distinct experts that ``tokens`` tokens touch, each routed to ``top_k`` of ``experts``
    uniformly and independently: ``E·(1 − (1 − k/E)^N)``.

    One token misses a given expert with probability ``C(E−1, k)/C(E, k) = 1 − k/E`` (its k picks are distinct), N
    independent tokens with ``(1 − k/E)^N``; by linearity of expectation over the E experts, ``E·(1 − (1 − k/E)^N)``
    are touched. It is k for one token and tends to E as N grows. Exact (a sympy expression) where any argument is
    one, a float otherwise (the serving step evaluates it once a step). The one derivation of this number: the
    decode step's roofline (:func:`_routed_matmul` with ``expected_experts``) and the serving step
    (:mod:`costmodel.serving.step`) both call it.

    >>> experts_touched(128, 8, 1), experts_touched(sympy.Integer(128), 8, 3)  # 128·(1 − (15/16)³) = 128·721/4096
    (8.0, 721/32)
    """
    if any(isinstance(x, sympy.Basic) for x in (experts, top_k, tokens)):
        e, k = sympy.sympify(experts), sympy.sympify(top_k)
        return e * (1 - (1 - k / e) ** tokens)
    return experts * (1 - (1 - top_k / experts) ** tokens)


def routed_tokens(op: Op) -> object:
    """Tokens one run of a routed matmul routes: the product of the axes its input shares with its output, less
    the route axis (``B·T`` of ``"b t d, e d f -> b t r f"``; ``B`` in a decode step)."""
    x, y = op.parsed.inputs[0], op.parsed.output
    return elements(tuple(a for a in x if a in y and a != str(op.attr("route", ""))), op.size)


@rule("routed_matmul", weight_operand=1, weight_use="routed")
def _routed_matmul(op: Op, counting: Counting) -> OpCost:
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

    Attribute ``bias`` (axes: ``experts`` and output axes, e.g. ``"e i"``): each expert has its own bias
    (gpt-oss), added to each routed copy's output before the ``r`` copies are summed: one FLOP per
    routed output element (``B·T·r·f``) forward, as many for its gradient; its parameters are stacked
    per expert like the weight, and ``r`` of the ``e`` are active.

    Attribute ``expected_experts`` (a decode step's roofline, :func:`~costmodel.graph.decode.decode_graph`): the
    forward reads the weights of the experts its tokens are expected to touch, :func:`experts_touched` of
    :func:`routed_tokens`, not all ``e`` (a step of B = 1 token reads k of them); those bytes are rounded up to a
    whole byte. Without it every expert's weights are read, as a training step's or a prefill's B·T·r ≥ e
    tokens do.
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
        raise CostModelError(
            f"routed_matmul pattern {p.text!r}: route={r!r} must be an axis of exactly one of "
            "the input and the output (not of the weight)"
        )
    stray = [a for a in y if a not in x and a not in w and a != r]
    if stray:
        raise CostModelError(f"routed_matmul pattern {p.text!r}: output axes {stray} appear in no input")
    per_token_w = tuple(a for a in w if a != e)  # the weight one routed copy of a token meets
    # bytes: every expert's weights are read (and their gradients written) once, which is
    # what happens when B·T·r ≥ e tokens hit every expert; contraction() counts one set
    extra = (elements_of(op, w) - elements_of(op, per_token_w)) * dtype_bytes(op.dtype)
    touched = experts_touched(op.size[e], op.size[r], routed_tokens(op)) if op.attr("expected_experts") else None
    one_set = elements_of(op, per_token_w) * dtype_bytes(op.dtype)
    read = extra if touched is None else sympy.ceiling(touched * one_set) - one_set  # contraction() reads one set
    forward = contraction(op, (x, per_token_w), y) + Cost(bytes_read=read)
    backward = contraction(op, (y, per_token_w), x) + Cost(bytes_read=extra)  # input gradient
    if trainable(op):  # weight gradient, written for every expert
        backward += contraction(op, (x, y), per_token_w) + Cost(bytes_written=extra)
    weights = [matrix(op, w, y, stacked=(e,))]  # one matrix per expert
    if op.attr("bias"):
        b_axes = parse(str(op.attr("bias"))).output
        if e not in b_axes or any(a != e and a not in y for a in b_axes):
            raise CostModelError(
                f"routed_matmul pattern {p.text!r}: bias {op.attr('bias')!r} must have the experts "
                f"axis {e!r} and output axes only (e.g. '{e} {y[-1]}')"
            )
        routed_out = elements_of(op, tuple(dict.fromkeys((*y, r))))  # one add per routed copy, before the r-sum
        bias = Param("bias", tuple((a, op.size[a]) for a in b_axes), stack=op.size[e])
        size = dtype_bytes(op.dtype)
        bias_read = bias.elements * size
        forward += Cost(
            flops=routed_out,
            bytes_read=bias_read if touched is None else sympy.ceiling(touched / op.size[e] * bias_read),
        )
        if trainable(op):
            backward += Cost(flops=routed_out, bytes_written=bias.elements * size)
        weights.append(bias)
    active = sum((wt.elements for wt in weights), Zero) * op.size[r] / op.size[e]
    # as for a matmul: the input is kept only for the weight gradient (none for a frozen weight)
    saved = (Saved("input", "input0", elements_of(op, x), op.dtype),) if trainable(op) else ()
    return OpCost(forward, backward, tuple(weights), saved, active)


# ---------------------------------------------------------------------------
# Fused element-wise chains (made by costmodel.graph.passes.fuse_elementwise)


def _fused_weight(op: Op) -> int | None:
    """A fused op's operands start with its first part's (weight included): that part's weight operand."""
    parts = op.attr("parts")
    return weight_operand(parts[0]) if parts else None


def _fused_state(op: Op):
    """A fused op keeps the recurrent states its parts keep (a convolution or a scan and what folds into it)."""
    return sum((state_bytes(p) for p in op.attr("parts") or ()), Zero)


@rule("fused", weight_operand=_fused_weight, state_bytes=_fused_state)
def _fused(op: Op, counting: Counting) -> OpCost:
    """An op and the element-wise ops folded into it (see :func:`fuse_elementwise`).

    Forward: the parts' FLOPs; reads = the first part's reads plus each later
    part's other operands; writes = the last part's output (plus, when
    ``keep_saved``, intermediates a part saves for backward). Backward: the
    parts' backward costs, unfused.
    """
    parts, chains, names = op.attr("parts"), op.attr("chain"), op.attr("names")
    costs = [op_cost(p, counting) for p in parts]
    n_first = len(data_operands(parts[0]))  # later parts' other operands follow the first part's graph tensors
    fwd = Cost(
        flops=sum((c.forward.flops for c in costs), Zero),
        matmul_flops=sum((c.forward.matmul_flops for c in costs), Zero),
        bytes_read=costs[0].forward.bytes_read,
        bytes_written=costs[-1].forward.bytes_written,
        recompute_flops=sum((c.forward.recompute_flops for c in costs), Zero),
    )
    saved: dict[str, Saved] = {}
    extra_index = n_first
    for j, (part, cost) in enumerate(zip(parts, costs)):
        remap: dict[str, str] = {}
        if j > 0:
            chain = chains[j]
            chain_bytes = elements(part.parsed.inputs[chain], part.size) * dtype_bytes(part.dtype)
            fwd += Cost(bytes_read=cost.forward.bytes_read - chain_bytes)
            remap[f"input{chain}"] = f"{names[j - 1]}.out"
            for i in range(len(part.parsed.inputs)):
                if i != chain:
                    remap[f"input{i}"] = f"input{extra_index}"
                    extra_index += 1
        if j < len(parts) - 1:
            remap["output"] = f"{names[j]}.out"
        for s in cost.saved:
            source = remap.get(s.source, s.source)
            if source.endswith(".out"):  # an intermediate the fused op makes and keeps
                s = Saved(source, "own", s.elements, s.dtype, s.role)
            elif s.source == "own":
                s = Saved(f"{names[j]}.{s.name}", "own", s.elements, s.dtype, s.role)
            else:
                s = Saved(s.name, source, s.elements, s.dtype, s.role)
            saved.setdefault(s.name if s.source == "own" else f"{names[j]}.{s.name}", s)
    if op.attr("keep_saved"):
        fwd += Cost(bytes_written=sum((s.bytes for s in saved.values() if s.name.endswith(".out")), Zero))
    # a part that carries its state through a decode step writes it back, though its output stays on chip
    fwd += Cost(bytes_written=sum((state_bytes(p) for p in parts[:-1] if p.attr("decode")), Zero))
    bwd = sum((c.backward for c in costs), Cost())
    weights = tuple(w for c in costs for w in c.weights)
    active = None if all(c.active is None for c in costs) else sum((c.active_params for c in costs), Zero)
    return OpCost(fwd, bwd, weights, tuple(saved.values()), active)
