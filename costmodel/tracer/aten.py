"""The ATen op table: one mapping function per ATen target, registered with :func:`maps`.

Like torch's ``flop_counter``: a registry keyed by target (``"linear.default"``, ``"add.Tensor"``), one
decorator to register, a target registered twice raises. A mapping function reads one fx node and adds
what it is to the :class:`Reader`: an op (:class:`~costmodel.tracer.ir.TOp`), an input (a factory's
output), or an alias (a tuple's element that is its op's output). A target nobody registered is collected;
:meth:`Reader.read` then raises one error naming every such target, so nothing is silently counted as zero.

The table (:mod:`.table`) is filled by :mod:`.ops_dense` (matmuls, attention, norms, softmax, lookups, the
loss) and :mod:`.ops_generic` (views, factories, element-wise ops, reductions, indexing), imported by
:func:`costmodel.tracer.trace` before a program is read; this module is the engine they share: classifying operands (a graph tensor, a parameter, a buffer-derived constant, a scalar) and
writing element-wise ops with broadcasting.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError
from .export import Program, target_name
from .ir import Operand, TInput, TOp
from .table import MAPPERS, MAPPERS_KEEP, weighted


@dataclass
class Read:
    """What a trace read: ops and inputs in graph order, aliases, outputs and what was left out."""

    items: list  # TOp and TInput, in graph order
    alias: dict[str, str]  # fx node → the fx node whose tensor it is
    outputs: list[str]
    unsupported: dict[str, list[str]] = field(default_factory=dict)  # target → module paths
    unused_params: dict[str, int] = field(default_factory=dict)


class Reader:
    """Reads an exported :class:`Program` into ops, one fx node at a time, through :data:`MAPPERS`."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.rg = prog.requires_grad()
        self.const: set[str] = set(prog.constants)  # buffers and what is computed from them alone
        self.param_of: dict[str, str] = {}  # parameter placeholders and their views → canonical name
        self.alias: dict[str, str] = {}
        self.items: list = []
        self.produced: dict[str, TOp | TInput] = {}
        self.unsupported: dict[str, list[str]] = {}
        self.ids = itertools.count()
        self.views_of: dict[str, object] = {}  # a list-of-views op (split) → the tensor it views
        self.kept_outputs: set[tuple[str, int]] = set()  # (op, k): its k-th output is kept for its backward
        self.const_operands: set[tuple[str, str]] = set()  # (node, operand): read as a constant (a mask)

    # -- operands -------------------------------------------------------------------------------------

    def resolve(self, node) -> object:
        name = getattr(node, "name", None)
        while name in self.alias:
            name = self.alias[name]
        return self.prog.nodes[name] if name is not None else node

    def role(self, a) -> str:
        """``"tensor"`` (a graph tensor), ``"param"``, ``"const"`` (buffer-derived), or ``"scalar"``."""
        if not hasattr(a, "meta") or not self.prog.is_tensor(a):
            return "scalar"
        a = self.resolve(a)
        if a.name in self.param_of:
            return "param"
        if a.name in self.const:
            return "const"
        if self.prog.val(a).dim() == 0 and not self.rg.get(a.name, False):
            return "scalar"  # a 0-dim constant (torch.zeros([]) in a mask fill): a number, not a tensor
        return "tensor"

    def tensors(self, node) -> list:
        """The tensor arguments of ``node`` (lists flattened), in order."""
        out = []
        for a in node.all_input_nodes:
            if self.prog.is_tensor(a):
                out.append(a)
        return out

    def fresh(self, shape: tuple[sympy.Expr, ...], prefix: str = "a") -> tuple[tuple[str, ...], dict]:
        dims = tuple(f"{prefix}{next(self.ids)}" for _ in shape)
        return dims, dict(zip(dims, shape))

    # -- what a node becomes -----------------------------------------------------------------------

    def add(self, op: TOp, keeps: bool = False) -> TOp:
        """Add ``op`` (detached where no gradient flows, unless it ``keeps`` a tensor for its producer)."""
        fx = self.prog.nodes.get(op.node.split("#")[0])  # an op the tracer adds (a fold copy) is named after one
        if not op.hint and fx is not None:
            op.hint = target_name(fx.target).split(".")[0].split("::")[-1].lstrip("_")
        if not op.module and fx is not None:
            op.module = self.prog.module_path(fx)
        if not self.rg.get(op.node, False) and not keeps:
            op.attrs["detached"] = True  # no gradient flows here: no backward, nothing saved
        self.items.append(op)
        self.produced[op.node] = op
        return op

    def input(self, node, hint: str = "") -> TInput:
        shape = self.prog.shape(node)
        dims, sizes = self.fresh(shape, "i")
        item = TInput(node.name, dims, sizes, self.prog.dtype(node), self.prog.module_path(node), hint or node.name)
        self.items.append(item)
        self.produced[node.name] = item
        return item

    def dims_of(self, node) -> tuple[str, ...]:
        """The axis ids of a graph tensor's producer output (a fresh copy is made per op by the callers)."""
        item = self.produced[self.resolve(node).name]
        return item.output if isinstance(item, TOp) else item.dims

    def operand(self, a, dims: tuple[str, ...]) -> Operand:
        """An operand for argument ``a``: a parameter by name, a graph tensor by its (resolved) node."""
        a = self.resolve(a)
        if a.name in self.param_of:
            return Operand(self.param_of[a.name], dims, weight=True)
        if a.name not in self.produced:  # a constant read where a tensor is needed (ids from a buffer)
            self.input(a, "constant")
        return Operand(a.name, dims)

    def pointwise_like(
        self, node, args: list, fn: str, *, kind: str | None = None, probe: bool = True, attrs: dict | None = None
    ) -> TOp | None:
        """An element-wise op over ``args`` broadcast to ``node``'s shape; constants and scalars are dropped.

        A parameter operand makes an ``aten`` op with a weight (the parameter is counted there; at most one
        per op). ``probe``: read what autograd keeps off torch (:func:`~costmodel.tracer.saved.saves_of`).
        """
        from .kinds import fn_name  # deferred: the tracer's modules import each other
        from .saved import saves_of  # deferred: the tracer's modules import each other

        out_shape = self.prog.shape(node)
        out, sizes = self.fresh(out_shape)
        operands, sources = [], []
        for a in args:
            role = self.role(a)
            if role in ("scalar", "const") or (node.name, self.resolve(a).name) in self.const_operands:
                continue
            shape = self.prog.shape(self.resolve(a))
            offset = len(out_shape) - len(shape)
            dims = []
            for j, s in enumerate(shape):
                k = offset + j
                if k >= 0 and sympy.expand(s - out_shape[k]) == 0:
                    dims.append(out[k])
                elif s != 1:
                    raise CostModelError(
                        f"trace: {node.name} ({target_name(node.target)}): operand {a.name} of "
                        f"shape {shape} does not broadcast to {out_shape}"
                    )
            operands.append(self.operand(a, tuple(dims)))
            sources.append(self.resolve(a).name)
        if not operands:  # computed from constants alone: a constant itself
            self.input(node, fn)
            return None
        all_attrs = {"fn": fn_name(fn), **{k: v for k, v in (attrs or {}).items() if v is not None}}
        op = TOp(node.name, kind or "aten_pointwise", operands, out, sizes, self.prog.dtype(node), attrs=all_attrs)
        weighted(op, self)
        self.add(op)
        if probe:
            op.attrs["saves"] = saves_of(self, node, op.inputs)
        return op

    def storage_of(self, name: str) -> int | None:
        """The storage of a graph tensor by its producer's name (an op the tracer adds has none of torch's)."""
        if name in self.prog.nodes:
            return self.prog.storage(self.resolve(self.prog.nodes[name]))
        if name.startswith("param#"):
            fqn = name.removeprefix("param#")
            return next((self.prog.storage(self.prog.nodes[p]) for p, f in self.prog.params.items() if f == fqn), None)
        return None

    def parameter_tensor(self, operand: Operand) -> Operand:
        """A parameter read as a tensor: made by a ``parameter`` op (once per parameter and shape)."""
        name = f"param#{operand.source}"
        if name not in self.produced:
            t = self.prog.param_tensors[operand.source]
            dims, sizes = self.fresh(tuple(sympy.Integer(int(x)) for x in t.shape) or (sympy.Integer(1),))
            from .export import DTYPES  # deferred: the tracer's modules import each other

            module, _, hint = operand.source.rpartition(".")
            self.rg[name] = bool(t.requires_grad)
            self.add(
                TOp(
                    name,
                    "parameter",
                    [Operand(operand.source, dims, weight=True)],
                    dims,
                    sizes,
                    DTYPES.get(str(t.dtype).removeprefix("torch."), "fp32"),
                    module=module,
                    hint=hint,
                )
            )
        return Operand(name, operand.dims)

    def moved(self, node, src) -> TOp:
        """An op that makes its output from one input's elements (pad, repeat, roll, tril): bytes, no FLOPs."""
        from .kinds import fn_name  # deferred: the tracer's modules import each other
        from .saved import saves_of  # deferred: the tracer's modules import each other

        dims, sizes = self.fresh(self.prog.shape(src))
        out, out_sizes = self.fresh(self.prog.shape(node))
        op = TOp(
            node.name,
            "aten",
            [self.operand(src, dims)],
            out,
            {**sizes, **out_sizes},
            self.prog.dtype(node),
            attrs={"fn": fn_name("copy")},
        )
        weighted(op, self)
        self.add(op)
        op.attrs["saves"] = saves_of(self, node, op.inputs)
        return op

    # -- the walk ------------------------------------------------------------------------------------

    def read(self) -> Read:
        outputs: list[str] = []
        for node in self.prog.graph.nodes:
            if node.op == "placeholder":
                if node.name in self.prog.params:
                    self.param_of[node.name] = self.prog.params[node.name]
                elif node.name in self.prog.user_inputs and self.prog.is_tensor(node):
                    self.input(node, node.name)
            elif node.op == "call_function":
                name = target_name(node.target)
                val = self.prog.val(node)
                if val is None and name.startswith("_assert"):
                    continue  # a check on metadata: no tensor, no cost
                if val is not None and not self.prog.is_tensor(node):
                    continue  # size arithmetic (SymInt, SymBool): no tensor
                if self.prog.is_tensor(node) and any(self.prog.expr(x) == 0 for x in val.shape):
                    self.const.add(node.name)  # an empty tensor (a zero-width slice): nothing to count
                    continue
                fn = MAPPERS.get(name)
                if fn is None:
                    self.unsupported.setdefault(name, []).append(self.prog.module_path(node) or node.name)
                    continue
                if (
                    all(self.role(a) == "const" for a in self.tensors(node))
                    and self.tensors(node)
                    and not MAPPERS_KEEP.get(name)
                ):
                    self.const.add(node.name)  # computed from buffers alone: a constant of the model
                    continue
                fn(self, node)
            elif node.op == "output":
                outputs = [a.name for a in node.all_input_nodes]
        unused = self._unused()
        self._partial()
        return Read(self.items, self.alias, outputs, self.unsupported, unused)

    def _partial(self) -> None:
        """A parameter whose first reader reads a slice of it (``scale.unbind(0)``, ``base.split(4)``: views that are the parameter): that op counts
        the slice and every later reader is tied to it, so the rest is a ``parameter`` op of its own right after
        it (counted, no cost), and the count is the parameter's ``numel``."""
        first: dict[str, int] = {}
        for i, op in enumerate(self.items):
            if isinstance(op, TOp) and op.weight is not None:  # a parameter op reads it whole: nothing left
                first.setdefault(op.weight.source, i)
        for fqn, i in sorted(first.items(), key=lambda kv: -kv[1]):  # from the end: an insert keeps earlier indices
            op, t = self.items[i], self.prog.param_tensors.get(fqn)
            if t is None:
                continue
            read = sympy.Mul(*(op.sizes[d] for d in op.weight.dims))
            if not read.is_Integer or int(read) >= t.numel():
                continue
            rest = self._parameter_op("rest", fqn, f"{fqn}#rest", (sympy.Integer(int(t.numel()) - int(read)),), t)
            self.items.insert(i + 1, rest)

    def _parameter_op(self, why: str, fqn: str, source: str, shape: tuple, t) -> TOp:
        """A ``parameter`` op (counted, no cost) of ``shape`` for the parameter ``fqn`` (its tensor ``t``), in
        its module's place: the rest of a sliced one (``why`` "rest") or one no op reads ("unused")."""
        from .export import DTYPES  # deferred: the tracer's modules import each other

        dims, sizes = self.fresh(shape)
        module, _, hint = fqn.rpartition(".")
        return TOp(
            f"{why}#{fqn}",
            "parameter",
            [Operand(source, dims, weight=True)],
            dims,
            sizes,
            DTYPES.get(str(t.dtype).removeprefix("torch."), "fp32"),
            module=module,
            hint=f"{hint}_{why}" if why == "rest" else f"{why}_{hint}",
            attrs={"detached": True},
        )

    def _unused(self) -> dict[str, int]:
        """Parameters no op reads: each becomes a ``parameter`` op in its module's place (so it is counted,
        and folds with its layer)."""
        from .fold import layer_key  # deferred: the tracer's modules import each other

        used = {p for op in self.items if isinstance(op, TOp) for p in op.owned}
        unused = {fqn: t for fqn, t in self.prog.param_tensors.items() if fqn not in used}
        for fqn, t in unused.items():
            shape = tuple(sympy.Integer(int(s)) for s in t.shape) or (sympy.Integer(1),)
            op = self._parameter_op("unused", fqn, fqn, shape, t)
            key = layer_key(op.module)
            at = len(self.items)
            if key is not None:  # right after the last op of its layer
                at = max(
                    (i + 1 for i, it in enumerate(self.items) if (layer_key(it.module) or ())[:2] == key[:2]),
                    default=at,
                )
            self.items.insert(at, op)
        return {fqn: int(t.numel()) for fqn, t in unused.items()}
