"""Rules of state-space model ops: the depthwise causal convolution (``conv``) and the selective scan (``scan``).

Mamba (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", Algorithm 2 and
section 3.3) mixes tokens with two ops that are neither matmuls nor element-wise functions:

* ``conv``: a depthwise causal convolution along the sequence, a ``W``-tap filter per channel;
* ``scan``: the selective scan, a linear recurrence along the sequence with a state of ``N`` numbers per
  channel, whose step size Δ and projections B, C depend on the token.

Neither keeps a KV cache: each carries a recurrent state of fixed size from one token to the next (the
Kind fact ``state_bytes``), the inference cache of a state-space model. Registered in the one registry
(:mod:`costmodel.graph.registry`), which imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..errors import CostModelError
from ..options import Counting
from .cost import Cost, OpCost, Param, Saved, Zero, dtype_bytes
from .pattern import Axes
from .registry import Op, rule
from .rules import Elementwise, contraction, elements_of, matrix, register_elementwise, trainable, vector

# Δ = softplus(dt + bias) = log(1 + exp(x)): exp, add, log; backward g·σ(x) = g·e/(1 + e): exp, add, divide,
# multiply (PyTorch's softplus_backward)
register_elementwise("softplus", Elementwise(3, 4, ("input0",)))


def _state(op: Op, state: tuple[str, ...], dtype: str) -> sympy.Expr:
    """Bytes of a recurrent state with these axes."""
    return elements_of(op, state) * dtype_bytes(dtype)


def _decode_io(op: Op, state: sympy.Expr) -> Cost:
    """One decode step reads the state and writes it back (attribute ``decode``, set by decode_graph)."""
    return Cost(bytes_read=state, bytes_written=state) if op.attr("decode") else Cost()


# ---------------------------------------------------------------------------
# The depthwise causal convolution


def _conv_axes(op: Op) -> tuple[Axes, Axes, Axes, str, str]:
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(
            f"conv pattern {p.text!r}: expected 'input, filter -> output' (e.g. 'b t u, w u -> b t u')"
        )
    (x, w), y = p.inputs, p.output
    window, along = str(op.attr("window", "")), str(op.attr("along", ""))
    if window not in w or window in x or window in y:
        raise CostModelError(f"conv pattern {p.text!r}: window={window!r} must be an axis of the filter only")
    if along not in x or along not in y or along in w:
        raise CostModelError(
            f"conv pattern {p.text!r}: along={along!r} must be an axis of the input and the "
            "output (the sequence the filter slides along), not of the filter"
        )
    stray = [a for a in y if a not in x and a not in w]
    if stray:
        raise CostModelError(f"conv pattern {p.text!r}: output axes {stray} appear in no input")
    return x, w, y, window, along


def _conv_state(op: Op) -> sympy.Expr:
    """The last ``W`` inputs of every sequence, in the op's dtype (transformers keeps ``conv_kernel`` of them;
    the next output needs W − 1)."""
    x, _, _, window, along = _conv_axes(op)
    return _state(op, tuple(window if a == along else a for a in x), op.dtype)


@rule("conv", weight_operand=1, state_bytes=_conv_state)
def _conv(op: Op, counting: Counting) -> OpCost:
    """Depthwise causal convolution: ``"b t u, w u -> b t u"`` with ``window="w"`` (the filter's taps, an
    axis of the filter only) and ``along="t"`` (the sequence axis it slides along)::

        y[b, t, u] = Σ_w x[b, t − W + 1 + w, u] · k[w, u]     (zeros before the first token)

    Read as a contraction, the pattern gives the FLOPs: each output is ``W`` multiply-adds, so
    ``2·B·T·U·W`` = 2 × the product of the distinct axes (:func:`contraction`), counted as matmul FLOPs (a
    convolution is what ``FlopCounterMode`` counts besides matmuls). Only the ``T`` causal outputs are
    counted, what a causal kernel (``causal_conv1d``) computes; PyTorch's ``conv1d`` with padding ``W − 1``
    computes ``T + W − 1`` outputs and drops the last ``W − 1`` (see ``docs/architectures.md``).
    Backward: the input gradient (the filter run backwards over the output gradient) and the weight
    gradient (each tap correlates the input with the output gradient), each as much as forward.

    Attributes: ``bias`` (axes of a bias, e.g. ``"u"``), ``trainable`` (False: no weight gradient).
    Parameters: the filter (``W·U``, kept in its dtype by weight formats) and the bias. Saves its input (for
    the weight gradient). State (``state_bytes``): the last ``W`` inputs of each sequence.
    """
    x, w, y, _, _ = _conv_axes(op)
    forward = contraction(op, (x, w), y)
    backward = contraction(op, (y, w), x)  # input gradient
    if trainable(op):
        backward += contraction(op, (x, y), w)  # weight gradient
    weights = [matrix(op, w, y, quantized=False)]
    bias = op.attr("bias")
    if bias:
        b_axes = tuple(str(bias).split())
        n_out, n_bias, size = elements_of(op, y), elements_of(op, b_axes), dtype_bytes(op.dtype)
        forward += Cost(flops=n_out, bytes_read=n_bias * size)
        if trainable(op):
            backward += Cost(flops=n_out, bytes_read=n_out * size, bytes_written=n_bias * size)
        weights.append(vector(op, b_axes, "bias"))
    forward += _decode_io(op, _conv_state(op))
    saved = (Saved("input", "input0", elements_of(op, x), op.dtype),) if trainable(op) else ()
    return OpCost(forward, backward, tuple(weights), saved)


# ---------------------------------------------------------------------------
# The selective scan


@dataclass(frozen=True)
class ScanPart:
    """One part of the selective scan: what it computes and its FLOPs per element.

    ``per``: ``"state"`` (per token × channel × state element, ``B·T·U·N``) or ``"channel"`` (per token ×
    channel, ``B·T·U``). ``weight_grad``: the part of ``backward`` that is a weight's gradient (none when the
    weights are frozen). ``matmul``: a contraction (what ``FlopCounterMode`` counts). ``recomputed``: a fused
    kernel runs it again in backward to rebuild the states it did not keep.
    """

    name: str
    computes: str
    per: str
    forward: int
    backward: int
    weight_grad: int = 0
    matmul: bool = False
    recomputed: bool = False


#: The selective scan, part by part (Mamba's Algorithm 2 with ZOH for A and Euler for B, as the reference
#: ``selective_scan_ref`` and transformers compute it). A multiply-add is 2 FLOPs; a gradient summed over
#: an axis (∂A over batch and tokens, ∂Δ over the state...) is a contraction: 2 per summed element.
SCAN_PARTS = (
    # Δ·A (1), exp (1) | ∂(ΔA) = ∂Ā·Ā (1); ∂Δ += Σ_n ∂(ΔA)·A (2); ∂A += Σ_{b,t} ∂(ΔA)·Δ (2, weight)
    ScanPart("discretise", "Ā = exp(Δ·A)", "state", 2, 5, weight_grad=2, recomputed=True),
    # Δ·B (1), ·x (1) | ∂(ΔB) = ∂(B̄x)·x (1); ∂x += Σ_n ∂(B̄x)·ΔB (2); ∂Δ += Σ_n ∂(ΔB)·B (2);
    # ∂B += Σ_u ∂(ΔB)·Δ (2)
    ScanPart("input", "B̄x = (Δ·B)·x", "state", 2, 7, recomputed=True),
    # Ā·h (1), + B̄x (1) | the state's gradient g, scanned backwards: g += ∂h from the readout (1);
    # ∂Ā = g·h_{t−1} (1); g ← Ā·g for the token before (1); ∂(B̄x) = g (free)
    ScanPart("recurrence", "h_t = Ā_t·h_{t−1} + B̄x_t", "state", 2, 3, recomputed=True),
    # Σ_n C·h: a contraction over the state | ∂h = ∂y·C (2), ∂C = Σ_u ∂y·h (2)
    ScanPart("readout", "y_t = C_t·h_t", "state", 2, 4, matmul=True),
    # D·x + y (2) | ∂x += D·∂y (2); ∂D = Σ_{b,t} ∂y·x (2, weight)
    ScanPart("skip", "y + D·x", "channel", 2, 4, weight_grad=2),
)


def _scan_axes(op: Op) -> tuple[tuple[Axes, ...], Axes, str, str, Axes]:
    p = op.parsed
    if len(p.inputs) != 5:
        raise CostModelError(
            f"scan pattern {p.text!r}: expected 'x, Δ, B, C, A -> y' (e.g. 'b t u, b t u, b t n, b t n, u n -> b t u')"
        )
    (x, dt, bm, cm, a), y = p.inputs, p.output
    state, along = str(op.attr("state", "")), str(op.attr("along", ""))
    if x != y or dt != y:
        raise CostModelError(f"scan pattern {p.text!r}: x and Δ must have the output's axes {' '.join(y)!r}")
    if bm != cm or state not in bm or state not in a or state in y:
        raise CostModelError(
            f"scan pattern {p.text!r}: state={state!r} must be an axis of B, C and A (B and C alike), not of the output"
        )
    if along not in y or along in a:
        raise CostModelError(
            f"scan pattern {p.text!r}: along={along!r} must be an axis of the output (the sequence scanned), not of A"
        )
    stray = [ax for ax in (*bm, *a) if ax not in y and ax != state]
    if stray:
        raise CostModelError(
            f"scan pattern {p.text!r}: axes {stray} of B, C or A are neither output axes nor the state axis {state!r}"
        )
    skip = tuple(str(op.attr("skip", "")).split())
    if any(ax not in y or ax == along for ax in skip):
        raise CostModelError(
            f"scan pattern {p.text!r}: skip={' '.join(skip)!r} (the axes of D) must be output axes other than {along!r}"
        )
    return (x, dt, bm, cm, a), y, state, along, skip


def _scan_state(op: Op) -> sympy.Expr:
    """The state h of every sequence and channel, in fp32 (transformers keeps it in float32 whatever the
    model's dtype, as the selective-scan kernels do)."""
    _, y, state, along, _ = _scan_axes(op)
    return _state(op, (*(a for a in y if a != along), state), "fp32")


@rule("scan", weight_operand=4, state_bytes=_scan_state)
def _scan(op: Op, counting: Counting) -> OpCost:
    """The selective scan of Mamba: ``"b t u, b t u, b t n, b t n, u n -> b t u"`` reads x, Δ (the step,
    after its softplus), B, C and the weight A, with ``state="n"`` (the state axis) and ``along="t"`` (the
    sequence scanned); ``skip="u"`` gives the axes of the skip weight D (none: no skip)::

        Ā = exp(Δ·A),  h_t = Ā_t·h_{t−1} + (Δ_t·B_t)·x_t,  y_t = C_t·h_t + D·x_t

    FLOPs per part and element: :data:`SCAN_PARTS`; forward ``8·B·T·U·N + 2·B·T·U``, of which the
    readout's ``2·B·T·U·N`` are matmul FLOPs (the one contraction, and all ``FlopCounterMode`` counts of the
    reference scan); backward ``19·B·T·U·N + 4·B·T·U`` (``15·…`` and ``2·…`` when frozen: no ∂A, ∂D).
    Not counted: ``A = −exp(A_log)`` and its gradient, once per step per weight element, whatever B and T.

    Bytes are those of one fused kernel (``selective_scan_cuda``): the states stay on chip, so forward reads
    x, Δ, B, C, A, D and writes y; backward reads them and ∂y and writes their gradients. It saves its four
    activation inputs and rebuilds the states in backward: ``recompute_flops`` are the forward FLOPs of the
    discretisation, input and recurrence (``6·B·T·U·N``).

    Parameters: ``A_log`` (the axes of A; A = −exp(A_log)) and ``D``. State (``state_bytes``): h, per
    sequence and channel ``N`` numbers in fp32.
    """
    (x, dt, bm, cm, a), y, _, _, skip = _scan_axes(op)
    n_state = elements_of(op, tuple(dict.fromkeys((*y, *bm))))
    n_chan = elements_of(op, y)
    per = {"state": n_state, "channel": n_chan}
    grads = trainable(op)
    parts = [s for s in SCAN_PARTS if skip or s.name != "skip"]
    fwd_flops = sum((s.forward * per[s.per] for s in parts), Zero)
    fwd_matmul = sum((s.forward * per[s.per] for s in parts if s.matmul), Zero)
    bwd_flops = sum(((s.backward - (0 if grads else s.weight_grad)) * per[s.per] for s in parts), Zero)
    bwd_matmul = sum((s.backward * per[s.per] for s in parts if s.matmul), Zero)
    again = sum((s.forward * per[s.per] for s in parts if s.recomputed), Zero)
    size = dtype_bytes(op.dtype)
    acts = sum((elements_of(op, axes) for axes in (x, dt, bm, cm)), Zero) * size
    params = (elements_of(op, a) + (elements_of(op, skip) if skip else Zero)) * size
    forward = Cost(
        flops=fwd_flops, matmul_flops=fwd_matmul, bytes_read=acts + params, bytes_written=n_chan * size
    ) + _decode_io(op, _scan_state(op))
    backward = Cost(
        flops=bwd_flops,
        matmul_flops=bwd_matmul,
        bytes_read=acts + params + n_chan * size,
        bytes_written=acts + (params if grads else Zero),
        recompute_flops=again,
    )
    weights = [Param("A_log", tuple((ax, op.size[ax]) for ax in a))]
    if skip:
        weights.append(vector(op, skip, "D"))
    saved = tuple(
        Saved(name, f"input{i}", elements_of(op, axes), op.dtype)
        for i, (name, axes) in enumerate(zip(("x", "dt", "B", "C"), (x, dt, bm, cm)))
    )
    return OpCost(forward, backward, tuple(weights), saved)
