"""Trace a PyTorch module into a costmodel graph: ``torch.export`` with symbolic sizes, ATen ops → costmodel ops.

torch is optional (``pip install costmodel[torch]``) and imported only inside these functions.

Usage (``model`` an ``nn.Module`` built on the meta device)::

    m = costmodel.trace(model, {"input_ids": torch.zeros(2, 16, dtype=torch.long, device="meta")},
                        dynamic={"input_ids": {0: "B", 1: "T"}})
    costmodel.estimate(m, batch=4, seq=128)["flops"]["matmul"]["training"]   # a number
    costmodel.derive(m)["expressions"]["flops.matmul.forward"]                # a formula in B and T

The pieces: :mod:`.export` (export and read the program), :mod:`.aten` with :mod:`.ops_dense` and
:mod:`.ops_generic` (the op table), :mod:`.saved` (what autograd keeps, read off torch), :mod:`.fold`
(repeated layers), :mod:`.build` (writing the graph), :mod:`.recover` (formulas in a config's sizes),
:mod:`.hf` (transformers configs). See docs/tracer.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

from ..errors import CostModelError
from ..families import Family, Model
from ..symbols import B, symbol


@dataclass
class Traced:
    """One export, read and planned, before it is written: what formula recovery compares across configs."""

    name: str
    dtype: str
    read: object  # aten.Read
    plan: object  # fold.Plan
    frozen: frozenset[str]
    bounds: dict[str, int] = field(default_factory=dict)  # symbol → the largest size export allows
    values: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    graph: object = None  # the graph already written (a fit of collapsed traces, :mod:`.collapse`), or None


def _check_supported(read, module_name: str) -> None:
    if read.unsupported:
        listed = "; ".join(
            f"{t if '::' in t or t == 'getitem' else 'aten.' + t} ({len(where)}×, e.g. in {where[0]})"
            for t, where in sorted(read.unsupported.items())
        )
        raise CostModelError(
            f"trace {module_name}: {len(read.unsupported)} ATen op(s) have no mapping to a "
            f"costmodel op, so nothing was counted: {listed}. See docs/tracer.md for what is "
            "mapped"
        )


def read_module(
    module,
    example_inputs: Mapping[str, object],
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    *,
    ranges: Mapping[str, tuple[int | None, int | None]] | None = None,
    name: str | None = None,
    fold: bool = True,
) -> Traced:
    """Export ``module`` and read it into a :class:`Traced` (see :func:`trace`)."""
    import torch  # deferred: torch is optional, imported only when tracing

    from . import ops_dense, ops_generic  # noqa: F401  (deferred: importing them fills the ATen table)
    from .aten import Reader  # deferred: the tracer's modules import each other
    from .export import export_program  # deferred: the tracer's modules import each other
    from .fold import plan  # deferred: the tracer's modules import each other

    name = name or type(module).__name__
    params = list(module.parameters())
    inputs = dict(example_inputs)
    if params and params[0].device.type != "meta":  # example inputs go where the module is
        inputs = {
            k: (
                torch.zeros(v.shape, dtype=v.dtype, device=params[0].device)
                if isinstance(v, torch.Tensor) and v.device.type == "meta"
                else v
            )
            for k, v in inputs.items()
        }
    t0 = time.perf_counter()
    prog = export_program(module, inputs, dynamic or {}, ranges)
    t1 = time.perf_counter()
    read = Reader(prog).read()
    _check_supported(read, name)
    frozen = frozenset(fqn for fqn, p in prog.param_tensors.items() if not p.requires_grad)
    plan_ = plan(read.items, lambda fx: _resolve(read.alias, fx), fold)
    floats = [p.dtype for p in params if p.dtype.is_floating_point]
    from .export import DTYPES  # deferred: the tracer's modules import each other

    dtype = DTYPES.get(str(floats[0]).removeprefix("torch."), "fp32") if floats else "fp32"
    bounds: dict[str, int] = {}
    env = prog.fake_mode.shape_env
    for torch_sym, sym in prog.subs.items():
        upper = env.var_to_range[torch_sym].upper if torch_sym in env.var_to_range else None
        if upper is not None and getattr(upper, "is_finite", False) and upper.is_Integer:
            bounds[str(sym)] = int(upper)
    values = {}
    for spec_name, spec in (dynamic or {}).items():
        for axis, sym in spec.items():
            s = symbol(sym)
            if s != B:
                values.setdefault(s, bounds.get(sym, int(inputs[spec_name].shape[axis])))
    info = {
        "module": type(module).__name__,
        "export_s": round(t1 - t0, 3),
        "read_s": round(time.perf_counter() - t1, 3),
        "unused_parameters": dict(read.unused_params),
        "aten_nodes": len(prog.graph.nodes),
    }
    return Traced(name, dtype, read, plan_, frozen, bounds, values, info)


def _resolve(alias: Mapping[str, str], fx: str) -> str:
    while fx in alias:
        fx = alias[fx]
    return fx


def write(traced: Traced) -> nx.DiGraph:
    """The costmodel graph of a :class:`Traced` (sizes may be numbers or expressions)."""
    from ..symbols import symbol as sym_  # deferred: the tracer's modules import each other
    from .build import Writer  # deferred: the tracer's modules import each other
    from .kinds import register  # deferred: the tracer's modules import each other

    register()
    if traced.graph is not None:  # written already: its bounds and the trace's facts added
        G = traced.graph
        for name, upper in traced.bounds.items():
            G.graph.setdefault("constraints", []).append(
                (sym_(name) <= upper, f"traced with {name} ≤ {upper} (the range torch.export was given)")
            )
        G.graph["traced"] = {**traced.info, "folded": dict(G.graph.get("traced", {}).get("folded", {}))}
        return G
    w = Writer(traced.name, traced.dtype, traced.read.alias, traced.plan, lambda fqn: fqn in traced.frozen)
    G = w.write()
    for name, upper in traced.bounds.items():
        w.b.require(sym_(name) <= upper, f"traced with {name} ≤ {upper} (the range torch.export was given)")
    G.graph["traced"] = {**traced.info, "folded": {r.block: r.reps for r in traced.plan.segments if hasattr(r, "reps")}}
    return G


def _from_factory(spec: str) -> tuple:
    """``path/to/file.py:factory``: run the file (it is executed: only trust your own) and call the factory,
    which returns ``(module, example_inputs)`` or ``(module, example_inputs, dynamic)``."""
    from ..families import load_builder  # deferred: the tracer's modules import each other

    made = load_builder(spec).build()
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[1], Mapping):
        raise CostModelError(
            f"trace {spec!r}: the factory returned {type(made).__name__}; expected (module, "
            "example_inputs) or (module, example_inputs, dynamic), inputs a dict by name"
        )
    return made if len(made) == 3 else (*made, None)


def dynamic_from(names: str, example_inputs: Mapping[str, object]) -> dict[str, dict[int, str]]:
    """``"B,T"``: dimension 0 of every tensor input is B, dimension 1 is T (where the input has it)."""
    symbols = [n.strip() for n in names.split(",") if n.strip()]
    return {
        k: {i: sym for i, sym in enumerate(symbols[: v.dim()])}
        for k, v in example_inputs.items()
        if hasattr(v, "dim") and v.dim() > 0
    }


def trace(
    module,
    example_inputs: Mapping[str, object] | None = None,
    dynamic: Mapping[str, Mapping[int, str]] | str | None = None,
    *,
    ranges: Mapping[str, tuple[int | None, int | None]] | None = None,
    name: str | None = None,
    fold: bool = True,
    t_step: int | None = 16,
) -> Model:
    """Trace ``module`` into a costmodel :class:`~costmodel.families.Model` with symbolic sizes.

    Parameters
    ----------
    module:
        A ``torch.nn.Module``, best built on the meta device (``with torch.device("meta"): ...``), or
        ``"path/to/file.py:factory"``, a function returning ``(module, example_inputs[, dynamic])`` (the
        file is executed: only load files you trust).
    example_inputs:
        Keyword inputs of ``module.forward`` (``{"input_ids": ids}``); sizes named in ``dynamic`` must be
        at least 2 in the example (torch specialises 0 and 1).
    dynamic:
        Input → {dimension: symbol}: ``{"input_ids": {0: "B", 1: "T"}}``, or ``"B,T"`` for the leading
        dimensions of every tensor input. ``B`` and ``T`` are costmodel's batch and sequence; any other
        name becomes a symbol of that name.
    ranges:
        Symbol → (min, max) given to ``torch.export.Dim``; a max is also a constraint of the graph (e.g.
        ``T`` within a position table: meta tensors never check indices, so export cannot find it).
    fold:
        Fold structurally identical layers into one block with a count.
    t_step:
        When torch.export cannot keep T symbolic ("Constraints violated (T)"), export at four multiples of
        ``t_step`` and fit every size exactly in T, checked at a fifth (:mod:`.over_t`; the model's ``notes``
        say so); a multiple of the model's chunk. None: fail instead.

    Returns a model every verb accepts (``estimate``, ``derive``, ``sweep``, ``roofline``, ``report``).
    An ATen op without a mapping is an error naming every such op; nothing is counted as zero.
    """
    if isinstance(module, str):
        module, made_inputs, made_dynamic = _from_factory(module)
        example_inputs = made_inputs if example_inputs is None else example_inputs
        dynamic = made_dynamic if dynamic is None else dynamic
    import torch  # deferred: the tracer imports torch only inside its functions

    if not isinstance(module, torch.nn.Module):  # a factory's (42, {...}): one line, not a trace's traceback
        raise CostModelError(f"trace: expected a torch.nn.Module to trace, received {type(module).__name__}")
    if example_inputs is None:
        raise CostModelError("trace: expected example inputs, a dict of keyword inputs of the module's forward")
    if isinstance(dynamic, str):
        dynamic = dynamic_from(dynamic, example_inputs)
    try:
        try:
            traced = read_module(module, example_inputs, dynamic, ranges=ranges, name=name, fold=fold)
        except CostModelError as exc:
            narrowed = _narrowed(str(exc), ranges)
            if narrowed is None:
                raise
            traced = read_module(module, example_inputs, dynamic, ranges=narrowed, name=name, fold=fold)
            traced.info["narrowed"] = {k: v[1] for k, v in narrowed.items() if v != (ranges or {}).get(k)}
    except CostModelError as exc:
        if t_step is None or not _fails_on_t(str(exc), dynamic or {}):
            raise
        from .over_t import trace_over_t  # deferred: only a module torch cannot export with a symbolic T

        traced = trace_over_t(
            module,
            example_inputs,
            dynamic,
            ranges=ranges,
            name=name,
            fold=fold,
            step=t_step,
            why=str(exc),
            read_module=read_module,
            write=write,
        )
    G = write(traced)
    notes = tuple(
        f"{k} at most {v}: torch.export refuses {k} = {v + 1} (a guard {k} != {v + 1}), so its range was narrowed by one"
        for k, v in traced.info.get("narrowed", {}).items()
    )
    if "fixed_T" in traced.info:
        from .over_t import note  # deferred: as above

        notes = (*notes, note(G, t_step))
    about = f"traced from {traced.info['module']} with torch.export ({traced.info['aten_nodes']} ATen nodes)"
    family = Family(f"traced:{traced.name}", lambda: G, about)
    return Model(traced.name, G, dict(traced.values), family, notes=notes)


def _narrowed(message: str, ranges: Mapping[str, tuple[int | None, int | None]] | None):
    """``ranges`` with a maximum one less where torch's only complaint is a guard ``T != maximum`` (a module that
    fails only at the edge of its position table, gpt_neo's 4096), or None."""
    import re  # deferred: only a failed export asks

    guards = re.findall(r"satisfy the generated guard (.+?)\.\n", message)
    if not guards or not ranges:
        return None
    out = dict(ranges)
    for guard in guards:
        edge = re.fullmatch(r"L\['\w+'\]\.size\(\)\[\d+\] != (\d+)", guard.strip())
        hit = [k for k, (lo, hi) in out.items() if edge and hi == int(edge.group(1))]
        if not hit:
            return None
        out[hit[0]] = (out[hit[0]][0], out[hit[0]][1] - 1)
    return out


def _fails_on_t(message: str, dynamic: Mapping[str, Mapping[int, str]]) -> bool:
    """Whether an export failed on the sequence length: T is named, and torch could not keep it symbolic (a
    constraint violated, a dimension specialised, or any other failure of the export itself)."""
    named = any(sym == "T" for spec in dynamic.values() for sym in spec.values())
    return named and ("torch.export could not export" in message or "torch.export specialised" in message)


__all__ = ["trace", "read_module", "write", "Traced"]
