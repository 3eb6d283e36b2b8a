"""When torch.export cannot keep the sequence length symbolic: export at several fixed T and fit T back exactly.

Some modules fail ``torch.export`` with T symbolic ("Constraints violated (T)"): chunked code that pads T to a
multiple of a chunk, a guard torch cannot prove for every T (``topk(min(2048, T))``), a position table sliced
by T. Each of them exports at a fixed T. Every size in such a trace is then a number that is a fixed function of
T, and costs are sums of products of sizes, so :func:`trace_over_t` exports at :data:`FIT` multiples
``T = step·k`` (:func:`lengths_for`; B stays symbolic), checks that the traces have one structure op by op, fits each size's
coefficients (a polynomial in B) exactly as a polynomial in T of degree at most :data:`DEGREE`
(:func:`~.recover.fit_across`, the fit :mod:`.recover` uses for a config's sizes) and checks every fit at
:data:`CHECK` more multiples, which the fit did not see. A size no such polynomial reproduces is an
error naming it, never a guess.

What the fit cannot see, the note says: the formula is exact at the T it was fitted and checked at, and for T
a multiple of ``step`` in between; past them a size that is piecewise in T (a ``min`` with a constant, a chunk
padding) may differ. ``step`` is a multiple of the model's chunk (:func:`~.hf.chunk_of` for a transformers
config), so a padding to a chunk is exact at every fitted T.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import sympy

from ..errors import CostModelError
from ..symbols import T

#: T at this many multiples of the step is fitted, at :data:`CHECK` more the fit is checked: four points fix a
#: polynomial of three terms (fit_sparse needs one more point than terms), the check is a fifth.
FIT = 4
CHECK = 1
#: The largest power of T a fitted size may hold (:func:`~.fit.fit_sparse` tries 1, T, T² and 1/T).
DEGREE = 2


def resized(inputs: Mapping[str, object], dynamic: Mapping[str, Mapping[int, str]], seq: int) -> dict:
    """``inputs`` with every dimension ``dynamic`` names T of length ``seq`` (new zero tensors, same dtype and
    device: the tracer reads shapes, not values)."""
    import torch  # deferred: torch is optional, imported only when tracing

    out = dict(inputs)
    for name, spec in dynamic.items():
        axes = [a for a, sym in spec.items() if sym == "T"]
        x = inputs[name]
        if axes and isinstance(x, torch.Tensor):
            shape = list(x.shape)
            for a in axes:
                shape[a] = seq
            out[name] = torch.zeros(shape, dtype=x.dtype, device=x.device)
    return out


def lengths_for(module, inputs: Mapping[str, object], step: int, strict: bool = False) -> list[int]:
    """The fixed T to export at: ``step·k`` for k = 2, 3, ..., skipping any length (or count of chunks k) that is
    also the size of a parameter's or an input's dimension (``strict``: or one less) (at T = d_head = 16 the tracer cannot tell a transpose
    of two axes of one size from a view, and the traces' structures differ)."""
    import torch  # deferred: torch is optional, imported only when tracing

    taken = {int(n) for p in module.parameters() for n in p.shape}
    taken |= {int(n) for x in inputs.values() if isinstance(x, torch.Tensor) for n in x.shape}
    if strict:  # one less too: a convolution's padding of k - 1 is an axis (mamba2's 3 beside its 3 chunks)
        taken |= {n - 1 for n in taken}
    out, k = [], 2
    while len(out) < FIT + CHECK:
        if step * k not in taken and k not in taken:  # T/step is the count of chunks: an axis too
            out.append(step * k)
        k += 1
    return out


def trace_over_t(
    module,
    inputs: Mapping[str, object],
    dynamic: Mapping[str, Mapping[int, str]],
    *,
    ranges: Mapping[str, tuple[int | None, int | None]] | None,
    name: str,
    fold: bool,
    step: int,
    why: str,
    read_module,
    write=None,
):
    """The :class:`~.Traced` of ``module`` with T fitted from exports at fixed T (see the module), and the note
    saying so; ``why`` is torch's reason the symbolic export failed (quoted in the note and in any error);
    ``read_module``: :func:`costmodel.tracer.read_module`, the export of one trace, and ``write``:
    :func:`costmodel.tracer.write`, its graph (given: this module is imported by the package, not the other way
    round). Where the traces differ in structure (a loop over positions), ``write`` given: each trace is written,
    its ops summed by kind and shape, and their sizes and counts fitted in T (:mod:`.collapse`)."""
    from .across import fit_across, structure_difference  # deferred: only a module export cannot keep T symbolic

    fixed = {k: {a: s for a, s in spec.items() if s != "T"} for k, spec in dynamic.items()}
    others = {k: v for k, v in (ranges or {}).items() if k != "T"}
    limit = (ranges or {}).get("T", (None, None))[1]

    def export_at(lengths: list[int]) -> list:
        out = []
        for seq in lengths:
            try:
                out.append(
                    read_module(module, resized(inputs, dynamic, seq), fixed, ranges=others, name=name, fold=fold)
                )
            except CostModelError as exc:
                raise CostModelError(f"{why}; exported at fixed T = {seq} instead, that failed too: {exc}") from None
        return out

    lengths = lengths_for(module, inputs, step)
    traced = export_at(lengths)
    points = [{"T": t} for t in lengths]
    difference = structure_difference(traced, points, name, "T")
    if difference is not None and write is not None:
        from .collapse import fit_collapsed  # deferred: only traces that differ in structure

        try:
            graph = fit_collapsed([write(t) for t in traced], lengths, FIT, name or "the module")
        except CostModelError as exc:
            strict = lengths_for(module, inputs, step, strict=True)
            if strict == lengths:
                raise CostModelError(
                    f"{why}; exported at T = {', '.join(map(str, lengths))} instead: {difference}; "
                    f"summed by kind and shape instead: {exc}"
                ) from None
            # two distinct ops can be one at a T where a count of chunks meets a size: again, clear of them
            lengths, traced = strict, export_at(strict)
            try:
                graph = fit_collapsed([write(t) for t in traced], lengths, FIT, name or "the module")
            except CostModelError as again:
                raise CostModelError(
                    f"{why}; exported at T = {', '.join(map(str, lengths))} instead: {difference}; "
                    f"summed by kind and shape instead: {again}"
                ) from None
        result = copy.copy(traced[0])
        result.graph = graph
        result.bounds = {k: v for k, v in traced[0].bounds.items() if k != "T"}
        return _finish(result, lengths, step, limit, "collapsed")
    result, missing = fit_across(traced, points, ["T"], FIT, name, "T")
    if missing:
        raise CostModelError(
            f"{why}; exported at T = {', '.join(map(str, lengths))} instead, {len(missing)} size(s) are no "
            f"polynomial in T of degree at most {DEGREE} there: " + "; ".join(missing[:3])
        )
    return _finish(result, lengths, step, limit, "op by op")


def _finish(result, lengths: list[int], step: int, limit: int | None, how: str):
    """``result`` bounded by the position table, its T valued, and what the fit did recorded."""
    if limit is not None:
        result.bounds = {**result.bounds, "T": limit}  # the constraint T <= limit, as a symbolic export's range
    result.values = {**result.values, T: limit if limit is not None else lengths[-1]}
    result.info = {
        **result.info,
        "fixed_T": {"fitted": lengths[:FIT], "checked": lengths[FIT:], "step": step, "fit": how},
    }
    return result


def note(G, step: int) -> str:
    """What the fit did, with the degree in T of the forward FLOPs it gives (read off the written graph)."""
    from ..graph.analysis import totals  # deferred: the tracer's modules import the engine lazily

    info = G.graph["traced"]["fixed_T"]
    degree = sympy.degree(sympy.expand(totals(G).forward.flops), T)
    info["flops_degree"] = int(degree)
    fitted = ", ".join(map(str, info["fitted"]))
    checked = ", ".join(map(str, info["checked"]))
    collapsed = info.get("fit") == "collapsed"
    how = (
        "; the traces differ op by op (a loop over positions or chunks), so each one's ops were summed by kind "
        "and shape and every size and count fitted (the totals are exact there, data flow between the loop's "
        "iterations is not kept)"
        if collapsed
        else ""
    )
    return (
        f"T fitted: torch.export cannot keep T symbolic here, so it exported at T = {fitted} and fitted every "
        f"size{' and count' if collapsed else ''} exactly as a polynomial in T (degree at most {DEGREE}; the forward FLOPs are of degree {degree} "
        f"in T), checked at T = {checked}; exact at those T, and at any T where each size is the same "
        f"polynomial (a padding to a chunk of {step} or a min with a constant may differ between or past them)"
        f"{how}"
    )
