"""A sweep's plan from the disk cache when it can be: derive once, then start without sympy or networkx.

The generated sources of a sweep (its metrics and the checks ``estimate`` makes) are cached beside the
estimate's formulas (:mod:`costmodel.formulas.compiled`), keyed by the estimate's key (model, settings, options,
costmodel's code: :func:`costmodel.verbs.estimate.key`) and the metrics. A warm plan gives the same
:class:`~.chunks.Plan` the derivation gives; anything it cannot decide alone (a symbol without a value, a base
config that fails a check, a grid name the model does not have) goes to the derivation, which says why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from ...formulas import compiled as formulas
from ...formulas.chunks import Plan
from ...options import Options
from .grid import axes as grid_axes
from .grid import check_budget


def _key(model: object, settings: Mapping[str, object] | None, opts: Options, metrics: Sequence[str]) -> str | None:
    from ..estimate import key as estimate_key  # the estimate's key: model, settings, options and code

    k = estimate_key(model, settings, opts)
    if k is None:
        return None
    return hashlib.sha256(json.dumps(["sweep", k, list(metrics)]).encode()).hexdigest()[:40]


def cached_plan(
    model: object,
    grid: Mapping[str, Sequence[int]] | Sequence[str],
    metrics: Sequence[str],
    *,
    settings: Mapping[str, object] | None = None,
    exact: bool = False,
    options: Options | None = None,
) -> tuple[Plan, str]:
    """(plan, model name): from the cache, else derived (:func:`costmodel.verbs.sweep.derive.derive_plan`) and cached."""
    opts = Options.make(options)
    metrics = list(dict.fromkeys(metrics))
    axes = grid_axes(grid)
    check_budget(axes, metrics, exact)
    k = _key(model, settings, opts, metrics)
    cached = formulas.load(k) if k is not None else None
    if cached is not None:
        p = _warm(cached, axes, opts, exact)
        if p is not None:
            return p, cached.meta["model"]
    from .derive import derive_plan as derive  # deferred: deriving needs sympy; a cached plan does not

    p, m = derive(model, axes, metrics, settings=settings, exact=exact, options=opts)
    if k is not None:
        from ...families import graph_symbols  # deferred: networkx, loaded already by the derivation above

        values = {str(s): int(v) for s, v in m.values.items() if isinstance(v, int) or getattr(v, "is_Integer", False)}
        meta = {
            "model": m.name,
            "checks": p.source[1],
            "values": values,
            "graph_symbols": sorted(str(s) for s in graph_symbols(m.graph)),
        }
        formulas.store(k, formulas.Formulas(p.source[0], list(p.symbols), list(p.metrics), meta=meta))
    return p, m.name


def _warm(f: formulas.Formulas, axes: Mapping[str, Sequence[int]], opts: Options, exact: bool) -> Plan | None:
    """The plan of cached formulas at these options, or None when only the derivation can say what is wrong."""
    meta = f.meta
    values = dict(meta.get("values", {}))
    values["B"] = opts.batch if opts.batch is not None else values.get("B", 1)
    if opts.seq is not None:
        if "T" not in meta.get("graph_symbols", ()):
            return None
        values["T"] = opts.seq
    if any(s not in values for s in f.symbols) or any(name not in f.symbols for name in axes):
        return None
    base = {s: values[s] for s in f.symbols}
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in base.values()):
        return None
    try:
        holds = formulas.run_source(meta["checks"])(formulas.EXACT, *(base[s] for s in f.symbols))
    except (ZeroDivisionError, ArithmeticError):
        return None
    if not all(holds):
        return None  # the derivation raises the check's message
    return Plan(
        (f.source, meta["checks"]), tuple(f.symbols), tuple(f.keys), base, tuple(axes), tuple(axes.values()), exact
    )
