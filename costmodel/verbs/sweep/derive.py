"""Sweeps: derive a model's formulas once, compile them, evaluate them over a grid of configs, in chunks.

The expressions are :func:`~costmodel.sections.quantities.quantities` — the ones ``estimate`` evaluates,
under the same options (memory, layout, time) — written as plain Python by
:mod:`costmodel.formulas.python` and evaluated by the chunk engine (:mod:`.chunks`) in one of two modes:

* ``exact=False`` (default): float64 arrays. Fast (millions of configs per
  second) and free of int64 overflow (a 1e23 FLOP count fits), but a float64
  holds integers exactly only up to 2**53 ≈ 9.0e15: larger counts are rounded to
  about 16 significant digits.
* ``exact=True``: Python ints (and fractions), the same numbers :func:`~costmodel.sections.run.estimate`
  gives: int64 with checked overflow while they fit, Python ints beyond.

Validity is the checks ``estimate`` makes (axis sizes that divide, block counts that are positive, the model's
constraints, the options' checks), always evaluated exactly, never on wrapping int64.

The grid is validated (names, sizes, points × metrics) before anything is derived or allocated; a grid is
never materialised: :func:`derive_plan` derives the :class:`~costmodel.formulas.chunks.Plan` that :func:`~.stream.sweep` (the verb,
cached by :mod:`.plans`) streams to a file chunk by chunk (memory flat in the grid's size) or collects.

>>> from costmodel.verbs.sweep.stream import sweep
>>> s = sweep("gpt3-175b", {"L": [48, 96]}, ["params.total"], exact=True)
>>> [int(v) for v in s["params.total"]]
[87623503872, 174604259328]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy

from ...errors import CostModelError, closest
from ...expr import parse_number
from ...families import Model
from ...formulas.chunks import Plan
from ...formulas.compiled import float_mode, object_mode
from ...formulas.python import compile_exprs, source
from ...options import Options
from ...sections.quantities import quantities
from ...sections.run import prepare, resolve
from .grid import MAX_EXACT_POINTS as MAX_EXACT_POINTS  # the limits and the parser, where they were
from .grid import MAX_POINTS as MAX_POINTS
from .grid import axes as grid_axes
from .grid import check_budget
from .grid import parse_grid as parse_grid


@dataclass(frozen=True)
class Formulas:
    """Metrics of one model compiled to plain Python (:mod:`costmodel.formulas.python`), with the model's own
    values for its symbols. Call with a mapping of symbol names to numbers or arrays (the rest keep the
    model's values): float64 arrays by default, exact Python numbers with ``exact=True``."""

    metrics: tuple[str, ...]
    symbols: tuple[sympy.Symbol, ...]
    base: Mapping[sympy.Symbol, int]
    fn: object = field(repr=False)

    def __call__(self, values: Mapping[str, object] | None = None, *, exact: bool = False) -> dict[str, object]:
        given = dict(values or {})
        unknown = [k for k in given if k not in {str(s) for s in self.symbols}]
        if unknown:
            raise CostModelError(
                f"formulas: {unknown[0]!r} is not a symbol of the model; expected one of "
                + ", ".join(map(str, self.symbols))
            )
        if exact:
            args = [given.get(str(s), self.base[s]) for s in self.symbols]
            args = [np.asarray(a, dtype=object) if isinstance(a, (list, tuple, np.ndarray)) else a for a in args]
            return dict(zip(self.metrics, self.fn(object_mode(), *args)))
        args = [
            np.asarray(given[str(s)], dtype=np.float64) if str(s) in given else float(self.base[s])
            for s in self.symbols
        ]
        with np.errstate(all="ignore"):
            return dict(zip(self.metrics, self.fn(float_mode(), *args)))


def compile_metrics(
    model: Model | str,
    metrics: Sequence[str],
    *,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    **kwargs: object,
) -> Formulas:
    """Derive ``metrics`` (keys of an estimate under the options) once and compile them."""
    opts = Options.make(options, **kwargs)
    m = prepare(model, settings, opts).model
    return _compile(m, resolve(m, opts), quantities(m, opts), metrics)


def _known(q, metrics: Sequence[str]) -> None:
    unknown = [k for k in metrics if k not in q.exprs]
    if unknown:
        raise CostModelError(
            f"sweep: unknown metric {unknown[0]!r}{closest(unknown[0], q.exprs)}; known: {', '.join(q.exprs)}"
        )


def _compile(m: Model, base: Mapping[sympy.Symbol, int], q, metrics: Sequence[str]) -> Formulas:
    _known(q, metrics)
    symbols = tuple(sorted(base, key=str))
    cache = q.__dict__.setdefault("_sweep_metrics", {})  # compiled once per metrics and symbols of these quantities
    key = (tuple(metrics), symbols)
    if key not in cache:
        cache[key] = compile_exprs([q.exprs[k] for k in metrics], symbols)
    return Formulas(tuple(metrics), symbols, dict(base), cache[key])


def derive_plan(
    model: Model | str,
    grid: Mapping[str, Sequence[int]] | Sequence[str],
    metrics: Sequence[str] = ("flops.training",),
    *,
    settings: Mapping[str, object] | None = None,
    exact: bool = False,
    options: Options | None = None,
    **kwargs: object,
) -> tuple[Plan, Model]:
    """Validate a sweep before any work (grid sizes, points × metrics, then names), derive it once and return
    the :class:`~.chunks.Plan` the chunk engine evaluates, with the model."""
    metrics = list(dict.fromkeys(metrics))
    axes = grid_axes(grid)
    check_budget(axes, metrics, exact)
    opts = Options.make(options, **kwargs)
    m = prepare(model, settings, opts).model
    base = resolve(m, opts)
    by_name = {str(s): s for s in base}
    for name in axes:
        if name not in by_name:
            raise CostModelError(
                f"--grid {name}: not a symbol of model {m.name!r}{closest(name, by_name)}; "
                f"expected one of {', '.join(sorted(by_name))}"
            )
    q = quantities(m, opts)
    _known(q, metrics)
    symbols = tuple(sorted(base, key=str))
    cache = q.__dict__.setdefault("_sweep_sources", {})  # written once per metrics and symbols of these quantities
    key = (tuple(metrics), symbols)
    if key not in cache:
        # validity: exactly the checks estimate makes (value_checks of the graph, then the options')
        cache[key] = (
            source([q.exprs[k] for k in metrics], symbols),
            source([sympy.sympify(r) for r, _ in q.checks], symbols),
        )
    p = Plan(
        cache[key],
        tuple(map(str, symbols)),
        tuple(metrics),
        {str(s): int(v) for s, v in base.items()},
        tuple(axes),
        tuple(axes.values()),
        exact,
    )
    return p, m


def describe_optimal(opt: Mapping[str, sympy.Expr], closest_config: Mapping[str, int]) -> dict:
    """The JSON of a compute-optimal point: floats, or a string saying why not when beyond float64."""
    return {
        "budget": _float(opt["budget"]),
        "tokens_per_param": _float(opt["tokens_per_param"]),
        "params": _float(opt["params"]),
        "tokens": _float(opt["tokens"]),
        "closest": dict(closest_config),
    }


def _float(x: sympy.Expr) -> float | str:
    v = float(x)
    return v if math.isfinite(v) else f"{sympy.N(x, 6)} (beyond float64)"


def chinchilla_optimal(budget: object, tokens_per_param: object = 20) -> dict[str, sympy.Expr]:
    """Compute-optimal N and D for a FLOP budget C with C = 6·N·D and D = r·N (Chinchilla: r ≈ 20).

    N = sqrt(C / 6r), D = r·N, exact (sympy) until displayed.

    >>> opt = chinchilla_optimal("5.88e23")   # Chinchilla: 70B parameters, 1.4T tokens
    >>> float(opt["params"]), float(opt["tokens"])
    (70000000000.0, 1400000000000.0)
    """
    c = budget if isinstance(budget, sympy.Rational) else parse_number(str(budget), "budget")
    r = (
        tokens_per_param
        if isinstance(tokens_per_param, sympy.Rational)
        else parse_number(str(tokens_per_param), "tokens per parameter")
    )
    if c <= 0 or r <= 0:
        raise CostModelError(f"compute-optimal: expected a positive budget and ratio, received {c} and {r}")
    n = sympy.sqrt(c / (6 * r))
    return {"budget": c, "tokens_per_param": r, "params": n, "tokens": r * n}


def closest_to_optimal(columns: Mapping[str, object], budget: object, tokens_per_param: object = 20) -> int:
    """Index of the swept config whose D/N is nearest (in log) to the ratio when spending ``budget``.

    Needs the metrics ``params.non_embedding`` and ``flops.training`` and ``tokens.per_step``:
    D = budget ÷ (training FLOPs per token), N = non-embedding params.
    """
    for key in ("params.non_embedding", "flops.training", "tokens.per_step"):
        if key not in columns:
            raise CostModelError(f"compute-optimal: the sweep needs metric {key!r}")
    opt = chinchilla_optimal(budget, tokens_per_param)
    score = _scores(columns, float(opt["budget"]), float(opt["tokens_per_param"]))
    return int(np.argmin(score))


def _scores(columns: Mapping[str, object], budget: float, tokens_per_param: float) -> np.ndarray:
    """|log((D/N) / r)| of each config (inf where invalid): the smallest is the closest to compute-optimal."""
    with np.errstate(all="ignore"):  # a zero or infinite ratio is a score, not a warning
        per_token = np.asarray(columns["flops.training"], float) / np.asarray(columns["tokens.per_step"], float)
        ratio = budget / per_token / np.asarray(columns["params.non_embedding"], float)
        score = np.abs(np.log(ratio / tokens_per_param))
    score[~np.asarray(columns.get("valid", np.ones_like(score, bool)))] = np.inf
    return score
