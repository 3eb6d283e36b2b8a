"""The core op rules: matmul, contraction, element-wise functions, softmax, norm, gather, loss, reshape.

Each is registered with :func:`~costmodel.graph.registry.rule` together with its facts; the shared
derivations (:func:`contraction`, :func:`elementwise_cost`) are what user rules build on too.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..errors import CostModelError, closest
from ..options import Counting
from .cost import Cost, OpCost, Param, Saved, Zero, dtype_bytes
from .pattern import Axes, elements, parse
from .registry import Op, rule

# ---------------------------------------------------------------------------
# Shared derivations


def elements_of(op: Op, axes: Axes) -> sympy.Expr:
    """The number of elements of a tensor with ``axes``, at ``op``'s sizes."""
    return elements(axes, op.size)


def contraction(
    op: Op,
    inputs: tuple[Axes, ...],
    output: Axes,
    dtypes: tuple[str, ...] | None = None,
    scale: sympy.Expr = sympy.Integer(1),
) -> Cost:
    """Cost of one contraction ``inputs -> output``: 2 × the product of its distinct axes."""
    distinct = dict.fromkeys(a for operand in (*inputs, output) for a in operand)
    flops = 2 * elements_of(op, tuple(distinct)) * scale
    dtypes = dtypes or (op.dtype,) * len(inputs)
    read = sum((elements_of(op, axes) * dtype_bytes(dt) for axes, dt in zip(inputs, dtypes)), Zero)
    written = elements_of(op, output) * dtype_bytes(op.dtype)
    return Cost(flops=flops, matmul_flops=flops, bytes_read=read, bytes_written=written)


def causal_scale(op: Op, counting: Counting) -> sympy.Expr:
    """1/2 for a causal op when causal attention is counted half (``counting.causal``), else 1."""
    if op.attr("causal") and counting.causal == "half":
        return sympy.Rational(1, 2)
    return sympy.Integer(1)


def check_contraction(op: Op) -> None:
    """Refuse a contraction whose output has an axis that no input has."""
    p = op.parsed
    inputs = set().union(*p.inputs)
    stray = [a for a in p.output if a not in inputs]
    if stray:
        raise CostModelError(f"{op.kind} pattern {p.text!r}: output axes {stray} appear in no input")


def elementwise_cost(op: Op, per_element: sympy.Expr) -> Cost:
    """``per_element`` FLOPs per output element; every operand read once, the output written once."""
    out, size = elements_of(op, op.parsed.output), dtype_bytes(op.dtype)
    read = sum((elements_of(op, axes) for axes in op.parsed.inputs), Zero) * size
    return Cost(flops=per_element * out, bytes_read=read, bytes_written=out * size)


def matrix(op: Op, w: Axes, out: Axes, *, stacked: Axes = (), quantized: bool = True, name: str = "weight") -> Param:
    """A weight matrix: rows are its axes on the output side, columns the rest, ``stacked`` the selected axes."""
    rows = tuple(a for a in w if a in out and a not in stacked)
    cols = tuple(a for a in w if a not in rows and a not in stacked)
    return Param(
        name,
        tuple((a, op.size[a]) for a in w),
        elements_of(op, rows),
        elements_of(op, cols),
        elements_of(op, stacked),
        quantized,
    )


def vector(op: Op, axes: Axes, name: str) -> Param:
    """A bias or gain over ``axes``."""
    return Param(name, tuple((a, op.size[a]) for a in axes))


def trainable(op: Op) -> bool:
    """Whether ``op``'s weights get gradients (not frozen: ``trainable=False``)."""
    return op.attr("trainable", True) is not False


# ---------------------------------------------------------------------------
# Rules


@rule("matmul", weight_operand=1, weight_use="dense")
def _matmul(op: Op, counting: Counting) -> OpCost:
    """Activation × weight, like einops' ``EinMix``: ``"b t d, d f -> b t f"``.

    Attributes: ``bias`` (axes of a bias added to the output, e.g. ``"f"``),
    ``tied`` (the weight belongs to another op: no parameters counted here),
    ``trainable`` (False for a frozen weight: no weight gradient), ``weight_dtype``,
    ``input_grad`` (False: the input needs no gradient, as a graph input such as an image's pixels:
    no input-gradient contraction, as autograd skips it), ``extra_tied`` (the bias belongs to another op, as a
    module applied at every step of a loop: no bias parameters counted here).
    """
    check_contraction(op)
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"matmul pattern {p.text!r}: expected 'input, weight -> output'")
    (x, w), y = p.inputs, p.output
    weight_dtype = str(op.attr("weight_dtype", op.dtype))
    forward = contraction(op, (x, w), y, (op.dtype, weight_dtype))
    backward = Cost()
    if op.attr("input_grad", True) is not False:
        backward += contraction(op, (y, w), x, (op.dtype, weight_dtype))  # input gradient
    if trainable(op):
        backward += contraction(op, (x, y), w)  # weight gradient
    weights = [] if op.attr("tied") else [matrix(op, w, y)]
    bias = op.attr("bias")
    if bias:
        b_axes = parse(str(bias)).output
        n_out, n_bias = elements_of(op, y), elements_of(op, b_axes)
        size = dtype_bytes(op.dtype)
        forward += Cost(flops=n_out, bytes_read=n_bias * size)
        if trainable(op):
            backward += Cost(flops=n_out, bytes_read=n_out * size, bytes_written=n_bias * size)
        if not op.attr("extra_tied"):
            weights.append(vector(op, b_axes, "bias"))
    # the input is kept only for the weight gradient: PyTorch saves none for a frozen weight
    saved = (Saved("input", "input0", elements_of(op, x), op.dtype),) if trainable(op) else ()
    return OpCost(forward, backward, tuple(weights), saved)


def _pair(op: Op) -> dict[int, int | None]:
    return {0: 1, 1: 0}


@rule("contraction", cache_operands=_pair)
def _contraction(op: Op, counting: Counting) -> OpCost:
    """Activation × activation, e.g. attention scores ``"b h t k, b h s k -> b h t s"``.

    Attribute ``causal``: the output is causally masked (see :class:`~costmodel.options.Counting`).
    Each input is kept for the gradient of the other.
    """
    check_contraction(op)
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"contraction pattern {p.text!r}: expected 'a, b -> c'")
    a, b = p.inputs
    scale = causal_scale(op, counting)
    forward = contraction(op, (a, b), p.output, scale=scale)
    backward = contraction(op, (p.output, b), a, scale=scale) + contraction(op, (a, p.output), b, scale=scale)
    saved = (
        Saved("a", "input0", elements_of(op, a), op.dtype, serves=(1,)),
        Saved("b", "input1", elements_of(op, b), op.dtype, serves=(0,)),
    )
    return OpCost(forward, backward, (), saved)


@dataclass(frozen=True)
class Elementwise:
    """FLOPs per output element of an element-wise function, and what it saves.

    ``saves``: ``"input0"``, ``"input1"``, ``"output"`` or ``"mask"``; ``serves`` (for a product of two
    inputs): each saved input serves only the gradient of the other.
    """

    forward: int
    backward: int
    saves: tuple[str, ...] = ()
    product: bool = False


#: Per-element FLOP conventions of element-wise functions (PyTorch counts none of them). Add one with
#: :func:`register_elementwise`.
ELEMENTWISE: dict[str, Elementwise] = {
    "add": Elementwise(1, 0),  # the gradient passes through unchanged
    "mul": Elementwise(1, 2, ("input0", "input1"), product=True),  # d(xy) = y dx + x dy
    "scale": Elementwise(1, 1),  # multiply by a constant
    "mask": Elementwise(1, 1),  # causal mask fill
    "gelu": Elementwise(8, 8, ("input0",)),  # tanh approximation
    "silu": Elementwise(4, 4, ("input0",)),
    "relu": Elementwise(1, 1, ("output",)),
    "dropout": Elementwise(1, 1, ("mask",)),  # multiply by a saved 1-byte mask (and 1/(1-p))
    "rope": Elementwise(3, 3),  # x·cos + rotate(x)·sin; cos and sin are constants
    "softcap": Elementwise(3, 4, ("output",)),  # c·tanh(x/c): divide, tanh, multiply; grad (1 − (y/c)²)·g
    "tanh": Elementwise(1, 3, ("output",)),  # grad (1 − y²)·g: square, subtract, multiply
}


def register_elementwise(fn: str, spec: Elementwise) -> None:
    """Add an element-wise function (its FLOPs per element and what it saves); a name taken twice raises."""
    if fn in ELEMENTWISE:
        raise CostModelError(f"element-wise function {fn!r} is already registered")
    if not isinstance(spec, Elementwise):
        raise CostModelError(f"element-wise function {fn!r}: expected an Elementwise record, received {spec!r}")
    ELEMENTWISE[fn] = spec


def elementwise_spec(fn: object) -> Elementwise:
    """The registered element-wise function ``fn`` (:data:`ELEMENTWISE`)."""
    if fn not in ELEMENTWISE:
        raise CostModelError(
            f"elementwise op: unknown fn {fn!r}{closest(str(fn), ELEMENTWISE)}; known: {sorted(ELEMENTWISE)}"
        )
    return ELEMENTWISE[str(fn)]


@rule("elementwise", pointwise=True)
def _elementwise(op: Op, counting: Counting) -> OpCost:
    """Element-wise function ``fn`` of :data:`ELEMENTWISE`, e.g. ``"b t f"`` with ``fn="gelu"``."""
    spec = elementwise_spec(op.attr("fn", ""))
    p = op.parsed
    forward = elementwise_cost(op, sympy.Integer(spec.forward))
    out = elements_of(op, p.output)
    size = dtype_bytes(op.dtype)
    ins = [elements_of(op, axes) for axes in p.inputs]
    # an input broadcast to the output's shape gets its gradient summed back: out - in adds
    reduce = sum((out - n for n in ins if sympy.expand(out - n) != 0), Zero)
    backward = Cost(flops=spec.backward * out + reduce, bytes_read=out * size, bytes_written=sum(ins, Zero) * size)
    saved = []
    for source in spec.saves:
        if source == "mask":
            saved.append(Saved("mask", "own", out, "bool", role="mask"))
        elif source == "output":
            saved.append(Saved("output", "output", out, op.dtype))
        else:
            i = int(source.removeprefix("input"))
            serves = (1 - i,) if spec.product and len(p.inputs) == 2 else None
            saved.append(Saved(source, source, elements_of(op, p.inputs[i]), op.dtype, serves=serves))
    return OpCost(forward, backward, (), tuple(saved))


def _reduced(op: Op) -> tuple[str, sympy.Expr, sympy.Expr]:
    """The reduction axis of a softmax/norm/loss op, the rows it has, its size."""
    p = op.parsed
    axis = str(op.attr("axis", p.inputs[0][-1]))
    if axis not in p.inputs[0]:
        raise CostModelError(f"{op.kind} pattern {p.text!r}: reduction axis {axis!r} is not an input axis")
    n = elements_of(op, p.inputs[0])
    return axis, n / op.size[axis], op.size[axis]


def sink_axes(op: Op) -> Axes:
    """The axes of a softmax's (or fused attention's) learned sink logits (attribute ``sink``); () without."""
    sink = op.attr("sink")
    if not sink:
        return ()
    axes = parse(str(sink)).output
    stray = [a for a in axes if a not in op.size]
    if stray:
        raise CostModelError(
            f"{op.kind} pattern {op.pattern!r}: sink axes {stray} are not axes of the op; "
            "expected some of its non-reduced axes (the heads, e.g. sink='g m')"
        )
    return axes


@rule("softmax", normalizer=True, counts_softmax=True, attention_attrs=("sink",))
def _softmax(op: Op, counting: Counting) -> OpCost:
    """Softmax over ``axis`` (default: the last): ``counting.softmax_flops``
    per element, (5, 4) by default (max, subtract, exp, sum, divide); saves its output.

    Attribute ``sink`` (axes, e.g. ``"g m"``): attention sinks (gpt-oss; Xiao et al. 2023). One learned
    logit per sink index joins every row as an extra column, so each row is normalised over ``axis``
    + 1 columns, and the sink's column is dropped from the output: the FLOPs and the saved
    probabilities count ``size(axis) + 1`` columns, and the op owns the sink logits (a parameter
    vector over those axes).
    """
    axis, rows, width = _reduced(op)
    sinks = sink_axes(op)
    columns = width + 1 if sinks else width  # the sink column is normalised with the others
    n = rows * columns
    out = elements_of(op, op.parsed.output)
    size = dtype_bytes(op.dtype)
    per_fwd, per_bwd = counting.softmax_flops
    forward = Cost(flops=per_fwd * n, bytes_read=out * size, bytes_written=out * size)
    backward = Cost(flops=per_bwd * n, bytes_read=2 * out * size, bytes_written=out * size)
    weights: tuple[Param, ...] = ()
    if sinks:
        weights = (vector(op, sinks, "sink"),)
        forward += Cost(bytes_read=weights[0].elements * size)
    return OpCost(forward, backward, weights, (Saved("output", "output", n, op.dtype),))


@rule("norm")
def _norm(op: Op, counting: Counting) -> OpCost:
    """LayerNorm (``rms=False``) or RMSNorm (``rms=True``) over ``axis``.

    LayerNorm: 7 FLOPs per element forward (mean, subtract, square, sum, scale,
    affine ×, affine +), RMSNorm 4; backward twice that. Parameters: a gain (and a
    bias when ``bias=True``, the default for LayerNorm) over the axis. ``affine=False``: no gain and no
    bias, and one FLOP per element fewer for each (Llama 4's L2 norm of q and k: RMSNorm without a
    gain, 3). ``extra_tied``: the gain and bias belong to another op (one norm module applied again): none
    counted here. Saves its input and per-row fp32 statistics (mean and 1/std; RMSNorm only 1/rms), as
    PyTorch does.
    """
    axis, rows, width = _reduced(op)
    rms = bool(op.attr("rms", False))
    affine = op.attr("affine", True) is not False
    per = sympy.Integer((4 if rms else 7) - (0 if affine else 1 if rms else 2))
    forward = elementwise_cost(op, per)
    n = rows * width
    size = dtype_bytes(op.dtype)
    backward = Cost(flops=2 * per * n, bytes_read=2 * n * size, bytes_written=n * size)
    parts = ("gain", "bias") if op.attr("bias", not rms) else ("gain",)
    weights = tuple(vector(op, (axis,), part) for part in parts) if affine and not op.attr("extra_tied") else ()
    saved = (
        Saved("input", "input0", n, op.dtype),
        Saved("stats", "own", rows * (1 if rms else 2), "fp32", role="stats"),
    )
    return OpCost(forward, backward, weights, saved)


@rule("gather", weight_operand=1, weight_use="table", no_grad=(0,))
def _gather(op: Op, counting: Counting) -> OpCost:
    """Embedding lookup ``"b t, v d -> b t d"``: rows of a table picked by integer ids.

    No FLOPs forward; backward scatter-adds the output gradient into the table
    (one FLOP per output element). Attribute ``tied``: the table belongs to
    another op. Saves the ids.
    """
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"gather pattern {p.text!r}: expected 'ids, table -> rows'")
    ids, table = p.inputs
    out, n_ids = elements_of(op, p.output), elements_of(op, ids)
    size = dtype_bytes(op.dtype)
    forward = Cost(bytes_read=out * size + n_ids * 8, bytes_written=out * size)
    backward = Cost(flops=out, bytes_read=out * size + n_ids * 8, bytes_written=elements_of(op, table) * size)
    if counting.embedding == "matmul":  # a one-hot (ids × rows) matrix times the table
        rows = tuple(a for a in table if a not in p.output)
        one_hot = contraction(op, (ids + rows, table), p.output)
        forward += Cost(flops=one_hot.flops, matmul_flops=one_hot.flops)
        backward = Cost(
            flops=2 * one_hot.flops,
            matmul_flops=2 * one_hot.flops,  # as any matmul: 2 × forward
            bytes_read=backward.bytes_read,
            bytes_written=backward.bytes_written,
        )
    weights = () if op.attr("tied") else (matrix(op, table, p.output, quantized=False),)
    return OpCost(forward, backward, weights, (Saved("ids", "input0", n_ids, "int64", role="indices"),))


def _probs_dtype(op: Op) -> str:
    return str(op.attr("probs_dtype", "fp32"))


def _log_probs_gradient(op: Op) -> sympy.Expr:
    """The gradient of the log-probs exists before the logits' gradient is made from it."""
    return elements_of(op, op.parsed.inputs[0]) * dtype_bytes(_probs_dtype(op))


@rule(
    "loss", output_dtype=_probs_dtype, fusion_barrier=True, training_only=True, backward_workspace=_log_probs_gradient
)
def _loss(op: Op, counting: Counting) -> OpCost:
    """Cross-entropy over ``axis`` (``"b t v -> b t"``): log-softmax (5 FLOPs per
    logit) then picking the target; backward is softmax minus one-hot (2 per logit).
    Saves the log-probabilities in ``attr probs_dtype`` (fp32: autocast runs the
    loss in fp32), the integer targets and, as PyTorch's ``nll_loss`` does, the
    0-dim fp32 ``total_weight`` (4 bytes).
    """
    axis, rows, width = _reduced(op)
    n = rows * width
    size = dtype_bytes(op.dtype)
    probs = _probs_dtype(op)
    forward = Cost(flops=5 * n, bytes_read=n * size + rows * 8, bytes_written=rows * dtype_bytes(probs))
    backward = Cost(flops=2 * n, bytes_read=n * dtype_bytes(probs), bytes_written=n * size)
    saved = (
        Saved("log_probs", "own", n, probs),
        Saved("targets", "own", rows, "int64", role="indices"),
        Saved("total_weight", "own", sympy.Integer(1), "fp32", role="stats"),
    )
    return OpCost(forward, backward, (), saved)


@rule("concat")
def _concat(op: Op, counting: Counting) -> OpCost:
    """Tensors joined along one axis: ``"b c d, b n d -> b t d"`` with ``t`` sized ``c + n``.

    The operands have the output's axes but one, in the same place: the joined axis, whose sizes add up
    to the output's. A copy (reads every operand, writes the output); backward hands each operand its
    slice of the gradient, a view (no FLOPs, no bytes), as autograd's ``cat`` does. Saves nothing.
    """
    p = op.parsed
    out = p.output
    if len(p.inputs) < 2 or any(len(axes) != len(out) for axes in p.inputs):
        raise CostModelError(f"concat pattern {p.text!r}: expected two or more operands with the output's rank")
    where = {i for axes in p.inputs for i, (a, o) in enumerate(zip(axes, out)) if a != o}
    if len(where) != 1:
        raise CostModelError(
            f"concat pattern {p.text!r}: expected the operands to differ from the output in "
            f"exactly one axis (the joined one), found {len(where)}"
        )
    i = where.pop()
    joined = sum((op.size[axes[i]] for axes in p.inputs), Zero)
    if sympy.expand(joined - op.size[out[i]]) != 0:
        raise CostModelError(
            f"concat pattern {p.text!r}: the joined axis {out[i]!r} is sized {op.size[out[i]]}, "
            f"expected the sum of the operands' {joined}"
        )
    return OpCost(elementwise_cost(op, Zero), Cost())


def _is_view(op: Op) -> bool:
    return not op.attr("copy")


@rule("reshape", view=_is_view)
def _reshape(op: Op, counting: Counting) -> OpCost:
    """A rearrange: a free view, or a copy (``copy=True``) that reads and writes every element."""
    p = op.parsed
    n = elements_of(op, p.output)
    moved = n * dtype_bytes(op.dtype) if op.attr("copy") else Zero
    cost = Cost(bytes_read=moved, bytes_written=moved)
    return OpCost(cost, cost)
