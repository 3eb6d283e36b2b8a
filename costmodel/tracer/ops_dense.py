"""ATen ops with a core costmodel kind: matmuls, attention, norms, softmax, lookups, the loss.

* ``linear``, ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``einsum`` (two operands), ``dot``,
  ``mv``: a ``matmul`` (activation × parameter, the parameter counted there) or a ``contraction``
  (activation × activation); einops patterns read off the shapes, batch axes shared by size. When torch
  folds a non-contiguous operand into a copy (``at::matmul``'s reshape), the copy is an op of its own, so
  the tensor autograd keeps is the one the graph has.
* ``scaled_dot_product_attention`` and the flash/efficient/cuDNN variants: one fused ``attention`` op
  (``q, k, v -> out``; grouped keys as a ``g``/``m`` split of the heads). Its mask is a constant.
* ``layer_norm``/``rms_norm`` with a gain: ``norm``; ``softmax``/``log_softmax``: ``softmax``;
  ``embedding`` of a parameter: ``gather``; ``cross_entropy_loss``: ``loss``; ``_grouped_mm``: the
  tracer's ``grouped_matmul`` (every row meets one expert's matrix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ..errors import CostModelError
from .export import target_name
from .ir import Operand, TOp
from .saved import new_saved_shapes
from .table import maps, weighted

if TYPE_CHECKING:  # the reader's type only: aten's Reader does not import the table's fillers
    from .aten import Reader


def _param(r: Reader, a) -> str | None:
    return r.param_of.get(r.resolve(a).name) if hasattr(a, "meta") else None


def contract(
    r: Reader, node, a, b, a_dims, b_dims, out_dims, sizes, *, bias=None, fold: bool = True, name: str | None = None
) -> TOp:
    """``a·b`` as a ``matmul`` (one operand a parameter) or a ``contraction``; ``bias`` a parameter's axes.
    ``name``: the op's node when it is not ``node``'s own (a product a bias is then added to)."""
    pa, pb = _param(r, a), _param(r, b)
    if pa and pb:
        raise CostModelError(
            f"trace: {node.name} ({target_name(node.target)}) multiplies two parameters; "
            "expected at least one activation"
        )
    if pa:  # the weight is the second pattern operand of a matmul
        a, b, a_dims, b_dims = b, a, b_dims, a_dims
    operands = [r.operand(a, a_dims), r.operand(b, b_dims)]
    weighted = bool(pa or pb)  # a parameter operand: a matmul; else activation × activation
    attrs: dict = {}
    op = TOp(
        name or node.name,
        "matmul" if weighted else "contraction",
        operands,
        out_dims,
        sizes,
        r.prog.dtype(node),
        attrs=attrs,
    )
    if weighted:
        fqn = operands[1].source
        if not r.prog.param_tensors[fqn].requires_grad:
            attrs["trainable"] = False
        if bias is not None:
            attrs["bias"] = bias[1]
            op.extra_params.append(bias[0])
    if fold and r.rg.get(node.name, False):
        _fold_copies(r, node, op, [a] if weighted else [a, b])
    return r.add(op)


def _fold_copies(r: Reader, node, op: TOp, data: list) -> None:
    """Where torch copies an operand to fold it (``at::matmul``), read the copy instead (it is what is kept)."""
    prog = r.prog
    for shape, dtype in new_saved_shapes(r, node):
        for i, x in enumerate(data):
            xs = prog.shape(r.resolve(x))
            tail = 2 if len(shape) >= 3 and len(xs) >= 2 else 1
            if shape[-tail:] != xs[-tail:] or op.operands[i].source != r.resolve(x).name:
                continue
            copy_name = f"{node.name}#fold{i}"
            src_dims, src_sizes = r.fresh(xs)
            dims = op.operands[i].dims
            if sympy.expand(sympy.Mul(*shape) - prog.numel(prog.val(r.resolve(x)))) != 0:
                batch = [d for d in op.output if d not in op.operands[1 - i].dims[-2:]][: len(op.output) - 2]
                dims = (*batch, *dims[-2:])  # a broadcast operand copied to the full batch
            out_dims, out_sizes = r.fresh(tuple(op.sizes[d] for d in dims))
            r.rg[copy_name] = r.rg.get(r.resolve(x).name, False)
            copy = TOp(
                copy_name,
                "reshape",
                [r.operand(x, src_dims)],
                out_dims,
                {**src_sizes, **out_sizes},
                dtype,
                module=prog.module_path(node),
                hint="fold_copy",
                attrs={"copy": True},
                passthrough=True,
            )
            r.add(copy)
            op.operands[i] = Operand(copy_name, dims)
            break


@maps("linear.default")
def linear(r: Reader, node) -> None:
    """``aten.linear``: input × weight (the weight's last operand), plus a bias."""
    x, w = node.args[0], node.args[1]
    b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    xs, ws = r.prog.shape(r.resolve(x)), r.prog.shape(r.resolve(w))
    xd, sizes = r.fresh(xs)
    (n,), nsize = r.fresh(ws[:1])
    sizes.update(nsize)
    bias = None
    if b is not None:
        if _param(r, b) is None:
            raise CostModelError(f"trace: {node.name}: linear with a bias that is not a parameter")
        bias = (_param(r, b), (n,))
    contract(r, node, x, w, xd, (n, xd[-1]), (*xd[:-1], n), sizes, bias=bias)


@maps("mm.default", "bmm.default", "addmm.default", "baddbmm.default", "dot.default", "mv.default", "matmul.default")
def matmul(r: Reader, node) -> None:
    """``mm``, ``bmm``, ``matmul``, ``addmm``, ``baddbmm``: a contraction, of a weight where an operand is one."""
    name = target_name(node.target)
    a, b = (node.args[1], node.args[2]) if name in ("addmm.default", "baddbmm.default") else node.args[:2]
    sa, sb, so = r.prog.shape(r.resolve(a)), r.prog.shape(r.resolve(b)), r.prog.shape(node)
    if len(sa) == 1 and len(sb) == 1:
        (k,), sizes = r.fresh(sa[:1])
        contract(r, node, a, b, (k,), (k,), (), sizes)
        return
    if len(sb) == 1:
        ad, sizes = r.fresh(sa)
        contract(r, node, a, b, ad, ad[-1:], ad[:-1], sizes)
        return
    if len(sa) == 1:
        bd, sizes = r.fresh(sb)
        contract(r, node, a, b, bd[-2:-1], bd, (*bd[:-2], bd[-1]), sizes)
        return
    batch, sizes = r.fresh(so[:-2])
    (m, k, n), more = r.fresh((sa[-2], sa[-1], sb[-1]))
    sizes.update(more)

    def side(shape):
        dims = batch[len(batch) - (len(shape) - 2) :] if len(shape) > 2 else ()
        return tuple(d for d, s in zip(dims, shape[:-2]) if s != 1 or sizes[d] == 1)

    bias, added = None, None
    if name in ("addmm.default", "baddbmm.default"):
        c = node.args[0]
        if _param(r, c) is not None and len(r.prog.shape(r.resolve(c))) == 1:
            bias = (_param(r, c), (n,))
        else:  # a tensor added to the product (ALiBi's bias in baddbmm): the product, then an add
            added = c
    product = f"{node.name}#product" if added is not None else None
    if product:
        r.rg[product] = r.rg.get(node.name, False)
    op = contract(r, node, a, b, (*side(sa), m, k), (*side(sb), k, n), (*batch, m, n), sizes, bias=bias, name=product)
    if added is not None:
        out = (*batch, m, n)
        cs = r.prog.shape(r.resolve(added))
        c_dims = tuple(d for d, size in zip(out[len(out) - len(cs) :], cs) if size != 1 or op.sizes[d] == 1)
        operands = [Operand(product, out)]
        if r.role(added) in ("tensor", "param"):
            operands.append(r.operand(added, c_dims))
        r.add(
            weighted(TOp(node.name, "aten_pointwise", operands, out, dict(op.sizes), op.dtype, attrs={"fn": "add"}), r)
        )


@maps("einsum.default")
def einsum(r: Reader, node) -> None:
    """A two-operand ``einsum`` as its contraction."""
    eq, operands = node.args[0], node.args[1]
    lhs, _, out = eq.replace(" ", "").partition("->")
    ins = lhs.split(",")
    if len(ins) != 2 or "." in eq or any(len(set(s)) != len(s) for s in ins) or not _:
        raise CostModelError(
            f"trace: {node.name}: einsum {eq!r}; expected two operands, explicit output, no ellipsis or repeated index"
        )
    letters = dict.fromkeys(ins[0] + ins[1] + out)
    dims = {c: f"a{next(r.ids)}" for c in letters}
    sizes = {}
    for spec, x in zip(ins, operands):
        for c, s in zip(spec, r.prog.shape(r.resolve(x))):
            sizes[dims[c]] = s
    contract(
        r,
        node,
        operands[0],
        operands[1],
        tuple(dims[c] for c in ins[0]),
        tuple(dims[c] for c in ins[1]),
        tuple(dims[c] for c in out),
        sizes,
    )


# -- attention ------------------------------------------------------------------------------------------

SDPA = {
    "scaled_dot_product_attention.default": 5,
    "_scaled_dot_product_flash_attention.default": 4,
    "_scaled_dot_product_efficient_attention.default": 6,
    "_scaled_dot_product_cudnn_attention.default": 8,
    "_scaled_dot_product_flash_attention_for_cpu.default": 4,
}


@maps(*SDPA)
def attention(r: Reader, node) -> None:
    """Fused attention: FLOPs as the math path counts them (backward 2 × forward), memory as FlashAttention."""
    q, k, v = node.args[:3]
    name = target_name(node.target)
    causal = node.kwargs.get("is_causal", node.args[SDPA[name]] if len(node.args) > SDPA[name] else False)
    sq, sk, sv = (r.prog.shape(r.resolve(x)) for x in (q, k, v))
    *batch_sizes, hq, t, e = sq
    hk, s, ev = sk[-3], sk[-2], sv[-1]
    batch, sizes = r.fresh(tuple(batch_sizes))
    (g, td, sd, ed, evd), more = r.fresh((hk, t, s, e, ev))
    sizes.update(more)
    heads: tuple[str, ...] = (g,)
    if sympy.expand(hq - hk) != 0:
        ratio = sympy.simplify(hq / hk)
        if not (ratio.is_Integer or not ratio.is_number):
            raise CostModelError(f"trace: {node.name}: {hq} query heads do not group over {hk} key heads")
        (m,), more = r.fresh((ratio,))
        sizes.update(more)
        heads = (g, m)
    operands = [
        r.operand(q, (*batch, *heads, td, ed)),
        r.operand(k, (*batch, g, sd, ed)),
        r.operand(v, (*batch, g, sd, evd)),
    ]
    attrs = {"scores": (*batch, *heads, td, sd), "causal": True if causal is True else None}
    r.add(
        TOp(
            node.name,
            "attention",
            operands,
            (*batch, *heads, td, evd),
            sizes,
            r.prog.dtype(q),
            hint="attention",
            attrs={k: v for k, v in attrs.items() if v is not None},
        )
    )


# -- norms, softmax, lookups, loss -----------------------------------------------------------------------


@maps("layer_norm.default", "rms_norm.default")
def norm(r: Reader, node) -> None:
    """Layer and RMS norms, with their gain and bias."""
    rms = target_name(node.target).startswith("rms")
    x, shape = node.args[0], node.args[1]
    w = node.args[2] if len(node.args) > 2 else node.kwargs.get("weight")
    b = None if rms else (node.args[3] if len(node.args) > 3 else node.kwargs.get("bias"))
    gain, bias = _param(r, w) if w is not None else None, _param(r, b) if b is not None else None
    if len(shape) != 1 or gain is None or (b is not None and bias is None):
        r.pointwise_like(node, [x, *(a for a in (w, b) if a is not None)], "reduce", kind="aten")
        return
    dims, sizes = r.fresh(r.prog.shape(r.resolve(x)))
    op = TOp(
        node.name,
        "norm",
        [r.operand(x, dims)],
        dims,
        sizes,
        r.prog.dtype(node),
        attrs={"axis": dims[-1:], "rms": True if rms else None, "bias": bool(bias) if not rms else None},
    )
    op.attrs = {k: v for k, v in op.attrs.items() if v is not None}
    op.extra_params.extend(p for p in (gain, bias) if p)
    r.add(op)


@maps("softmax.int", "_softmax.default", "_safe_softmax.default", "log_softmax.int", "_log_softmax.default")
def softmax(r: Reader, node) -> None:
    """``softmax`` and ``log_softmax`` over one dimension."""
    x, dim = node.args[0], node.args[1]
    dims, sizes = r.fresh(r.prog.shape(r.resolve(x)))
    hint = "log_softmax" if "log" in target_name(node.target) else "softmax"
    r.add(
        TOp(
            node.name,
            "softmax",
            [r.operand(x, dims)],
            dims,
            sizes,
            r.prog.dtype(node),
            hint=hint,
            attrs={"axis": (dims[dim],)},
        )
    )


def embedding(r: Reader, node) -> None:
    """``embedding(table, ids)``: rows of a parameter table picked by ids."""
    w, ids = node.args[0], node.args[1]
    id_dims, sizes = r.fresh(r.prog.shape(r.resolve(ids)))
    (v, d), more = r.fresh(r.prog.shape(r.resolve(w)))
    sizes.update(more)
    r.add(
        TOp(
            node.name,
            "gather",
            [r.operand(ids, id_dims), r.operand(w, (v, d))],
            (*id_dims, d),
            sizes,
            r.prog.dtype(node),
            hint="embedding",
        )
    )


def indexed_parameter(r: Reader, node) -> bool:
    """``weight[ids]`` (a mixture of experts picking each row's expert matrix): a lookup of a table."""
    w, indices = node.args[0], node.args[1]
    if len(indices) != 1 or indices[0] is None:
        return False
    ids = indices[0]
    id_dims, sizes = r.fresh(r.prog.shape(r.resolve(ids)))
    w_dims, more = r.fresh(r.prog.shape(r.resolve(w)))
    sizes.update(more)
    r.add(
        TOp(
            node.name,
            "gather",
            [r.operand(ids, id_dims), r.operand(w, w_dims)],
            (*id_dims, *w_dims[1:]),
            sizes,
            r.prog.dtype(node),
            hint="index",
        )
    )
    return True


@maps("cross_entropy_loss.default")
def cross_entropy(r: Reader, node) -> None:
    """The loss over (N, V) logits."""
    logits = node.args[0]
    shape = r.prog.shape(r.resolve(logits))
    if len(shape) != 2:
        raise CostModelError(f"trace: {node.name}: cross_entropy over logits of shape {shape}; expected (N, V)")
    (n, v), sizes = r.fresh(shape)
    out = () if len(r.prog.shape(node)) == 0 else (n,)
    r.add(
        TOp(
            node.name,
            "loss",
            [r.operand(logits, (n, v))],
            out,
            sizes,
            r.prog.dtype(node),
            hint="loss",
            attrs={"axis": (v,), "probs_dtype": r.prog.dtype(logits)},
        )
    )


@maps("_grouped_mm.default", "transformers::grouped_mm_fallback.default")
def grouped(r: Reader, node) -> None:
    """Rows sorted by expert times each expert's matrix: every row meets one of the ``e`` matrices."""
    x, w = node.args[0], node.args[1]
    (s, k), sizes = r.fresh(r.prog.shape(r.resolve(x)))
    (e, _, n), more = r.fresh(r.prog.shape(r.resolve(w)))
    sizes.update(more)
    if _param(r, w) is None:
        raise CostModelError(f"trace: {node.name}: grouped matmul whose weight is not a parameter")
    r.add(
        TOp(
            node.name,
            "grouped_matmul",
            [r.operand(x, (s, k)), r.operand(w, (e, k, n))],
            (s, n),
            sizes,
            r.prog.dtype(node),
            attrs={"experts": (e,)},
        )
    )


@maps("conv1d.default", "conv1d.padding")
def conv1d(r: Reader, node) -> None:
    """A 1-D convolution as a matmul over an unfolded view of its input (a window of ``k`` positions per
    output position, ``g`` groups of ``ci`` input channels): ``b g ci lo k, g co ci k -> b g co lo``, so
    its FLOPs are FlopCounterMode's (2·b·C_out·L_out·(C_in/groups)·k) and it keeps its input."""
    x, w = node.args[0], node.args[1]
    b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
    xs, ws, out = r.prog.shape(r.resolve(x)), r.prog.shape(r.resolve(w)), r.prog.shape(node)
    if _param(r, w) is None:
        raise CostModelError(f"trace: {node.name}: a convolution whose weight is not a parameter")
    batch = xs[:-2]
    c_out, ci, k = ws
    (g, co, lo, kd, cid), sizes = r.fresh((sympy.Integer(groups), c_out / groups, out[-1], k, ci))
    bd, more = r.fresh(batch)
    sizes.update(more)
    x_dims, x_sizes = r.fresh(xs)
    window = f"{node.name}#unfold"
    r.rg[window] = r.rg.get(r.resolve(x).name, False)
    r.add(
        TOp(
            window,
            "reshape",
            [r.operand(x, x_dims)],
            (*bd, g, cid, lo, kd),
            {**sizes, **x_sizes},
            r.prog.dtype(x),
            hint="unfold",
            passthrough=True,
        )
    )
    bias = None
    if b is not None:
        if _param(r, b) is None:
            raise CostModelError(f"trace: {node.name}: a convolution bias that is not a parameter")
        bias = (_param(r, b), (g, co))
    op = TOp(
        node.name,
        "matmul",
        [Operand(window, (*bd, g, cid, lo, kd)), r.operand(w, (g, co, cid, kd))],
        (*bd, g, co, lo),
        sizes,
        r.prog.dtype(node),
        attrs={"bias": bias[1]} if bias else {},
    )
    if bias:
        op.extra_params.append(bias[0])
    if not r.prog.param_tensors[_param(r, w)].requires_grad:
        op.attrs["trainable"] = False
    r.add(op)
