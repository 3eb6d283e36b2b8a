"""Sweeps: derive a model's formulas once, compile them, evaluate them over a grid of configs.

The expressions of :func:`costmodel.report.quantities` are compiled with
``sympy.lambdify`` (common subexpressions shared) and evaluated vectorised with
numpy. Two number types, by choice:

* ``exact=False`` (default): float64 arrays. Fast (millions of configs per
  second) and free of int64 overflow (a 1e23 FLOP count fits), but a float64
  holds integers exactly only up to 2**53 ≈ 9.0e15: larger counts are rounded to
  about 16 significant digits.
* ``exact=True``: numpy object arrays of Python ints, the same integers
  :func:`costmodel.report.estimate` gives, at Python-int speed.

>>> s = sweep("gpt3-175b", {"L": [48, 96]}, ["params.total"], exact=True)
>>> [int(v) for v in s["params.total"]]
[87623503872, 174604259328]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import sympy

from .analysis import op_nodes, totals
from .errors import CostModelError, closest
from .expr import parse_int, parse_number
from .ops import Conventions
from .report import quantities, resolve
from .symbols import B, T

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
class Compiled:
    """Metrics of one model compiled to numpy functions of ``symbols`` (in that order)."""

    metrics: tuple[str, ...]
    symbols: tuple[sympy.Symbol, ...]
    expressions: tuple[sympy.Expr, ...]

    def __post_init__(self) -> None:
        args = self.symbols
        floats = sympy.lambdify(args, list(self.expressions), modules="numpy", cse=True)
        # exact: integer-coefficient numerator and denominator, evaluated on Python ints
        fractions = [sympy.fraction(sympy.together(e)) for e in self.expressions]
        exact = sympy.lambdify(args, [x for nd in fractions for x in nd], modules="numpy", cse=True)
        object.__setattr__(self, "_floats", floats)
        object.__setattr__(self, "_exact", exact)

    def __call__(self, values: Sequence, exact: bool = False) -> dict[str, object]:
        """Evaluate at arrays of values (one per symbol, broadcastable); returns metric → array."""
        import numpy as np

        if exact:
            arrays = [np.asarray(v, dtype=object) for v in values]
            raw = self._exact(*arrays)
            out = {}
            for i, metric in enumerate(self.metrics):
                num, den = raw[2 * i], raw[2 * i + 1]
                num, den = np.broadcast_arrays(np.asarray(num, dtype=object), np.asarray(den, dtype=object))
                out[metric] = np.array([n // q if n % q == 0 else sympy.Rational(n, q)
                                        for n, q in zip(num.ravel(), den.ravel())], dtype=object).reshape(num.shape)
            return out
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        shape = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
        return {m: np.broadcast_to(np.asarray(r, dtype=np.float64), shape)
                for m, r in zip(self.metrics, self._floats(*arrays))}


def count_expressions(model, options: Mapping[str, object]) -> dict[str, sympy.Expr]:
    """The expressions behind ``counts_section``: :func:`~costmodel.report.quantities` and ``tokens.per_step``."""
    conventions = options.get("conventions") or Conventions()
    q = quantities(totals(model.graph, conventions), str(options.get("policy", "bf16-mixed")),
                   str(options.get("optimizer", "adamw")))
    q["tokens.per_step"] = B * T
    return q


#: Where sweep metrics come from: functions (model, options) → {dotted key: expression}; a later source
#: overrides an earlier one's keys. A report section whose numbers are evaluated expressions adds its
#: expressions here, so that a sweep gives the numbers ``estimate`` gives.
SOURCES: list[Callable[..., dict[str, sympy.Expr]]] = [count_expressions]


def compile_metrics(model, metrics: Sequence[str], *, settings: Mapping[str, object] | None = None,
                    **options: object) -> tuple[Compiled, dict[sympy.Symbol, int]]:
    """Derive ``metrics`` (keys of the :data:`SOURCES`' expressions) once and compile them.

    ``options`` are those of :func:`~costmodel.report.estimate` (``policy``,
    ``optimizer``, ``conventions``, ...). Returns the compiled metrics (arguments:
    every symbol of the graph, sorted by name) and the model's own values for them.
    """
    m, values = resolve(model, settings=settings, policy=str(options.get("policy", "bf16-mixed")))
    return _compile(m, values, metrics, options)


def _compile(m, values: Mapping[sympy.Symbol, int], metrics: Sequence[str],
             options: Mapping[str, object]) -> tuple[Compiled, dict[sympy.Symbol, int]]:
    q: dict[str, sympy.Expr] = {}
    for source in SOURCES:
        q.update(source(m, options))
    unknown = [k for k in metrics if k not in q]
    if unknown:
        raise CostModelError(f"sweep: unknown metric {unknown[0]!r}{closest(unknown[0], q)}; known: {', '.join(q)}")
    symbols = tuple(sorted(values, key=str))
    exprs = tuple(sympy.Integer(q[k]) if isinstance(q[k], int) else q[k] for k in metrics)
    compiled = Compiled(tuple(metrics), symbols, exprs)
    return compiled, {s: values[s] for s in symbols}


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


def sweep(model, grid: Mapping[str, Sequence[int]], metrics: Sequence[str], *,
          settings: Mapping[str, object] | None = None, exact: bool = False, **options: object) -> dict[str, object]:
    """Evaluate ``metrics`` over the Cartesian product of ``grid`` (symbol name → values).

    Returns column name → 1-D array: the grid symbols, then the metrics, then
    ``valid`` (False where an axis size such as d/h is not a whole number: the
    formula is then evaluated off the integer lattice and describes no model).
    Symbols not in the grid keep the model's values (``settings`` on top).
    """
    import numpy as np

    m, values = resolve(model, settings=settings, policy=str(options.get("policy", "bf16-mixed")))
    compiled, base = _compile(m, values, metrics, options)
    by_name = {str(s): s for s in compiled.symbols}
    for name in grid:
        if name not in by_name:
            raise CostModelError(f"--grid {name}: not a symbol of model {model!r}{closest(name, by_name)}; "
                                 f"expected one of {', '.join(by_name)}")
    n = math.prod(len(v) for v in grid.values())
    limit = MAX_EXACT_POINTS if exact else MAX_POINTS
    if n > limit:
        raise CostModelError(f"sweep: {n:,} configs; expected at most {limit:,}{' with --exact' if exact else ''}")
    names = list(grid)
    mesh = np.meshgrid(*(np.asarray(grid[k], dtype=np.int64) for k in names), indexing="ij") if names else []
    columns = {k: a.ravel() for k, a in zip(names, mesh)}
    shape = (n,)
    args = [columns[str(s)] if str(s) in columns else np.full(shape, base[s], dtype=np.int64)
            for s in compiled.symbols]
    out: dict[str, object] = dict(columns)
    out.update(compiled([a.astype(object) for a in args] if exact else args, exact=exact))
    valid = np.ones(shape, dtype=bool)
    env = dict(zip(compiled.symbols, args))
    fractions, relations = _axis_checks(m.graph)
    if fractions or relations:  # one compiled function for every check
        flat = [e for pair in fractions for e in pair] + list(relations)
        results = sympy.lambdify(list(env), flat, modules="numpy")(*env.values())
        for i in range(len(fractions)):
            a, b = (np.broadcast_to(np.asarray(x, dtype=np.int64), shape) for x in results[2 * i:2 * i + 2])
            valid &= a % b == 0
        for held in results[2 * len(fractions):]:
            valid &= np.broadcast_to(held, shape)
    out["valid"] = valid
    return out


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
    import numpy as np

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

