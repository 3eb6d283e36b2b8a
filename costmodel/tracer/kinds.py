"""The op kinds a traced graph adds to the registry: ATen ops the core kinds do not describe.

Matmuls, contractions, attention, softmax, norms, lookups, the loss and views are traced into the core
kinds (:mod:`costmodel.graph.rules`). Every other ATen op (element-wise functions, reductions, index and
scatter ops, concatenation...) becomes one of three kinds registered here with the same rule: ``aten``,
``aten_pointwise`` (element-wise, so fusion and attention chains see it) and ``aten_weighted`` (one
operand is a parameter). Their facts come from
the traced op itself, as attributes, because torch knows them exactly:

* ``fn``: an element-wise function of :data:`~costmodel.graph.rules.ELEMENTWISE` giving the FLOPs per
  element, forward and backward (a convention: PyTorch's ``FlopCounterMode`` counts none of them), counted
  over the output (``per="output"``) or over input 0 (``per="input"``: a reduction reads more than it
  writes);
* ``saves``: the tensors autograd keeps for this op, as torch's own derivative formula chooses them for
  the operands that need a gradient here (read off the op run on the export's fake tensors, see
  :mod:`costmodel.tracer.saved`): ``(name, source, dtype, elements)`` with source ``"inputN"`` (the N-th
  graph tensor read), ``"output"``, or ``"own"`` (a tensor only the op makes; ``elements`` sizes it);
* ``aten_weighted`` (not element-wise for fusion): its last operand is a parameter (a norm's gain
  multiplied in, a bias added), counted there unless ``tied`` (counted at that node); ``trainable``;
* ``inplace``: the op writes into input 0 (``add_``, ``index_put_``): its output is that storage.

Conventions: a traced element-wise op reads each operand once and writes its output once; its backward
reads the output's gradient and writes each input's gradient.
"""

from __future__ import annotations

import sympy

from ..graph.cost import Cost, OpCost, Param, Saved, Zero, dtype_bytes
from ..graph.pattern import elements
from ..graph.registry import KINDS, Op, rule, weight_operand
from ..graph.rules import ELEMENTWISE, Elementwise, elementwise_spec, register_elementwise

#: FLOPs per element of the element-wise functions the tracer names (forward, backward), beyond the core
#: ones (add, mul, scale, mask, gelu, silu, relu, dropout...). Each is 1 unless the function is a known
#: composite (a transcendental counts 1 as in the core table's conventions).
TORCH_FNS: dict[str, tuple[int, int]] = {
    "copy": (0, 0),  # a dtype cast or a layout copy: bytes only
    "sub": (1, 0),
    "div": (1, 2),
    "neg": (1, 1),
    "pow": (1, 2),
    "sqrt": (1, 1),
    "rsqrt": (1, 2),
    "exp": (1, 1),
    "log": (1, 1),
    "tanh": (1, 2),
    "sigmoid": (1, 2),
    "sin": (1, 1),
    "cos": (1, 1),
    "abs": (1, 1),
    "clamp": (1, 1),
    "where": (1, 1),
    "compare": (1, 0),
    "logical": (1, 0),
    "reduce": (1, 1),
    "index": (0, 1),
    "scatter": (1, 1),
    "cat": (0, 0),
    "softplus": (2, 2),
    "erf": (1, 1),
    "reciprocal": (1, 2),
    "maximum": (1, 1),
    "round": (1, 0),
    "cumsum": (1, 1),
    "sort": (1, 0),
    "elu": (2, 2),
    "gelu_erf": (8, 8),
    "fill": (1, 1),
    "lerp": (2, 2),
    "addcmul": (2, 2),
    "log_softmax": (5, 4),
}


def fn_name(fn: str) -> str:
    """The registered name of a tracer function (core names are used as they are)."""
    return fn if fn in ELEMENTWISE and fn not in TORCH_FNS else f"torch.{fn}"


def _register_fns() -> None:
    for fn, (forward, backward) in TORCH_FNS.items():
        name = f"torch.{fn}"
        if name not in ELEMENTWISE:  # imported once per process; a re-import must not raise
            register_elementwise(name, Elementwise(forward, backward))


def _last(op: Op) -> int:
    return len(op.parsed.inputs) - 1


def _inplace(op: Op) -> bool:
    return bool(op.attr("inplace"))


def _aten(op: Op, counting) -> OpCost:
    """A traced ATen op: FLOPs by its ``fn`` per element, bytes of its operands, torch's saved tensors."""
    p = op.parsed
    spec = elementwise_spec(op.attr("fn", ""))
    size = dtype_bytes(op.dtype)
    w = weight_operand(op)
    out = elements(p.output, op.size)
    per = elements(p.inputs[0], op.size) if op.attr("per") == "input" else out
    read = sympy.Add(*(elements(axes, op.size) for axes in p.inputs)) * size
    written = Zero if op.attr("inplace") else out * size
    forward = Cost(flops=spec.forward * per, bytes_read=read, bytes_written=written)
    data = [axes for j, axes in enumerate(p.inputs) if j != w]
    backward = Cost(
        flops=spec.backward * per,
        bytes_read=out * size,
        bytes_written=sympy.Add(*(elements(axes, op.size) for axes in data)) * size,
    )
    weights: tuple[Param, ...] = ()
    if w is not None:
        axes = p.inputs[w]
        if not op.attr("tied"):
            weights = (Param("weight", tuple((a, op.size[a]) for a in axes)),)
        if op.attr("trainable", True) is not False:
            backward += Cost(bytes_written=elements(axes, op.size) * size)
    saved = []
    for name, source, dtype, n in op.attr("saves", ()):
        if source == "output":
            n = out
        elif source != "own":
            n = elements(data[int(source.removeprefix("input"))], op.size)
        saved.append(
            Saved(
                str(name),
                str(source),
                sympy.sympify(n),
                str(dtype),
                "indices" if str(dtype).startswith("int") else "activation",
            )
        )
    return OpCost(forward, backward, weights, tuple(saved))


def _grouped(op: Op, counting) -> OpCost:
    """Rows sorted by expert times each expert's matrix (``torch._grouped_mm``): ``"s k, e k n -> s n"``.

    Every row meets one of the ``e`` matrices (attribute ``experts``), so the FLOPs are 2·s·k·n (a mixture
    of experts: s = top_k × tokens); backward is the input and the weight gradient, as for a matmul.
    Parameters are all ``e`` matrices. Keeps its input for the weight gradient. (``FlopCounterMode`` has no
    formula for ``_grouped_mm`` and counts none of this.)
    """
    from ..graph.rules import contraction, matrix  # deferred: the tracer's modules import each other

    (x, w), y = op.parsed.inputs, op.parsed.output
    e = str(op.attr("experts"))
    per_row = tuple(a for a in w if a != e)
    forward = contraction(op, (x, per_row), y)
    backward = contraction(op, (y, per_row), x) + contraction(op, (x, y), per_row)
    weight = matrix(op, w, y, stacked=(e,))
    return OpCost(forward, backward, (weight,), (Saved("input", "input0", elements(x, op.size), op.dtype),))


def _parameter(op: Op, counting) -> OpCost:
    """A parameter the traced forward never reads (a decoder's cross-attention without an encoder): it is
    still a parameter of the model (memory, optimizer states), with no FLOPs or bytes in this step."""
    axes = op.parsed.inputs[0]
    weights = () if op.attr("tied") else (Param("weight", tuple((a, op.size[a]) for a in axes)),)
    return OpCost(Cost(), Cost(), weights)


def register() -> None:
    """Register the tracer's kinds and functions (once per process)."""
    _register_fns()
    if "aten" not in KINDS:
        rule("aten", view=_inplace)(_aten)
        rule("aten_pointwise", view=_inplace, pointwise=True)(_aten)
        rule("aten_weighted", weight_operand=_last, view=_inplace)(_aten)
        rule("grouped_matmul", weight_operand=1, weight_use="routed")(_grouped)
        rule("parameter", weight_operand=0)(_parameter)


register()
