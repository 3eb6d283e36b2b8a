"""Sizes fitted across traces: several traces of one module (at sample configs, or at fixed sequence lengths) made
one symbolic trace, each size an exact fit in the varied names and checked on points the fit did not see.
:mod:`costmodel.tracer.recover` fits config sizes this way, :mod:`costmodel.tracer.over_t` the sequence length."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import sympy

from ..errors import CostModelError
from ..symbols import B, T, symbol
from .fit import fit_sparse
from .fold import Run
from .ir import AXIS_ATTRS, TInput, TOp, order_of


def _emitted(traced) -> list:
    """The items a Traced writes, in order (representative layers of folded runs included)."""
    out = []
    for seg in traced.plan.segments:
        if isinstance(seg, Run):
            out.extend(it for layer in seg.layers for it in layer)
        else:
            out.append(seg)
    return out


def _slots(traced) -> list[tuple[str, object]]:
    """Every size of a Traced, in a canonical order: (label, value)."""
    out = []
    for it in _emitted(traced):
        if isinstance(it, TInput):
            out += [(f"{it.module} {it.hint} axis {k}", it.sizes[d]) for k, d in enumerate(it.dims)]
            continue
        out += [(f"{it.module} {it.hint} axis {k}", it.sizes[d]) for k, d in enumerate(order_of(it))]
        out += [(f"{it.module} {it.hint} kept {s[0]}", s[3]) for s in it.attrs.get("saves", ()) if s[1] == "own"]
    out += [
        (f"block {seg.block} count", sympy.Integer(seg.reps)) for seg in traced.plan.segments if isinstance(seg, Run)
    ]
    out += [(f"bound of {k}", sympy.Integer(v)) for k, v in sorted(traced.bounds.items())]
    return out


def _structure(traced) -> list:
    items = _emitted(traced)
    index = {}
    for i, it in enumerate(items):
        index[it.node] = i

    def ref(src: str) -> object:
        while src in traced.read.alias or src in traced.plan.rep_of:
            src = traced.read.alias.get(src) or traced.plan.rep_of[src]
        return index.get(src, src)

    rows = []
    for it in items:
        if isinstance(it, TInput):
            rows.append(("input", it.dtype, len(it.dims)))
            continue
        pos = {d: k for k, d in enumerate(order_of(it))}
        attrs = tuple(
            sorted(
                (k, tuple(pos[d] for d in v) if k in AXIS_ATTRS and isinstance(v, tuple) else v)
                for k, v in it.attrs.items()
                if k != "saves"
            )
        )
        saves = tuple(s[:3] for s in it.attrs.get("saves", ()))
        rows.append(
            (
                it.kind,
                it.hint,
                it.dtype,
                tuple((ref(o.source) if not o.weight else "param", len(o.dims)) for o in it.operands),
                len(it.output),
                attrs,
                saves,
            )
        )
    periods = [(s.block, s.period) for s in traced.plan.segments if isinstance(s, Run)]
    return [rows, periods]


def _set_slots(traced, values: list[sympy.Expr]) -> None:
    """Write ``values`` (in :func:`_slots` order) into ``traced`` (a copy)."""
    it_values = iter(values)
    for it in _emitted(traced):
        dims = it.dims if isinstance(it, TInput) else order_of(it)
        for d in dims:
            it.sizes[d] = next(it_values)
        if isinstance(it, TOp) and "saves" in it.attrs:
            it.attrs["saves"] = tuple((*s[:3], next(it_values)) if s[1] == "own" else s for s in it.attrs["saves"])
    for seg in traced.plan.segments:
        if isinstance(seg, Run):
            seg.reps = next(it_values)
    for k in sorted(traced.bounds):
        traced.bounds[k] = next(it_values)


def _fit_value(names, points, values) -> sympy.Expr | None:
    """A size (a polynomial in B and T) fitted coefficient by coefficient in the config's sizes."""
    polys = []
    for v in values:
        try:
            polys.append(sympy.Poly(sympy.expand(v), B, T))
        except sympy.PolynomialError:
            return None
    monos = sorted({m for p in polys for m in p.monoms()})
    total = sympy.Integer(0)
    for m in monos:
        coeffs = [p.as_dict().get(m, 0) for p in polys]
        if any(not sympy.Rational(c).is_rational for c in coeffs):
            return None
        fitted = fit_sparse(names, points, coeffs)
        if fitted is None:
            return None
        total += fitted * B ** m[0] * T ** m[1]
    return total


def structure_difference(traced: Sequence, points: Sequence[Mapping[str, int]], what: str, by: str) -> str | None:
    """Why ``traced`` (traced at ``points``) have no one structure op by op (the first op that differs), or None."""
    reference = _structure(traced[0])
    for values, t in zip(points[1:], traced[1:]):
        other = _structure(t)
        if other != reference:
            where = next(
                (
                    f"op {i} ({a[1] if len(a) > 1 else a})"
                    for i, (a, b) in enumerate(zip(reference[0], other[0]))
                    if a != b
                ),
                "the layer pattern",
            )
            return (
                f"recover: the traced structure of {what} changes with {by} (at {dict(values)} against "
                f"{dict(points[0])}, first at {where}): an op or a layer pattern depends on them, so one "
                f"symbolic graph cannot describe them all; fix {by} that change it"
            )
    return None


def fit_values(
    names: Sequence[str], points: Sequence[Mapping[str, int]], samples: int, values: Sequence[sympy.Expr]
) -> sympy.Expr | None:
    """One size (a polynomial in B and T) fitted exactly in ``names`` from its ``values`` at ``points``: the first
    ``samples`` fit, the rest check; in costmodel's symbols, or None where no fit reproduces every value."""
    expr = _fit_value(names, points[:samples], values[:samples])
    if expr is None:
        return None
    subs = [{sympy.Symbol(n, positive=True, integer=True): p[n] for n in names} for p in points[samples:]]
    if any(sympy.expand(expr.xreplace(s) - v) != 0 for s, v in zip(subs, values[samples:])):
        return None
    return expr.xreplace({sympy.Symbol(n, positive=True, integer=True): symbol(n) for n in names})


def fit_across(
    traced: Sequence, points: Sequence[Mapping[str, int]], names: Sequence[str], samples: int, what: str, by: str
) -> tuple[object, list[str]]:
    """One Traced whose every size is fitted exactly in ``names`` across ``traced`` (traced at ``points``): the
    first ``samples`` fit, the rest check; and the sizes no fit reproduces (left at the first trace's value).

    The traces must have one structure, op by op (else an error naming the first op that differs: an op or a
    layer pattern depends on ``by``)."""
    difference = structure_difference(traced, points, what, by)
    if difference is not None:
        raise CostModelError(difference)
    slots = [_slots(t) for t in traced]
    fitted, missing, cache = [], [], {}
    for j, (label, _) in enumerate(slots[0]):
        values = tuple(s[j][1] for s in slots)
        if values not in cache:
            cache[values] = fit_values(names, points, samples, values)
        expr = cache[values]
        if expr is None:
            missing.append(f"{label}: {', '.join(map(str, values))} at the sample points")
            expr = values[0]
        fitted.append(expr)
    result = copy.deepcopy(traced[0])
    _set_slots(result, fitted)
    return result, missing


#: At most this many traced configs (each takes seconds: 100,000 ran for hours).


__all__ = ["fit_across", "fit_values", "structure_difference"]
