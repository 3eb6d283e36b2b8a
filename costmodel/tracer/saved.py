"""What autograd keeps for one traced op, read off torch itself rather than a hand-kept table.

The op is run once more on the export's own FakeTensors (symbolic shapes, no data), with the operands
that need a gradient in this graph marked so, under ``torch.autograd.graph.saved_tensors_hooks``. Each
tensor the hooks see is classified by its storage (FakeTensors keep storage identity: a view shares its
base's): an operand's (``"inputN"``), the output's, a parameter's or buffer's (not activation memory), or
a new tensor the op makes (``"own"``, with its symbolic size and dtype). This is exactly what
``saved_tensors_hooks`` measures on the meta device for a whole forward, op by op: derivative formulas
(``derivatives.yaml``) and composite decompositions (``at::matmul`` folding a non-contiguous operand into a
copy) included.
"""

from __future__ import annotations

from ..errors import CostModelError
from .export import target_name


def run_saving(prog, rg: dict[str, bool], node, args=None, kwargs=None) -> tuple[list, object]:
    """Run ``node``'s op on its fake values with gradients as in the graph; (saved tensors, output)."""
    import torch  # deferred: torch is optional, imported only when tracing

    schema = getattr(node.target, "_schema", None)
    mutated = bool(
        schema and schema.arguments and schema.arguments[0].alias_info and schema.arguments[0].alias_info.is_write
    )
    first = node.args[0] if node.args else None
    clones: dict[int, int] = {}  # storage of a clone made for an in-place op → the original's

    def value(a):
        v = a.meta.get("val")
        if not isinstance(v, torch.Tensor):
            return v
        t = v.detach()
        if v.dtype.is_floating_point or v.dtype.is_complex:
            t = t.requires_grad_(bool(rg.get(a.name, False)))
        if mutated and a is first:  # autograd refuses an in-place op on a leaf: work on a copy of it
            t = t.clone()
            clones[t.untyped_storage()._cdata] = v.untyped_storage()._cdata
        return t

    saved: list = []

    def pack(t):
        saved.append(t)
        return t

    with prog.fake_mode, torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        a = torch.fx.node.map_arg(node.args if args is None else args, value)
        k = torch.fx.node.map_arg(node.kwargs if kwargs is None else kwargs, value)
        try:
            out = node.target(*a, **k)
            saved = [
                (t, clones.get(t.untyped_storage()._cdata)) if isinstance(t, torch.Tensor) else (t, None) for t in saved
            ]
        except Exception as exc:  # an op fake tensors cannot run: say which, never guess what it saves
            raise CostModelError(
                f"trace: cannot tell what {target_name(node.target)} ({node.name}) keeps for "
                f"backward: running it on fake tensors failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}"
            ) from None
    return saved, out


#: Ops whose derivative keeps nothing (``derivatives.yaml``: sums, negation, concatenation, copies).
KEEP_NOTHING = {
    "add.Tensor",
    "add.Scalar",
    "sub.Tensor",
    "sub.Scalar",
    "rsub.Scalar",
    "neg.default",
    "cat.default",
    "stack.default",
    "sum.dim_IntList",
    "sum.default",
    "mean.dim",
    "mean.default",
    "clone.default",
    "constant_pad_nd.default",
    "pad.default",
    "flip.default",
    "roll.default",
    "repeat.default",
    "cumsum.default",
    "add_.Tensor",
    "sub_.Tensor",
    "tril.default",
    "triu.default",
}


def _key(prog, rg, node) -> tuple:
    """What a probe's answer depends on: the op, its arguments' sizes, strides, dtypes, gradients, aliasing."""
    import torch  # deferred: torch is optional, imported only when tracing

    storages: dict[int, int] = {}

    def arg(a):
        v = a.meta.get("val") if hasattr(a, "meta") else a
        if isinstance(v, torch.Tensor):
            sid = storages.setdefault(v.untyped_storage()._cdata, len(storages))
            return (
                "T",
                tuple(str(prog.expr(s)) for s in v.shape),
                tuple(str(prog.expr(s)) for s in v.stride()),
                str(v.dtype),
                bool(rg.get(a.name, False)),
                sid,
                str(v.storage_offset()),
            )
        if isinstance(v, torch.SymInt):
            return ("S", str(prog.expr(v)))
        return repr(v)

    args = torch.fx.node.map_aggregate(node.args, lambda a: arg(a))
    kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: arg(a))
    return (str(node.target), repr(args), repr(kwargs), bool(rg.get(node.name, False)))


_CACHE: dict[tuple, tuple] = {}


def saves_of(reader, node, data: list[str]) -> tuple[tuple, ...]:
    """What ``node``'s op keeps for backward (see :func:`probe`); cached per op and argument signature, so
    the layers of a deep model are probed once."""
    if not reader.rg.get(node.name, False) or target_name(node.target) in KEEP_NOTHING:
        return ()
    key = _key(reader.prog, reader.rg, node) + (tuple(reader.storage_of(n) == reader.prog.storage(node) for n in data),)
    if key not in _CACHE:
        kept: set = set()
        entries = probe(reader, node, data, kept)
        _CACHE[key] = (entries, tuple(sorted(kept)))
    entries, kept = _CACHE[key]
    reader.kept_outputs.update((node.name, k) for k in kept)
    return entries


def new_saved_shapes(reader, node) -> tuple[tuple, ...]:
    """Shapes and dtypes of the tensors ``node``'s op keeps that are none of its inputs' storage (a matmul's
    folded copy), cached like :func:`saves_of`."""
    import torch  # deferred: torch is optional, imported only when tracing

    prog = reader.prog
    key = ("new",) + _key(prog, reader.rg, node)
    if key not in _CACHE:
        saved, _ = run_saving(prog, reader.rg, node)
        known = {prog.storage(prog.nodes[n]) for n in (*prog.params, *prog.constants)}
        known |= {prog.storage(a) for a in node.all_input_nodes if prog.is_tensor(a)}
        out = []
        for t in saved:
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in known:
                known.add(t.untyped_storage()._cdata)
                out.append((tuple(prog.expr(x) for x in t.shape), prog.dtype(t)))
        _CACHE[key] = tuple(out)
    return _CACHE[key]


def probe(reader, node, data: list[str], kept: set) -> tuple[tuple, ...]:
    """``(name, source, dtype, elements)`` of each distinct storage ``node``'s op keeps for backward.

    ``data``: the fx nodes of the op's graph-tensor operands, in pattern order (``"inputN"`` is the N-th).
    Parameters, buffers and constants are not activations and are left out. Nothing for an op whose
    output needs no gradient (autograd records no backward node for it).
    """
    import torch  # deferred: torch is optional, imported only when tracing

    prog = reader.prog
    saved, out = run_saving(prog, reader.rg, node)
    skip = {prog.storage(prog.nodes[n]) for n in (*prog.params, *prog.constants)}
    skip |= {prog.storage(prog.nodes[n]) for n in reader.const if prog.is_tensor(prog.nodes[n])}
    by_storage = {}
    for i, name in enumerate(data):
        by_storage.setdefault(reader.storage_of(name), f"input{i}")
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    out_storage = outs[0].untyped_storage()._cdata if outs else None
    # a second output kept (topk's indices): charged to the node that holds it, where others read it too
    later = {o.untyped_storage()._cdata: k for k, o in enumerate(outs) if k}
    if node.target is not None and prog.is_tensor(node) and prog.storage(node) in by_storage:
        out_storage = None  # an in-place op: its output is input 0's storage
    entries: dict[int, tuple] = {}
    for t, original in saved:
        if not isinstance(t, torch.Tensor):
            continue
        sid = original or t.untyped_storage()._cdata
        if sid in skip or sid in entries:
            continue
        if sid in later:
            kept.add(later[sid])
            continue
        dtype = prog.dtype(t)
        if sid in by_storage:
            entries[sid] = (by_storage[sid], by_storage[sid], dtype, None)
        elif sid == out_storage:
            entries[sid] = ("output", "output", dtype, None)
        else:  # a tensor the op makes for its backward only (a folded copy, log-probabilities...)
            elements = prog.expr(t.untyped_storage().nbytes() // t.element_size())
            entries[sid] = (f"own{len(entries)}", "own", dtype, elements)
    return tuple(entries.values())
