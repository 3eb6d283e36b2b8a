"""Sweeps: derive a model's formulas once, compile them, evaluate them over a grid of configs.

The expressions are :func:`~costmodel.reports.quantities.quantities` — the ones ``estimate`` evaluates,
under the same options (memory, layout, time) — written as plain Python by
:mod:`costmodel.graph.codegen` and evaluated in one of two modes, by choice:

* ``exact=False`` (default): float64 arrays. Fast (millions of configs per
  second) and free of int64 overflow (a 1e23 FLOP count fits), but a float64
  holds integers exactly only up to 2**53 ≈ 9.0e15: larger counts are rounded to
  about 16 significant digits.
* ``exact=True``: Python ints (and fractions), the same numbers :func:`~costmodel.reports.estimate.estimate`
  gives, at Python-int speed.

Validity (axis sizes that divide, block counts that are positive, the model's constraints, the options'
checks) is always evaluated exactly, with Python ints.

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

from ..errors import CostModelError, closest
from ..expr import parse_int, parse_number
from ..families import Model
from ..graph.analysis import op_nodes
from ..graph.codegen import compile_exprs, float_mode, object_mode
from ..options import Options
from .estimate import model_for, resolve
from .quantities import quantities
from .results import Sweep

#: Most configs one sweep evaluates (one float64 column of 1e7 points takes 80 MB); exact sweeps run
#: at Python-int speed, so they take fewer.
MAX_POINTS = 10**7
MAX_EXACT_POINTS = 10**6


def parse_grid(text: str) -> tuple[str, list[int]]:
    """``NAME=START:STOP:STEP`` (STOP included), ``NAME=A,B,C`` or ``NAME=A`` → (name, values).

    >>> parse_grid("d=1024:4096:1024")
    ('d', [1024, 2048, 3072, 4096])
    >>> parse_grid("L=12,24,48")
    ('L', [12, 24, 48])
    """
    name, eq, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    where = f"--grid {text!r}"
    if not eq or not name.isidentifier() or not spec:
        raise CostModelError(f"{where}: expected NAME=START:STOP:STEP or NAME=A,B,C such as d=1024:8192:1024")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise CostModelError(f"{where}: expected START:STOP or START:STOP:STEP, received {spec!r}")
        start, stop = (parse_int(p, where) for p in parts[:2])
        step = parse_int(parts[2], where) if len(parts) == 3 else 1
        if stop < start:
            raise CostModelError(f"{where}: expected START <= STOP, received {start} > {stop}")
        if (stop - start) // step + 1 > MAX_POINTS:
            raise CostModelError(f"{where}: more than {MAX_POINTS:,} values")
        return name, list(range(start, stop + 1, step))
    values = [parse_int(p, where) for p in spec.split(",")]
    return name, list(dict.fromkeys(values))


@dataclass(frozen=True)
class Formulas:
    """Metrics of one model compiled to plain Python (:mod:`costmodel.graph.codegen`), with the model's own
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
            raise CostModelError(f"formulas: {unknown[0]!r} is not a symbol of the model; expected one of "
                                 + ", ".join(map(str, self.symbols)))
        if exact:
            args = [given.get(str(s), self.base[s]) for s in self.symbols]
            args = [np.asarray(a, dtype=object) if isinstance(a, (list, tuple, np.ndarray)) else a for a in args]
            return dict(zip(self.metrics, self.fn(object_mode(), *args)))
        args = [np.asarray(given[str(s)], dtype=np.float64) if str(s) in given else float(self.base[s])
                for s in self.symbols]
        with np.errstate(all="ignore"):
            return dict(zip(self.metrics, self.fn(float_mode(), *args)))


def compile_metrics(model: Model | str, metrics: Sequence[str], *, settings: Mapping[str, object] | None = None,
                    options: Options | None = None, **kwargs: object) -> Formulas:
    """Derive ``metrics`` (keys of an estimate under the options) once and compile them."""
    opts = Options.make(options, **kwargs)
    m = model_for(model, settings, opts)
    return _compile(m, resolve(m, opts), quantities(m, opts), metrics)


def _compile(m: Model, base: Mapping[sympy.Symbol, int], q, metrics: Sequence[str]) -> Formulas:
    unknown = [k for k in metrics if k not in q.exprs]
    if unknown:
        raise CostModelError(f"sweep: unknown metric {unknown[0]!r}{closest(unknown[0], q.exprs)}; "
                             f"known: {', '.join(q.exprs)}")
    symbols = tuple(sorted(base, key=str))
    cache = q.__dict__.setdefault("_sweep_metrics", {})  # compiled once per metrics and symbols of these quantities
    key = (tuple(metrics), symbols)
    if key not in cache:
        cache[key] = compile_exprs([q.exprs[k] for k in metrics], symbols)
    return Formulas(tuple(metrics), symbols, dict(base), cache[key])


def _axis_checks(G) -> tuple[list[tuple[sympy.Expr, sympy.Expr]], list[sympy.Basic]]:
    """What ``analysis.check_values`` checks, as vectorisable expressions.

    (numerator, denominator) of axis sizes that are fractions of symbols (d/h must
    divide), and relations that must hold: every size and block count positive
    (``L - L_dense``), routes within the experts, the graph's declared constraints.
    """
    fractions, relations, seen = [], [], set()
    for _, data in op_nodes(G):
        op = data["op"]
        for _, size in op.sizes:
            num, den = sympy.fraction(sympy.together(size))
            if den != 1 and (num, den) not in seen:
                seen.add((num, den))
                fractions.append((num, den))
            if size.free_symbols and size.is_positive is not True:
                relations.append(size > 0)
        if op.attr("experts") and op.attr("route"):
            relations.append(op.size[str(op.attr("route"))] <= op.size[str(op.attr("experts"))])
    for count in G.graph.get("blocks", {}).values():
        if count.free_symbols and count.is_positive is not True:
            relations.append(count > 0)
    relations += [condition for condition, _ in G.graph.get("constraints", ())]
    return fractions, [r for r in relations if r not in (sympy.true, True)]


def sweep(model: Model | str, grid: Mapping[str, Sequence[int]] | Sequence[str], metrics: Sequence[str] = (
        "flops.training",), *, settings: Mapping[str, object] | None = None, exact: bool = False,
          budget: object = None, ratio: object = 20, options: Options | None = None, **kwargs: object) -> Sweep:
    """Evaluate ``metrics`` over the Cartesian product of ``grid`` (symbol name → values, or
    ``"NAME=SPEC"`` strings as on the command line).

    Returns column name → 1-D array: the grid symbols, then the metrics, then ``valid`` (False where a
    config describes no model: an axis size such as d/h is not a whole number, a constraint fails, a
    layout does not divide). Symbols not in the grid keep the model's values (``settings`` on top);
    ``options`` are those of :func:`~costmodel.reports.estimate.estimate` and apply to every point.
    ``budget``: a FLOP budget C; the result's ``optimal`` gives the compute-optimal N and D
    (C = 6ND, D = ``ratio``·N) and the swept config closest to it.
    """
    extra = ["params.non_embedding", "flops.training", "tokens.per_step"] if budget is not None else []
    metrics = list(dict.fromkeys(metrics))
    wanted = list(dict.fromkeys([*metrics, *extra]))

    if not isinstance(grid, Mapping):
        grid = dict(parse_grid(g) for g in grid)
    opts = Options.make(options, **kwargs)
    m = model_for(model, settings, opts)
    base = resolve(m, opts)
    q = quantities(m, opts)
    formulas = _compile(m, base, q, wanted)
    symbols = formulas.symbols
    by_name = {str(s): s for s in symbols}
    for name in grid:
        if name not in by_name:
            raise CostModelError(f"--grid {name}: not a symbol of model {m.name!r}{closest(name, by_name)}; "
                                 f"expected one of {', '.join(by_name)}")
    n = math.prod(len(v) for v in grid.values())
    limit = MAX_EXACT_POINTS if exact else MAX_POINTS
    if n > limit:
        raise CostModelError(f"sweep: {n:,} configs; expected at most {limit:,}{' with --exact' if exact else ''}")
    names = list(grid)
    mesh = np.meshgrid(*(np.asarray(grid[k], dtype=object) for k in names), indexing="ij") if names else []
    columns = {k: a.ravel() for k, a in zip(names, mesh)}
    out: dict[str, object] = {k: np.asarray(v.astype(np.int64) if _fits_int64(v) else v) for k, v in columns.items()}
    results = formulas(columns, exact=exact)
    for metric in wanted:
        if exact:
            col = np.empty(n, dtype=object)
            col[:] = np.broadcast_to(np.asarray(results[metric], dtype=object), (n,))
        else:
            col = np.broadcast_to(np.asarray(results[metric], dtype=np.float64), (n,)).copy()
        out[metric] = col
    out["valid"] = _valid(m, q, symbols, columns, base, n)
    optimal = None
    if budget is not None:
        opt = chinchilla_optimal(budget, ratio)
        i = closest_to_optimal(out, opt["budget"], opt["tokens_per_param"])
        optimal = {"budget": float(opt["budget"]), "tokens_per_param": float(opt["tokens_per_param"]),
                   "params": float(opt["params"]), "tokens": float(opt["tokens"]),
                   "closest": {k: int(out[k][i]) for k in names}}
        for k in extra:
            if k not in metrics:
                del out[k]
    return Sweep(out, model=m.name, grid=names, metrics=metrics, exact=exact, optimal=optimal)


def _fits_int64(a) -> bool:
    return all(-2**63 <= int(v) < 2**63 for v in a)


def _valid(m: Model, q, symbols, columns: Mapping, base: Mapping, n: int):
    """Exact validity of every point: the graph's axis checks and the options' checks, with Python ints."""
    fractions, relations = _axis_checks(m.graph)
    relations = relations + [r for r, _ in q.checks]
    valid = np.ones(n, dtype=bool)
    if not (fractions or relations):
        return valid
    exprs = [e for pair in fractions for e in pair] + relations
    cache = q.__dict__.setdefault("_validity", {})  # compiled once per symbols of these quantities
    if symbols not in cache:
        cache[symbols] = compile_exprs(exprs, symbols)
    f = cache[symbols]
    args = [columns[str(s)] if str(s) in columns else base[s] for s in symbols]
    res = f(object_mode(), *args)
    for j in range(len(fractions)):
        valid &= np.broadcast_to(np.asarray(res[2 * j] % res[2 * j + 1] == 0, dtype=bool), (n,))
    for r in res[2 * len(fractions):]:
        valid &= np.broadcast_to(np.asarray(r, dtype=bool), (n,))
    return valid


def chinchilla_optimal(budget: object, tokens_per_param: object = 20) -> dict[str, sympy.Expr]:
    """Compute-optimal N and D for a FLOP budget C with C = 6·N·D and D = r·N (Chinchilla: r ≈ 20).

    N = sqrt(C / 6r), D = r·N, exact (sympy) until displayed.

    >>> opt = chinchilla_optimal("5.88e23")   # Chinchilla: 70B parameters, 1.4T tokens
    >>> float(opt["params"]), float(opt["tokens"])
    (70000000000.0, 1400000000000.0)
    """
    c = budget if isinstance(budget, sympy.Rational) else parse_number(str(budget), "budget")
    r = tokens_per_param if isinstance(tokens_per_param, sympy.Rational) else \
        parse_number(str(tokens_per_param), "tokens per parameter")
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
    per_token = np.asarray(columns["flops.training"], float) / np.asarray(columns["tokens.per_step"], float)
    tokens = float(opt["budget"]) / per_token
    ratio = tokens / np.asarray(columns["params.non_embedding"], float)
    score = np.abs(np.log(ratio / float(opt["tokens_per_param"])))
    score[~np.asarray(columns.get("valid", np.ones_like(score, bool)))] = np.inf
    return int(np.argmin(score))

