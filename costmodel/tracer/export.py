"""Export a module with ``torch.export`` (symbolic sizes) and read the ATen graph it gives.

The module is exported once, non-strict, with the named dimensions of the example inputs dynamic
(``Dim``); every tensor in the graph then carries a FakeTensor whose shape is made of sympy expressions in
torch's own size symbols (``s72``, ``s70``: numbered by source line, never ``s0, s1``). :class:`Program`
maps those symbols to costmodel's (``B``, ``T``, or a symbol of the given name) through the inputs'
shapes, and answers what the mapping of each node needs: its shape, dtype, storage, module path, whether
it is a parameter, a buffer-derived constant or a graph tensor, and whether its output needs a gradient.

Settings that matter (measured, see docs/tracer.md): example sizes must be ≥ 2 (torch specialises 0 and 1);
a bound on a size (``T ≤`` a position table) must be given, because meta tensors never check indices;
``run_decompositions()`` is not used (it loses ``linear``/``matmul`` structure and doubles the time).
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Mapping

import sympy

from ..errors import CostModelError
from ..symbols import symbol

#: torch dtype name → costmodel dtype name.
DTYPES = {
    "float32": "fp32",
    "float64": "fp64",
    "bfloat16": "bf16",
    "float16": "fp16",
    "int64": "int64",
    "int32": "int32",
    "int16": "int32",
    "int8": "int8",
    "uint8": "int8",
    "bool": "bool",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "complex64": "fp64",
}

#: ATen ops whose outputs never need a gradient, whatever their inputs need.
NONDIFF = {
    "detach.default",
    "detach_.default",
    "argmax.default",
    "argmin.default",
    "sym_size.int",
    "sym_numel.default",
    "zeros_like.default",
    "ones_like.default",
    "empty_like.default",
    "full_like.default",
    "rand_like.default",
    "randn_like.default",
    "new_zeros.default",
    "new_ones.default",
    "new_empty.default",
    "new_full.default",
    "bernoulli.p",
    "lift_fresh_copy.default",
    "_assert_tensor_metadata.default",
}


def target_name(target: object) -> str:
    """``"linear.default"`` for an ATen overload, ``"ns::op.overload"`` for a custom op, else the name."""
    import torch  # deferred: torch is optional, imported only when tracing

    if isinstance(target, torch._ops.OpOverload):
        name = f"{target._overloadpacket.__name__}.{target._overloadname}"
        return name if target.namespace == "aten" else f"{target.namespace}::{name}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"hop::{target.__name__}"
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target))


def _flatten(x: object):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x


def inline_regions(gm) -> set[str]:
    """Inline ``wrap_with_set_grad_enabled`` regions (a ``torch.no_grad()`` block in the model's code) into
    the graph; the names of the nodes that ran without gradients."""
    import torch  # deferred: torch is optional, imported only when tracing

    g, no_grad = gm.graph, set()
    for node in list(g.nodes):
        if node.op != "call_function" or target_name(node.target) != "hop::wrap_with_set_grad_enabled":
            continue
        enabled, sub_node, *args = node.args
        sub = getattr(gm, sub_node.target)
        env = dict(zip([n for n in sub.graph.nodes if n.op == "placeholder"], args))
        outs = ()
        with g.inserting_before(node):
            for n in sub.graph.nodes:
                if n.op == "placeholder":
                    continue
                if n.op == "output":
                    outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else (n.args[0],)
                    break
                if n.op == "get_attr":  # a constant of the region: lift it onto the outer module
                    name = f"{sub_node.target}_{n.target}"
                    setattr(gm, name, getattr(sub, n.target))
                    copy = g.get_attr(name)
                    copy.meta = dict(n.meta)
                else:
                    copy = g.node_copy(n, env.__getitem__)
                env[n] = copy
                if not enabled:
                    no_grad.add(copy.name)
        outs = [env.get(o, o) if isinstance(o, torch.fx.Node) else o for o in outs]
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(outs[user.args[1]])
                g.erase_node(user)
        if node.users:
            node.replace_all_uses_with(outs[0])
        g.erase_node(node)
        g.erase_node(sub_node) if not sub_node.users else None
    return no_grad


#: Characters of torch's message a trace error keeps (its suggested fixes are near the end of a few dozen lines).
MAX_MESSAGE = 8000


def export_program(
    module,
    inputs: Mapping[str, object],
    dynamic: Mapping[str, Mapping[int, str]],
    ranges: Mapping[str, tuple[int | None, int | None]] | None = None,
):
    """``torch.export.export(module, (), inputs)`` with the named dimensions of ``dynamic`` symbolic.

    ``dynamic``: input name → {dimension: symbol name}; one name used twice is one size. ``ranges``:
    symbol name → (min, max), either ``None``. Raises :class:`CostModelError` with torch's reason when
    export fails (a data-dependent branch, a guard torch cannot prove...).
    """
    import torch  # deferred: torch is optional, imported only when tracing
    from torch.export import Dim  # deferred: torch is optional, imported only when tracing

    unknown = [k for k in dynamic if k not in inputs]
    if unknown:
        raise CostModelError(
            f"trace: dynamic names input {unknown[0]!r}, which is not an example input; "
            f"inputs: {', '.join(inputs) or 'none'}"
        )
    dims: dict[str, object] = {}
    shapes: dict[str, dict[int, object]] = {}
    for name, spec in dynamic.items():
        x = inputs[name]
        if not isinstance(x, torch.Tensor):
            raise CostModelError(f"trace: input {name!r} is {type(x).__name__}; only tensors have dynamic sizes")
        shapes[name] = {}
        for axis, sym in spec.items():
            if not isinstance(axis, int) or not -x.dim() <= axis < x.dim():
                raise CostModelError(f"trace: input {name!r} has {x.dim()} dimensions; received dimension {axis!r}")
            if not isinstance(sym, str) or not sym.isidentifier():
                raise CostModelError(
                    f"trace: dimension {axis} of {name!r} must be named by a symbol such as "
                    f"'B' or 'T', received {sym!r}"
                )
            if x.shape[axis] < 2:
                raise CostModelError(
                    f"trace: input {name!r} has size {x.shape[axis]} in dimension {axis} "
                    f"({sym}); expected an example size of at least 2 (torch specialises 0 and 1)"
                )
            low, high = (ranges or {}).get(sym, (None, None))
            kw = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
            dims.setdefault(sym, Dim(sym, **kw))
            shapes[name][axis % x.dim()] = dims[sym]
    dynamic_shapes = {name: shapes.get(name) for name in inputs} if dims else None
    import contextlib  # torch logs a failing meta kernel's traceback (17 lines) and prints the graph of a
    import io  # data-dependent branch on stderr before raising: the one-line error says why

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    # a transformers model left at use_cache=True returns a cache object torch.export cannot output: counting
    # needs no cache, so it is turned off for the export and put back after
    config = getattr(module, "config", None)
    cached = getattr(config, "use_cache", None) is True
    if cached:
        config.use_cache = False
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ep = torch.export.export(module, (), dict(inputs), dynamic_shapes=dynamic_shapes, strict=False)
    except CostModelError:
        raise
    except Exception as exc:  # torch's message kept whole (its "Suggested fixes" too), bounded
        lines = [ln.rstrip() for ln in str(exc).strip().splitlines() if ln.strip()]
        why = "\n".join(lines)[:MAX_MESSAGE] if lines else type(exc).__name__
        hint = (
            "; a cache in the output: pass use_cache=False (or set model.config.use_cache = False)"
            if "Cache" in why and "not a known type" in why
            else ""
        )
        raise CostModelError(
            f"trace: torch.export could not export {type(module).__name__} with "
            f"dynamic {sorted(dims)}{hint}: {type(exc).__name__}: {why}"
        ) from None
    finally:
        logging.disable(previous)
        if cached:
            config.use_cache = True
    return Program(ep, module, dynamic)


class Program:
    """An exported program and what the tracer reads off it, node by node (by fx node name)."""

    def __init__(self, ep, module, dynamic: Mapping[str, Mapping[int, str]]) -> None:
        import torch  # deferred: torch is optional, imported only when tracing

        self.ep = ep
        self.graph = ep.graph
        self.nodes = {n.name: n for n in ep.graph.nodes}
        sig = ep.graph_signature
        self.user_inputs = list(sig.user_inputs)
        # parameters: deduplicated by tensor identity (a tied weight appears under two names)
        named = dict(module.named_parameters(remove_duplicate=False))
        first: dict[int, str] = {}
        self.params: dict[str, str] = {}  # placeholder → canonical fully qualified name
        self.param_tensors: dict[str, object] = {}
        for placeholder, fqn in sig.inputs_to_parameters.items():
            tensor = named.get(fqn, ep.state_dict.get(fqn))
            canonical = first.setdefault(id(tensor), fqn)
            self.params[placeholder] = canonical
            self.param_tensors[canonical] = tensor
        self.constants = set(sig.inputs_to_buffers) | set(getattr(sig, "inputs_to_lifted_tensor_constants", {}))
        self.no_grad = inline_regions(ep.graph_module)
        self.nodes = {n.name: n for n in ep.graph.nodes}
        vals = [n.meta["val"] for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
        self.fake_mode = torch._guards.detect_fake_mode(vals)
        self.subs = self._symbols(dynamic)

    def _symbols(self, dynamic: Mapping[str, Mapping[int, str]]) -> dict[sympy.Symbol, sympy.Expr]:
        """torch's size symbols → costmodel's, read off the inputs' fake shapes."""
        import torch  # deferred: torch is optional, imported only when tracing

        subs: dict[sympy.Symbol, sympy.Expr] = {}
        for name, spec in dynamic.items():
            val = self.nodes[name].meta["val"]
            for axis, sym in spec.items():
                size = val.shape[axis]
                expr = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))
                if not isinstance(expr, sympy.Symbol):
                    raise CostModelError(
                        f"trace: torch.export specialised dimension {axis} of input {name!r} "
                        f"({sym}) to {expr}; the model's code fixes that size (a branch or an "
                        "assertion on it), so it cannot be symbolic"
                    )
                if expr in subs and subs[expr] != symbol(sym):
                    raise CostModelError(
                        f"trace: {sym} and {subs[expr]} are the same size in the exported "
                        "graph; name them with one symbol"
                    )
                subs[expr] = symbol(sym)
        return subs

    # -- what a node is ----------------------------------------------------------------------------

    def val(self, node) -> object:
        """A node's fake value; of an op with several outputs (``topk``, ``split``), the first."""
        v = node.meta.get("val") if hasattr(node, "meta") else None
        if isinstance(v, (list, tuple)) and v and hasattr(v[0], "untyped_storage"):
            return v[0]
        return v

    def is_tensor(self, node) -> bool:
        import torch  # deferred: torch is optional, imported only when tracing

        return isinstance(self.val(node), torch.Tensor)

    def expr(self, size: object) -> sympy.Expr:
        """A size (int or SymInt) as a sympy expression of costmodel's symbols."""
        import torch  # deferred: torch is optional, imported only when tracing

        if isinstance(size, torch.SymInt):
            e = sympy.sympify(size.node.expr).xreplace(self.subs)
        else:
            e = sympy.Integer(int(size))
        stray = {s for s in e.free_symbols if s not in self.subs.values()}
        if stray:
            raise CostModelError(
                f"trace: a size depends on the data ({e}: {', '.join(map(str, stray))} is an "
                "unbacked or unnamed size); costs must be functions of the named sizes only"
            )
        return e

    def shape(self, node) -> tuple[sympy.Expr, ...]:
        return tuple(self.expr(s) for s in self.val(node).shape)

    def numel(self, tensor) -> sympy.Expr:
        return sympy.Mul(*(self.expr(s) for s in tensor.shape))

    def dtype(self, node_or_tensor) -> str:
        v = self.val(node_or_tensor) if hasattr(node_or_tensor, "meta") else node_or_tensor
        name = str(v.dtype).removeprefix("torch.")
        if name not in DTYPES:
            raise CostModelError(f"trace: tensors of dtype {name} are not supported; known: {sorted(DTYPES)}")
        return DTYPES[name]

    def storage(self, node_or_tensor) -> int:
        v = self.val(node_or_tensor) if hasattr(node_or_tensor, "meta") else node_or_tensor
        return v.untyped_storage()._cdata

    def module_path(self, node) -> str:
        """The innermost nn.Module path of a node (``model.layers.0.self_attn.q_proj``), ``""`` at the top."""
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            return ""
        path = list(stack.values())[-1][0]
        path = re.sub(r"^L\['self'\]\.?", "", path)
        return re.sub(r"\[(\d+)\]", r".\1", path).lstrip(".")

    def requires_grad(self) -> dict[str, bool]:
        """Per node: whether autograd gives its output a gradient (torch's rule, for one forward)."""
        import torch  # deferred: torch is optional, imported only when tracing

        rg: dict[str, bool] = {}
        for n in self.graph.nodes:
            v = self.val(n)
            if n.op == "placeholder":
                if n.name in self.params:
                    rg[n.name] = bool(self.param_tensors[self.params[n.name]].requires_grad)
                else:
                    rg[n.name] = n.name in self.user_inputs and isinstance(v, torch.Tensor) and v.requires_grad
                continue
            if n.op != "call_function":
                continue
            is_float = any(
                isinstance(x, torch.Tensor) and (x.dtype.is_floating_point or x.dtype.is_complex) for x in _flatten(v)
            )
            name = target_name(n.target)
            reads = [a for a in n.all_input_nodes if rg.get(a.name, False)]
            rg[n.name] = is_float and name not in NONDIFF and bool(reads) and n.name not in self.no_grad
        return rg
