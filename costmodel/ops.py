"""Op records and the one registry of op rules.

An :class:`Op` is what a graph node carries: a kind, an einops pattern, the size
of every axis, a dtype and a few attributes. A *rule*, registered once per kind
with :func:`rule`, derives from it an :class:`~costmodel.cost.OpCost`: forward
and backward FLOPs and bytes, parameters, and the tensors saved for backward.

Conventions written where they bite:

* A multiply-add is 2 FLOPs, so a contraction costs 2 × the product of all its
  distinct axes.
* Backward of a contraction is derived, not assumed: it *is* the contractions for
  the gradient of each input (for a weight matmul: the input gradient and the
  weight gradient), each with the same 2 × product cost, hence 2 × forward.
* Non-matmul FLOPs per element (GELU, softmax, norms...) are conventions listed in
  :data:`ELEMENTWISE` and the rules below; PyTorch's ``FlopCounterMode`` counts
  none of them, which is why :class:`~costmodel.cost.Cost` keeps ``matmul_flops``
  apart.
* Causal attention: see :class:`Conventions`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from .cost import Cost, OpCost, Saved, Zero, dtype_bytes
from .errors import CostModelError, closest
from .pattern import Axes, Pattern, elements, parse

#: The kinds of op, as reported by ``costmodel derive --format json``.
KINDS = ("matmul", "contraction", "attention", "elementwise", "norm", "softmax", "gather", "loss", "reshape",
         "routed_matmul")


@dataclass(frozen=True)
class Conventions:
    """Counting choices that change numbers. Say which you use. The named conventions of
    :mod:`costmodel.conventions` (6ND, Kaplan, PaLM, Chinchilla, Megatron) are these choices.

    Attributes
    ----------
    causal : ``"full"`` counts causal attention over the whole T×T square (dense kernels,
        ``FlopCounterMode``); ``"half"`` counts half of it (what a causal kernel skips to).
    embedding : ``"lookup"``: a gather does no FLOPs forward; ``"matmul"``: it counts as a one-hot
        matmul, 2 × ids × table, backward 2 × forward (Chinchilla, Appendix F).
    elementwise : which non-matmul FLOPs count: ``"all"`` (:data:`ELEMENTWISE` and the rules),
        ``"none"`` (``FlopCounterMode``, 6ND) or ``"softmax"`` (Chinchilla).
    softmax_flops : per score, (forward, backward): (5, 4) = max, subtract, exp, sum, divide; Chinchilla (3, 6).
    """

    causal: str = "full"
    embedding: str = "lookup"
    elementwise: str = "all"
    softmax_flops: tuple[int, int] = (5, 4)

    def __post_init__(self) -> None:
        choices = {"causal": ("full", "half"), "embedding": ("lookup", "matmul"),
                   "elementwise": ("all", "none", "softmax")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise CostModelError(f"conventions: {name} must be one of {', '.join(map(repr, allowed))}, "
                                     f"received {getattr(self, name)!r}")
        sf = self.softmax_flops
        if not (isinstance(sf, tuple) and len(sf) == 2 and all(isinstance(n, int) and n >= 0 for n in sf)):
            raise CostModelError(f"conventions: softmax_flops must be two whole numbers (forward, backward), "
                                 f"received {sf!r}")


@dataclass(frozen=True)
class Op:
    """One op of a graph: a registered kind applied to a pattern with every axis sized."""

    kind: str
    pattern: str
    sizes: tuple[tuple[str, sympy.Expr], ...]
    dtype: str = "bf16"
    attrs: tuple[tuple[str, object], ...] = ()

    @property
    def parsed(self) -> Pattern:
        return parse(self.pattern)

    @property
    def size(self) -> Mapping[str, sympy.Expr]:
        return dict(self.sizes)

    def attr(self, name: str, default: object = None) -> object:
        return dict(self.attrs).get(name, default)

    def subs(self, values: Mapping) -> Op:
        """The same op with numbers (or other expressions) substituted into its sizes."""
        return Op(self.kind, self.pattern, tuple((a, s.subs(values)) for a, s in self.sizes), self.dtype, self.attrs)


Rule = Callable[[Op, Conventions], OpCost]
WeightOperand = int | None | Callable[[Op], "int | None"]  # an index, none, or a function of the op (composites)
RULES: dict[str, Rule] = {}
WEIGHT_OPERAND: dict[str, WeightOperand] = {}  # filled only by rule(), beside RULES: they cannot drift


def rule(kind: str, weight_operand: WeightOperand = None) -> Callable[[Rule], Rule]:
    """Register the rule for ``kind``; registering a kind twice raises. ``weight_operand``: which pattern
    operand is a weight (a parameter: no producer node, not an activation), ``None`` when there is none."""

    def register(fn: Rule) -> Rule:
        if kind in RULES:
            raise CostModelError(f"op rule {kind!r} is already registered (by {RULES[kind].__name__})")
        RULES[kind], WEIGHT_OPERAND[kind] = fn, weight_operand
        return fn

    return register


def weight_operand(op: Op) -> int | None:
    """The index of ``op``'s weight among its pattern operands (``None``: it has none), from its kind's rule.
    >>> weight_operand(Op("matmul", "b d, d f -> b f", ())), weight_operand(Op("softmax", "b s -> b s", ()))
    (1, None)
    """
    if op.kind not in WEIGHT_OPERAND:
        raise CostModelError(f"no op rule for kind {op.kind!r}{closest(op.kind, RULES)}; registered: {sorted(RULES)}")
    found = WEIGHT_OPERAND[op.kind]
    return found(op) if callable(found) else found


def has_weight(op: Op) -> bool:
    """Whether ``op`` reads a weight operand (a matmul, a routed matmul, a lookup table...)."""
    return weight_operand(op) is not None


def data_operands(op: Op) -> tuple[Axes, ...]:
    """The pattern operands of ``op`` that are graph tensors, in the order of the node's ``inputs``."""
    return tuple(axes for j, axes in enumerate(op.parsed.inputs) if j != weight_operand(op))


@functools.lru_cache(maxsize=65536)
def op_cost(op: Op, conventions: Conventions = Conventions()) -> OpCost:
    """Derive the costs of ``op`` with the registered rule of its kind."""
    if op.kind not in RULES:
        raise CostModelError(f"no op rule for kind {op.kind!r}{closest(op.kind, RULES)}; registered: {sorted(RULES)}")
    cost = RULES[op.kind](op, conventions)
    keep = {"all": True, "none": False, "softmax": op.kind in ("softmax", "attention")}[conventions.elementwise]
    if keep:
        return cost
    # drop non-matmul FLOPs (attention keeps its softmax FLOPs: its rule counts no epilogue then)
    return OpCost(*(Cost(flops=c.matmul_flops, matmul_flops=c.matmul_flops, bytes_read=c.bytes_read,
                         bytes_written=c.bytes_written, recompute_flops=c.recompute_flops)
                    for c in (cost.forward, cost.backward)), cost.params, cost.saved, cost.active)


# ---------------------------------------------------------------------------
# Shared derivations


def elements_of(op: Op, axes: Axes) -> sympy.Expr:
    return elements(axes, op.size)


def contraction(op: Op, inputs: tuple[Axes, ...], output: Axes, dtypes: tuple[str, ...] | None = None,
                scale: sympy.Expr = sympy.Integer(1)) -> Cost:
    """Cost of one contraction ``inputs -> output``: 2 × the product of its distinct axes."""
    distinct = dict.fromkeys(a for operand in (*inputs, output) for a in operand)
    flops = 2 * elements_of(op, tuple(distinct)) * scale
    dtypes = dtypes or (op.dtype,) * len(inputs)
    read = sum((elements_of(op, axes) * dtype_bytes(dt) for axes, dt in zip(inputs, dtypes)), Zero)
    written = elements_of(op, output) * dtype_bytes(op.dtype)
    return Cost(flops=flops, matmul_flops=flops, bytes_read=read, bytes_written=written)


def causal_scale(op: Op, conventions: Conventions) -> sympy.Expr:
    if op.attr("causal") and conventions.causal == "half":
        return sympy.Rational(1, 2)
    return sympy.Integer(1)


def _check_contraction(op: Op) -> None:
    p = op.parsed
    inputs = set().union(*p.inputs)
    stray = [a for a in p.output if a not in inputs]
    if stray:
        raise CostModelError(f"{op.kind} pattern {p.text!r}: output axes {stray} appear in no input")


def _elementwise_cost(op: Op, per_element: sympy.Expr) -> Cost:
    out, size = elements_of(op, op.parsed.output), dtype_bytes(op.dtype)
    read = sum((elements_of(op, axes) for axes in op.parsed.inputs), Zero) * size
    return Cost(flops=per_element * out, bytes_read=read, bytes_written=out * size)


# ---------------------------------------------------------------------------
# Rules


@rule("matmul", weight_operand=1)
def _matmul(op: Op, conventions: Conventions) -> OpCost:
    """Activation × weight, like einops' ``EinMix``: ``"b t d, d f -> b t f"``.

    Attributes: ``bias`` (axes of a bias added to the output, e.g. ``"f"``),
    ``tied`` (the weight belongs to another op: no parameters counted here),
    ``trainable`` (False for a frozen weight: no weight gradient).
    """
    _check_contraction(op)
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"matmul pattern {p.text!r}: expected 'input, weight -> output'")
    (x, w), y = p.inputs, p.output
    weight_dtype = str(op.attr("weight_dtype", op.dtype))
    forward = contraction(op, (x, w), y, (op.dtype, weight_dtype))
    backward = contraction(op, (y, w), x, (op.dtype, weight_dtype))  # input gradient
    if op.attr("trainable", True):
        backward += contraction(op, (x, y), w)  # weight gradient
    params = Zero if op.attr("tied") else elements_of(op, w)
    bias = op.attr("bias")
    if bias:
        b_axes = parse(str(bias)).output
        n_out, n_bias = elements_of(op, y), elements_of(op, b_axes)
        size = dtype_bytes(op.dtype)
        forward += Cost(flops=n_out, bytes_read=n_bias * size)
        if op.attr("trainable", True):
            backward += Cost(flops=n_out, bytes_read=n_out * size, bytes_written=n_bias * size)
        params += n_bias
    # the input is kept only for the weight gradient: PyTorch saves none for a frozen weight
    saved = (Saved("input", "input0", elements_of(op, x), op.dtype),) if op.attr("trainable", True) else ()
    return OpCost(forward, backward, params, saved)


@rule("contraction")
def _contraction(op: Op, conventions: Conventions) -> OpCost:
    """Activation × activation, e.g. attention scores ``"b h t k, b h s k -> b h t s"``.

    Attribute ``causal``: the output is causally masked (see :class:`Conventions`).
    """
    _check_contraction(op)
    p = op.parsed
    if len(p.inputs) != 2:
        raise CostModelError(f"contraction pattern {p.text!r}: expected 'a, b -> c'")
    a, b = p.inputs
    scale = causal_scale(op, conventions)
    forward = contraction(op, (a, b), p.output, scale=scale)
    backward = contraction(op, (p.output, b), a, scale=scale) + contraction(op, (a, p.output), b, scale=scale)
    saved = (Saved("a", "input0", elements_of(op, a), op.dtype), Saved("b", "input1", elements_of(op, b), op.dtype))
    return OpCost(forward, backward, Zero, saved)


@dataclass(frozen=True)
class Elementwise:
    """FLOPs per output element of an element-wise function, and what it saves."""

    forward: int
    backward: int
    saves: tuple[str, ...] = ()  # "input0", "input1", "output" or "mask"


#: Per-element FLOP conventions for element-wise functions (PyTorch counts none of them).
ELEMENTWISE: dict[str, Elementwise] = {
    "add": Elementwise(1, 0),  # the gradient passes through unchanged
    "mul": Elementwise(1, 2, ("input0", "input1")),  # d(xy) = y dx + x dy
    "scale": Elementwise(1, 1),  # multiply by a constant
    "mask": Elementwise(1, 1),  # causal mask fill
    "gelu": Elementwise(8, 8, ("input0",)),  # tanh approximation
    "silu": Elementwise(4, 4, ("input0",)),
    "relu": Elementwise(1, 1, ("output",)),
    "dropout": Elementwise(1, 1, ("mask",)),  # multiply by a saved 1-byte mask (and 1/(1-p))
    "rope": Elementwise(3, 3),  # x·cos + rotate(x)·sin; cos and sin are constants
}


@rule("elementwise")
def _elementwise(op: Op, conventions: Conventions) -> OpCost:
    """Element-wise function ``fn`` of :data:`ELEMENTWISE`, e.g. ``"b t f"`` with ``fn="gelu"``."""
    fn = str(op.attr("fn", ""))
    if fn not in ELEMENTWISE:
        raise CostModelError(f"elementwise op: unknown fn {fn!r}{closest(fn, ELEMENTWISE)}; known: {sorted(ELEMENTWISE)}")
    spec = ELEMENTWISE[fn]
    p = op.parsed
    forward = _elementwise_cost(op, sympy.Integer(spec.forward))
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
            axes = p.inputs[int(source.removeprefix("input"))]
            saved.append(Saved(source, source, elements_of(op, axes), op.dtype))
    return OpCost(forward, backward, Zero, tuple(saved))


def _reduced(op: Op) -> tuple[str, sympy.Expr, sympy.Expr]:
    """The reduction axis of a softmax/norm/loss op, the rows it has, its size."""
    p = op.parsed
    axis = str(op.attr("axis", p.inputs[0][-1]))
    if axis not in p.inputs[0]:
        raise CostModelError(f"{op.kind} pattern {p.text!r}: reduction axis {axis!r} is not an input axis")
    n = elements_of(op, p.inputs[0])
    return axis, n / op.size[axis], op.size[axis]


@rule("softmax")
def _softmax(op: Op, conventions: Conventions) -> OpCost:
    """Softmax over ``axis`` (default: the last): ``conventions.softmax_flops``
    per element, (5, 4) by default (max, subtract, exp, sum, divide); saves its output."""
    out = elements_of(op, op.parsed.output)
    size = dtype_bytes(op.dtype)
    per_fwd, per_bwd = conventions.softmax_flops
    forward = _elementwise_cost(op, sympy.Integer(per_fwd))
    backward = Cost(flops=per_bwd * out, bytes_read=2 * out * size, bytes_written=out * size)
    return OpCost(forward, backward, Zero, (Saved("output", "output", out, op.dtype),))


@rule("norm")
def _norm(op: Op, conventions: Conventions) -> OpCost:
    """LayerNorm (``rms=False``) or RMSNorm (``rms=True``) over ``axis``.

    LayerNorm: 7 FLOPs per element forward (mean, subtract, square, sum, scale,
    affine ×, affine +), RMSNorm 4; backward twice that. Parameters: a gain (and a
    bias when ``bias=True``) over the axis. Saves its input and per-row fp32
    statistics (mean and 1/std; RMSNorm only 1/rms), as PyTorch does.
    """
    axis, rows, width = _reduced(op)
    rms = bool(op.attr("rms", False))
    per = sympy.Integer(4 if rms else 7)
    forward = _elementwise_cost(op, per)
    n = rows * width
    size = dtype_bytes(op.dtype)
    backward = Cost(flops=2 * per * n, bytes_read=2 * n * size, bytes_written=n * size)
    params = width * (2 if op.attr("bias", not rms) else 1)
    saved = (Saved("input", "input0", n, op.dtype),
             Saved("stats", "own", rows * (1 if rms else 2), "fp32", role="stats"))
    return OpCost(forward, backward, params, saved)


@rule("gather", weight_operand=1)
def _gather(op: Op, conventions: Conventions) -> OpCost:
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
    if conventions.embedding == "matmul":  # a one-hot (ids × rows) matrix times the table
        rows = tuple(a for a in table if a not in p.output)
        one_hot = contraction(op, (ids + rows, table), p.output)
        forward += Cost(flops=one_hot.flops, matmul_flops=one_hot.flops)
        backward = Cost(flops=2 * one_hot.flops, matmul_flops=2 * one_hot.flops,  # as any matmul: 2 × forward
                        bytes_read=backward.bytes_read, bytes_written=backward.bytes_written)
    params = Zero if op.attr("tied") else elements_of(op, table)
    return OpCost(forward, backward, params, (Saved("ids", "input0", n_ids, "int64", role="indices"),))


@rule("loss")
def _loss(op: Op, conventions: Conventions) -> OpCost:
    """Cross-entropy over ``axis`` (``"b t v -> b t"``): log-softmax (5 FLOPs per
    logit) then picking the target; backward is softmax minus one-hot (2 per logit).
    Saves the log-probabilities in ``attr probs_dtype`` (fp32: autocast runs the
    loss in fp32), the integer targets and, as PyTorch's ``nll_loss`` does, the
    0-dim fp32 ``total_weight`` (4 bytes).
    """
    axis, rows, width = _reduced(op)
    n = rows * width
    size = dtype_bytes(op.dtype)
    probs = str(op.attr("probs_dtype", "fp32"))
    forward = Cost(flops=5 * n, bytes_read=n * size + rows * 8, bytes_written=rows * dtype_bytes(probs))
    backward = Cost(flops=2 * n, bytes_read=n * dtype_bytes(probs), bytes_written=n * size)
    saved = (Saved("log_probs", "own", n, probs), Saved("targets", "own", rows, "int64", role="indices"),
             Saved("total_weight", "own", sympy.Integer(1), "fp32", role="stats"))
    return OpCost(forward, backward, Zero, saved)


@rule("reshape")
def _reshape(op: Op, conventions: Conventions) -> OpCost:
    """A rearrange: a free view, or a copy (``copy=True``) that reads and writes every element."""
    p = op.parsed
    n = elements_of(op, p.output)
    moved = n * dtype_bytes(op.dtype) if op.attr("copy") else Zero
    cost = Cost(bytes_read=moved, bytes_written=moved)
    return OpCost(cost, cost)


# The rules of composite ops (fused attention, routed expert matmuls) live in their own module;
# importing it registers them, so every rule is known once ``costmodel.ops`` is imported.
from . import composite  # noqa: E402,F401
