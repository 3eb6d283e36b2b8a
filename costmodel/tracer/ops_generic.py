"""ATen ops that move or reshape data, make tensors, or compute element by element.

* **Views and copies** (``view``, ``transpose``, ``expand``, ``reshape``, ``contiguous``, ``to``...): a
  ``reshape`` op, a view when the output shares its input's storage (read off the FakeTensors, so a
  ``reshape`` that must copy is a copy), a copy otherwise. A view of a parameter is the parameter.
* **Factories** (``arange``, ``zeros``, ``*_like``...): tensors fed to the graph (no cost, no gradient).
* **Element-wise functions, reductions, indexing, concatenation**: the ``aten`` kinds of
  :mod:`costmodel.tracer.kinds`, FLOPs by a function of the core table, the tensors autograd keeps read
  off torch (:mod:`costmodel.tracer.saved`). A Python number or a buffer operand is a constant of the op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from .export import target_name
from .ir import Operand, TOp
from .kinds import fn_name
from .saved import saves_of
from .table import maps, weighted

if TYPE_CHECKING:  # the reader's type only: aten's Reader does not import the table's fillers
    from .aten import Reader

# -- views and copies ---------------------------------------------------------------------------------

VIEWS = (
    "view.default",
    "_unsafe_view.default",
    "reshape.default",
    "transpose.int",
    "permute.default",
    "expand.default",
    "unsqueeze.default",
    "squeeze.dim",
    "squeeze.dims",
    "squeeze.default",
    "slice.Tensor",
    "select.int",
    "t.default",
    "alias.default",
    "narrow.default",
    "contiguous.default",
    "clone.default",
    "_to_copy.default",
    "to.dtype",
    "to.dtype_layout",
    "to.device",
    "to.other",
    "type_as.default",
    "detach.default",
    "detach_.default",
    "unfold.default",
    "flatten.using_ints",
    "unflatten.int",
    "movedim.int",
    "diagonal.default",
    "expand_as.default",
    "view_as.default",
    "reshape_as.default",
    "lift_fresh_copy.default",
    "as_strided.default",
    "view.dtype",
    "mT.default",
    "swapaxes.default",
    "repeat.default",
    "constant_pad_nd.default",
    "pad.default",
    "roll.default",
    "flip.default",
    "tril.default",
    "triu.default",
    "repeat_interleave.self_int",
    "diff.default",
    "contiguous.memory_format",
    "view_as_real.default",
    "view_as_complex.default",
    "numpy_T.default",
    "_reshape_alias.default",
    "alias_copy.default",
    "squeeze_.dim",
    "unsqueeze_.default",
)
MOVES = {
    "repeat.default",
    "constant_pad_nd.default",
    "pad.default",
    "roll.default",
    "flip.default",
    "tril.default",
    "triu.default",
    "repeat_interleave.self_int",
    "diff.default",
}


def _source(r: Reader, node):
    return next(a for a in node.all_input_nodes if r.prog.is_tensor(a))


@maps(*VIEWS)
def view_like(r: Reader, node) -> None:
    """A view (same storage) or a copy of the first tensor argument; a parameter's view is the parameter."""
    src = r.resolve(_source(r, node))
    role = r.role(src)
    name = target_name(node.target)
    same = r.prog.storage(node) == r.prog.storage(src) and name not in MOVES
    if role == "param" and same and sympy.expand(r.prog.numel(r.prog.val(node)) - r.prog.numel(r.prog.val(src))) == 0:
        r.param_of[node.name] = r.param_of[src.name]
        return
    if role == "scalar":
        r.input(node, name.split(".")[0])
        return
    if same and r.prog.shape(node) == r.prog.shape(src) and r.rg.get(node.name) == r.rg.get(src.name):
        r.alias[node.name] = src.name  # the very tensor (a no-op `to`, `contiguous`, full slice)
        return
    dims, sizes = r.fresh(r.prog.shape(src))
    out, out_sizes = r.fresh(r.prog.shape(node))
    if name in MOVES:  # computes its output from the input (pad, repeat, roll...): an op that moves bytes
        r.moved(node, src)
        return
    attrs = {} if same else {"copy": True}
    op = TOp(
        node.name,
        "reshape",
        [r.operand(src, dims)],
        out,
        {**sizes, **out_sizes},
        r.prog.dtype(node),
        attrs=attrs,
        passthrough=True,
    )
    if role == "param":  # a copy or a part of a parameter (a dtype cast, a slice): counted here
        op.kind, op.attrs, op.passthrough = "aten_weighted", {"fn": fn_name("copy")}, False
    r.add(op)


@maps(
    "split.Tensor",
    "split_with_sizes.default",
    "chunk.default",
    "unbind.int",
    "tensor_split.sections",
    "split.sizes",
    "unsafe_split.Tensor",
)
def split_like(r: Reader, node) -> None:
    """A list of views: each ``getitem`` becomes a view of the input."""
    r.views_of[node.name] = _source(r, node)


@maps("getitem")
def getitem(r: Reader, node) -> None:
    """A tuple's element: an alias of its op's output (or a part of a fused parameter)."""
    parent, i = node.args
    if parent.name in r.views_of:
        src = r.resolve(r.views_of[parent.name])
        if r.role(src) == "param":
            r.param_of[node.name] = r.param_of[src.name]  # a part of a fused parameter; counted whole elsewhere
            return
        dims, sizes = r.fresh(r.prog.shape(src))
        out, out_sizes = r.fresh(r.prog.shape(node))
        same = r.prog.storage(node) == r.prog.storage(src)
        r.add(
            TOp(
                node.name,
                "reshape",
                [r.operand(src, dims)],
                out,
                {**sizes, **out_sizes},
                r.prog.dtype(node),
                attrs={} if same else {"copy": True},
                passthrough=True,
            )
        )
        return
    if parent.name in r.const:
        r.const.add(node.name)
        return
    if parent.name not in r.produced:
        r.unsupported.setdefault(f"getitem of {target_name(parent.target)}", []).append(node.name)
        return
    if i == 0:
        r.alias[node.name] = parent.name
        return
    first = r.produced[parent.name]
    dims = first.output if isinstance(first, TOp) else first.dims
    out, sizes = r.fresh(r.prog.shape(node))
    keeps = (parent.name, i) in r.kept_outputs  # the op keeps this output for its backward: held here
    op = TOp(
        node.name,
        "aten",
        [Operand(parent.name, dims)],
        out,
        {**first.sizes, **sizes},
        r.prog.dtype(node),
        hint=f"{first.hint}_out{i}",
        attrs={"fn": fn_name("copy")},
    )
    if keeps:
        op.attrs["saves"] = (("output", "output", r.prog.dtype(node), None),)
    r.add(op, keeps=keeps)


# -- factories ----------------------------------------------------------------------------------------

FACTORIES = (
    "arange.default",
    "arange.start",
    "arange.start_step",
    "zeros.default",
    "ones.default",
    "full.default",
    "empty.memory_format",
    "empty.default",
    "scalar_tensor.default",
    "zeros_like.default",
    "ones_like.default",
    "full_like.default",
    "empty_like.default",
    "new_zeros.default",
    "new_ones.default",
    "new_full.default",
    "new_empty.default",
    "rand.default",
    "randn.default",
    "rand_like.default",
    "randn_like.default",
    "randint.low",
    "randint.default",
    "linspace.default",
    "eye.default",
    "tensor.default",
    "empty_strided.default",
    "bernoulli.p",
)


@maps(*FACTORIES)
def factory(r: Reader, node) -> None:
    """A tensor made from sizes alone: fed to the graph, at no cost and without gradient."""
    r.input(node, target_name(node.target).split(".")[0])


# -- element-wise functions -----------------------------------------------------------------------------

#: ATen target → function (of kinds.TORCH_FNS or the core table).
POINTWISE = {
    "add.Tensor": "add",
    "add.Scalar": "add",
    "sub.Tensor": "sub",
    "sub.Scalar": "sub",
    "rsub.Scalar": "sub",
    "rsub.Tensor": "sub",
    "mul.Tensor": "mul",
    "mul.Scalar": "scale",
    "div.Tensor": "div",
    "div.Scalar": "scale",
    "div.Tensor_mode": "div",
    "neg.default": "neg",
    "pow.Tensor_Scalar": "pow",
    "pow.Tensor_Tensor": "pow",
    "pow.Scalar": "pow",
    "sqrt.default": "sqrt",
    "rsqrt.default": "rsqrt",
    "exp.default": "exp",
    "log.default": "log",
    "log1p.default": "log",
    "expm1.default": "exp",
    "tanh.default": "tanh",
    "sigmoid.default": "sigmoid",
    "sin.default": "sin",
    "cos.default": "cos",
    "silu.default": "silu",
    "gelu.default": "gelu",
    "relu.default": "relu",
    "leaky_relu.default": "relu",
    "elu.default": "elu",
    "softplus.default": "softplus",
    "erf.default": "erf",
    "reciprocal.default": "reciprocal",
    "abs.default": "abs",
    "sign.default": "round",
    "floor.default": "round",
    "ceil.default": "round",
    "round.default": "round",
    "trunc.default": "round",
    "clamp.default": "clamp",
    "clamp.Tensor": "clamp",
    "clamp_min.default": "clamp",
    "clamp_max.default": "clamp",
    "hardtanh.default": "clamp",
    "hardsigmoid.default": "clamp",
    "hardswish.default": "clamp",
    "mish.default": "softplus",
    "square.default": "pow",
    "maximum.default": "maximum",
    "minimum.default": "maximum",
    "remainder.Scalar": "round",
    "remainder.Tensor": "round",
    "fmod.Scalar": "round",
    "floor_divide.default": "round",
    "floor_divide.Scalar": "round",
    "lerp.Scalar": "lerp",
    "lerp.Tensor": "lerp",
    "addcmul.default": "addcmul",
    "addcdiv.default": "addcmul",
    "where.self": "where",
    "where.ScalarOther": "where",
    "where.ScalarSelf": "where",
    "where.Scalar": "where",
    "masked_fill.Scalar": "where",
    "masked_fill.Tensor": "where",
    "nan_to_num.default": "clamp",
    "logit.default": "log",
    "atan.default": "tanh",
    "atan2.default": "div",
    "dropout.default": "dropout",
    "alpha_dropout.default": "dropout",
    "feature_dropout.default": "dropout",
    "xlogy.Tensor": "log",
    "copysign.Tensor": "round",
    "fill.Scalar": "fill",
    "fill.Tensor": "fill",
    "gelu_.default": "gelu",
    "relu_.default": "relu",
    "silu_.default": "silu",
    "min.other": "maximum",
    "max.other": "maximum",
    "softshrink.default": "clamp",
    "prelu.default": "relu",
    "log_sigmoid.default": "softplus",
    "polar.default": "cos",
    "complex.default": "copy",
    "angle.default": "tanh",
    "real.default": "copy",
    "logaddexp.default": "softplus",
    "hypot.default": "sqrt",
    "erfc.default": "erf",
}
COMPARE = (
    "eq.Tensor",
    "eq.Scalar",
    "ne.Tensor",
    "ne.Scalar",
    "lt.Tensor",
    "lt.Scalar",
    "le.Tensor",
    "le.Scalar",
    "gt.Tensor",
    "gt.Scalar",
    "ge.Tensor",
    "ge.Scalar",
    "logical_and.default",
    "logical_or.default",
    "logical_not.default",
    "logical_xor.default",
    "bitwise_and.Tensor",
    "bitwise_or.Tensor",
    "bitwise_not.default",
    "bitwise_and.Scalar",
    "bitwise_or.Scalar",
    "__and__.Tensor",
    "__or__.Tensor",
    "__xor__.Tensor",
    "__invert__.default",
    "isnan.default",
    "isinf.default",
    "isfinite.default",
    "bitwise_xor.Tensor",
    "__and__.Scalar",
    "__or__.Scalar",
)
INPLACE = {
    "add_.Tensor": "add",
    "add_.Scalar": "add",
    "sub_.Tensor": "sub",
    "mul_.Tensor": "mul",
    "mul_.Scalar": "scale",
    "div_.Tensor": "div",
    "div_.Scalar": "scale",
    "clamp_.default": "clamp",
    "masked_fill_.Scalar": "where",
    "masked_fill_.Tensor": "where",
    "fill_.Scalar": "fill",
    "zero_.default": "fill",
    "copy_.default": "copy",
    "neg_.default": "neg",
    "exp_.default": "exp",
    "pow_.Scalar": "pow",
    "tanh_.default": "tanh",
    "sigmoid_.default": "sigmoid",
    "clamp_min_.default": "clamp",
    "uniform_.default": "fill",
    "normal_.default": "fill",
    "bernoulli_.float": "fill",
    "exponential_.default": "fill",
    "random_.default": "fill",
}


def _dropout_active(node) -> bool:
    p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
    return bool(train) and p != 0


@maps(*POINTWISE, *COMPARE, *INPLACE)
def pointwise(r: Reader, node) -> None:
    """An element-wise ATen op (dropout, activations, arithmetic, comparisons), with broadcasting."""
    name = target_name(node.target)
    fn = POINTWISE.get(name) or INPLACE.get(name) or "compare"
    args = [a for a in node.args if hasattr(a, "meta")] + [a for a in node.kwargs.values() if hasattr(a, "meta")]
    if fn == "dropout":
        src = r.resolve(args[0])
        if not _dropout_active(node) or r.prog.storage(node) == r.prog.storage(src):
            r.alias[node.name] = src.name  # p = 0 or eval: the input itself
            return
        op = r.pointwise_like(node, args[:1], "dropout", probe=False)
        if op is not None and r.rg.get(node.name):  # a 1-byte mask, as CUDA keeps (CPU and meta keep a
            n = sympy.Mul(*(op.sizes[d] for d in op.output))  # noise tensor of the input's dtype)
            op.attrs["saves"] = (("mask", "own", "bool", n),)
        return
    tensors = [a for a in args if r.role(a) == "tensor"]
    if name == "add.Tensor" and len(tensors) == 2:  # x + constant mask: the mask is a constant of the add
        free = [a for a in tensors if not r.rg.get(r.resolve(a).name, False)]
        if len(free) == 1 and r.rg.get(node.name) and r.prog.shape(r.resolve(free[0])) != r.prog.shape(node):
            r.const_operands.add((node.name, r.resolve(free[0]).name))
    if name == "mul.Tensor" and len(tensors) == 1 and all(r.role(a) != "param" for a in args):
        fn = "scale"  # a tensor times a number (or a buffer): the constant is not an operand
    r.pointwise_like(node, args, fn, attrs={"inplace": True} if name in INPLACE else None)


# -- reductions, indexing, concatenation ------------------------------------------------------------------

REDUCE = (
    "sum.dim_IntList",
    "sum.default",
    "mean.dim",
    "mean.default",
    "amax.default",
    "amin.default",
    "max.default",
    "min.default",
    "max.dim",
    "min.dim",
    "argmax.default",
    "argmin.default",
    "prod.default",
    "prod.dim_int",
    "var.correction",
    "var.dim",
    "std.correction",
    "std.dim",
    "var_mean.correction",
    "logsumexp.default",
    "linalg_vector_norm.default",
    "norm.ScalarOpt_dim",
    "any.dim",
    "any.default",
    "all.dim",
    "all.default",
    "cumsum.default",
    "cumprod.default",
    "count_nonzero.dim_IntList",
    "sort.default",
    "sort.stable",
    "topk.default",
    "kthvalue.default",
    "median.dim",
    "histc.default",
    "bincount.default",
)
INDEX = (
    "index.Tensor",
    "index_select.default",
    "gather.default",
    "take_along_dim.default",
    "index_put.default",
    "index_put_.default",
    "scatter.src",
    "scatter.value",
    "scatter_add.default",
    "scatter_add_.default",
    "scatter_.src",
    "scatter_.value",
    "scatter_reduce.two",
    "index_add.default",
    "index_copy.default",
    "masked_scatter.default",
    "one_hot.default",
    "searchsorted.Tensor",
    "bucketize.Tensor",
    "cat.default",
    "concat.default",
    "concatenate.default",
    "stack.default",
    "embedding.default",
    "index_fill.int_Scalar",
    "narrow_copy.default",
    "masked_select.default",
    "nonzero.default",
)


@maps(*REDUCE, *INDEX)
def gathered(r: Reader, node) -> None:
    """Reductions (FLOPs per input element), index and scatter ops, concatenation: ``aten`` ops."""
    name = target_name(node.target)
    tensors = [a for a in node.all_input_nodes if r.prog.is_tensor(a) and r.role(a) in ("tensor", "param")]
    if name == "embedding.default" and r.role(node.args[0]) == "param":
        from .ops_dense import embedding  # deferred: the tracer's modules import each other

        return embedding(r, node)
    if name == "index.Tensor" and r.role(node.args[0]) == "param":
        from .ops_dense import indexed_parameter  # deferred: the tracer's modules import each other

        if indexed_parameter(r, node):
            return
    fn = "reduce" if name in REDUCE else ("cat" if name.startswith(("cat", "concat", "stack")) else "index")
    if name.startswith(("cumsum", "cumprod")):
        fn = "cumsum"
    elif name.startswith(("sort", "topk", "kthvalue", "median", "histc", "bincount")):
        fn = "sort"
    elif name.startswith(("index_put", "scatter", "index_add", "index_copy", "masked_scatter", "index_fill")):
        fn = "scatter"
    first = r.prog.val(node)
    out, sizes = r.fresh(tuple(r.prog.expr(s) for s in first.shape))
    operands = []
    for a in tensors:
        dims, more = r.fresh(r.prog.shape(r.resolve(a)))
        sizes.update(more)
        operands.append(r.operand(a, dims))
    inplace = name.split(".")[0].endswith("_")
    attrs = {
        "fn": fn_name(fn),
        "per": "input" if name in REDUCE and fn == "reduce" else None,
        "inplace": inplace or None,
    }
    if not operands:
        r.input(node, name.split(".")[0])
        return
    op = weighted(
        TOp(
            node.name,
            "aten",
            operands,
            out,
            sizes,
            r.prog.dtype(first),
            attrs={k: v for k, v in attrs.items() if v is not None},
        ),
        r,
    )
    r.add(op)
    op.attrs["saves"] = saves_of(r, node, op.inputs)
