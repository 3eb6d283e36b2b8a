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
    import torch

    schema = getattr(node.target, "_schema", None)
    mutated = bool(schema and schema.arguments and schema.arguments[0].alias_info
                   and schema.arguments[0].alias_info.is_write)
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
            saved = [(t, clones.get(t.untyped_storage()._cdata)) if isinstance(t, torch.Tensor) else (t, None)
                     for t in saved]
        except Exception as exc:  # an op fake tensors cannot run: say which, never guess what it saves
            raise CostModelError(f"trace: cannot tell what {target_name(node.target)} ({node.name}) keeps for "
                                 f"backward: running it on fake tensors failed: {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
    return saved, out


def saves_of(reader, node, data: list[str]) -> tuple[tuple, ...]:
    """``(name, source, dtype, elements)`` of each distinct storage ``node``'s op keeps for backward.

    ``data``: the fx nodes of the op's graph-tensor operands, in pattern order (``"inputN"`` is the N-th).
    Parameters, buffers and constants are not activations and are left out. Nothing for an op whose
    output needs no gradient (autograd records no backward node for it).
    """
    import torch

    prog = reader.prog
    if not reader.rg.get(node.name, False):
        return ()
    saved, out = run_saving(prog, reader.rg, node)
    skip = {prog.storage(prog.nodes[n]) for n in (*prog.params, *prog.constants)}
    skip |= {prog.storage(prog.nodes[n]) for n in reader.const if prog.is_tensor(prog.nodes[n])}
    by_storage = {}
    for i, name in enumerate(data):
        by_storage.setdefault(prog.storage(reader.resolve(prog.nodes[name])), f"input{i}")
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    out_storage = outs[0].untyped_storage()._cdata if outs else None
    if node.target is not None and prog.is_tensor(node) and prog.storage(node) in by_storage:
        out_storage = None  # an in-place op: its output is input 0's storage
    entries: dict[int, tuple] = {}
    for t, original in saved:
        if not isinstance(t, torch.Tensor):
            continue
        sid = original or t.untyped_storage()._cdata
        if sid in skip or sid in entries:
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
