"""Result objects: a read-only mapping of a verb's JSON contract that renders itself in a notebook.

``estimate(...)["params"]["total"]`` reads like the JSON users' scripts read; ``.to_json()`` is the
exact document ``costmodel estimate --json`` prints; ``.flat`` is the dotted-key view; ``_repr_html_``
and ``_repr_latex_`` draw a table (and formulas, where the result has them) in Jupyter.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterator, Mapping

from .. import units
from ..errors import CostModelError

# This module imports no sympy: an estimate served from cached formulas returns one of these without it.
# Rendering formulas (LaTeX) and charts imports what it needs when it draws.


def _is_sympy(obj: object) -> bool:
    return type(obj).__module__.startswith("sympy.")


def nest(flat: Mapping[str, object]) -> dict:
    """``{"a.b": 1}`` → ``{"a": {"b": 1}}``."""
    steps, n_nodes = _nesting(tuple(flat))
    nodes: list[dict] = [{} for _ in range(n_nodes)]
    for (parent, name, child), value in zip(steps, flat.values()):
        node = nodes[parent]
        for p, part, c in child:  # the dicts this key opens first
            nodes[p][part] = nodes[c]
        node[name] = value
    return nodes[0]


@functools.lru_cache(maxsize=256)
def _nesting(keys: tuple[str, ...]) -> tuple[list[tuple[int, str, tuple]], int]:
    """How to nest values of ``keys`` (in order), worked out once per key set: per key, the dict that holds
    it, its last name and the (parent, name, child) links of the dicts it opens, in insertion order."""
    index: dict[tuple[str, ...], int] = {(): 0}
    steps = []
    for key in keys:
        *path, last = key.split(".")
        opened = []
        for i in range(len(path)):
            prefix = tuple(path[: i + 1])
            if prefix not in index:
                index[prefix] = len(index)
                opened.append((index[tuple(path[:i])], path[i], index[prefix]))
        steps.append((index[tuple(path)], last, tuple(opened)))
    return steps, len(index)


def flatten(obj: Mapping, prefix: str = "") -> dict[str, object]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (the inverse of :func:`nest`)."""
    out: dict[str, object] = {}
    for k, v in obj.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def to_jsonable(obj: object) -> object:
    """Plain JSON values: exact ints stay ints, sympy expressions become strings, floats that are not
    finite become ``None`` (JSON has no Infinity)."""
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if _is_sympy(obj):
        return int(obj) if getattr(obj, "is_Integer", False) else str(obj)
    return str(obj)


def dumps(obj: object) -> str:
    """Strict JSON text (``allow_nan=False``) of a result."""
    return json.dumps(to_jsonable(obj), indent=2, allow_nan=False)


class Result(Mapping):
    """A verb's result: mapping access to the JSON contract, JSON text, notebook rendering."""

    title = "costmodel result"

    def __init__(self, data: Mapping[str, object]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        # one short line (the whole was a line of kilobytes): what it is of, its top-level keys; str() and
        # to_json() give everything
        of = self._data.get("model")
        keys = ", ".join(self._data)
        if len(keys) > 100:
            keys = keys[:100].rsplit(", ", 1)[0] + ", ..."
        return f"<{type(self).__name__}{f' of {of!r}' if isinstance(of, str) else ''}: {keys}>"

    @property
    def flat(self) -> dict[str, object]:
        """Dotted keys (``"flops.training"``) → values."""
        return flatten(self._data)

    def to_dict(self) -> dict:
        return to_jsonable(self._data)  # type: ignore[return-value]

    def to_json(self) -> str:
        """The JSON document of this result (the CLI's ``--json``)."""
        return dumps(self._data)

    def _rows(self) -> list[tuple[str, object]]:
        return list(self.flat.items())

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(k)}</code></td><td>{html.escape(_show(v))}</td></tr>" for k, v in self._rows()
        )
        return (
            f"<table><caption>{html.escape(self.title)}</caption>"
            f"<thead><tr><th>key</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>"
        )

    def _repr_latex_(self) -> str | None:
        exprs = {k: v for k, v in self._rows() if _is_sympy(v)}
        if not exprs:
            return None
        from .latex import cost_latex  # sympy's printer, loaded when formulas are drawn

        return cost_latex(exprs)


def _show(v: object) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Estimate(Result):
    """What :func:`costmodel.estimate` returns: the nested keys of ``costmodel estimate --json``."""

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"costmodel estimate: {self._data.get('model', '')}"

    def _repr_html_(self) -> str:
        from .notebook import estimate_html  # the documents' summary and units

        return estimate_html(self.flat)

    def plot_memory(self, path: str, *, capacity: int | None = None):
        """A bar chart of the memory breakdown (``.png``/``.svg``/``.pdf``; needs matplotlib)."""
        from .plot import memory_chart  # the plot extra, loaded when a chart is drawn

        parts = {
            k: v for k, v in self._data["memory_bytes"].items() if k not in ("total", "peak") and isinstance(v, int)
        }
        return memory_chart(parts, path, title=f"{self._data['model']} memory", capacity=capacity)


class Comparison(Result):
    """What :func:`costmodel.compare` returns: numbers and formulas per named convention."""

    title = "costmodel compare"


class Sweep(Result):
    """What :func:`costmodel.sweep` returns: column name → array (grid symbols, metrics, ``valid``), and
    ``optimal`` (the compute-optimal point for a budget, when one was given)."""

    title = "costmodel sweep"

    def __init__(
        self,
        columns: Mapping[str, object],
        *,
        model: str = "",
        grid: list[str] | None = None,
        metrics: list[str] | None = None,
        exact: bool = False,
        optimal: dict | None = None,
    ) -> None:
        super().__init__(columns)
        self.model, self.grid, self.metrics, self.exact, self.optimal = model, grid or [], metrics or [], exact, optimal

    def column(self, key: str) -> list:
        """A column as Python numbers: floats that hold whole numbers exactly (< 2^53) as ints, exact
        values as ints (or their fraction as a string), booleans as booleans, non-finite floats as None."""
        import numpy as np  # deferred: numpy is imported when a sweep's columns are read, not at start-up

        a = self._data[key]
        if np.issubdtype(a.dtype, np.floating):
            whole = np.isfinite(a) & (a == np.floor(a)) & (np.abs(a) < 2.0**53)
            if whole.all():
                return a.astype(np.int64).tolist()
            return [int(v) if w else (v if np.isfinite(v) else None) for v, w in zip(a.tolist(), whole.tolist())]
        if np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.bool_):
            return a.tolist()
        return [v if isinstance(v, int) else str(v) for v in a.tolist()]

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "exact": self.exact,
            "columns": {k: self.column(k) for k in [*self.grid, *self.metrics, "valid"]},
        }
        if self.optimal is not None:
            out["optimal"] = self.optimal
        return out

    def to_json(self) -> str:
        return dumps(self.to_dict())

    def to_pandas(self):
        """A pandas DataFrame of the columns (pandas must be installed)."""
        try:
            import pandas as pd  # an optional package: imported when asked for
        except ModuleNotFoundError:
            raise CostModelError("Sweep.to_pandas needs pandas: pip install pandas") from None
        return pd.DataFrame({k: v for k, v in self._data.items()})

    def _rows(self) -> list[tuple[str, object]]:
        return [(k, f"{units.plural(len(v), 'value')}") for k, v in self._data.items()]

    def plot(self, path: str, metric: str | None = None):
        """A chart of ``metric`` (default: the first) against the grid axes (needs matplotlib); the Figure."""
        from .plot import sweep_chart  # matplotlib is imported only when a chart is asked for

        metric = metric or self.metrics[0]
        columns = {k: self.column(k) for k in [*self.grid, metric, "valid"]}
        return sweep_chart(columns, self.grid, metric, path, title=f"{self.model}: {metric}")

    def _repr_html_(self) -> str:
        from .notebook import sweep_html  # the documents' units

        return sweep_html({k: self.column(k) for k in [*self.grid, *self.metrics, "valid"]}, f"sweep of {self.model}")


class Roofline(Result):
    """What :func:`costmodel.roofline` returns: per-op bounds, the total and (decode) the serving numbers."""

    title = "costmodel roofline"


class Served(Result):
    """What :func:`costmodel.serve` returns: ``serving.*``, latencies in seconds (mean, p50, p90, p99), throughput,
    goodput, cost and the step's breakdown."""

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"costmodel serve: {self._data.get('model', '')}"

    def _repr_html_(self) -> str:
        from .serving import serving_html  # the table of a serving run

        return serving_html(self._data)

    def to_text(self) -> str:
        """What ``costmodel serve`` prints: latencies first, then throughput, goodput, cost, what binds the step."""
        from .serving import lines  # the layout of a serving run's text

        return "\n".join(lines(self._data))


class ServePlan(Result):
    """What :func:`costmodel.serve_plan` returns: ``serving_plan.*``, the ranked deployments and the Pareto front."""

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"costmodel serve-plan: {self._data.get('model', '')}"

    def _repr_html_(self) -> str:
        from .serving import plan_html  # the table of a serving plan

        return plan_html(self._data)

    def to_text(self) -> str:
        """What ``costmodel serve-plan`` prints."""
        from .serving import plan_lines  # the layout of a serving plan's text

        return "\n".join(plan_lines(self._data))


class Fit(Result):
    """What :func:`costmodel.fit` returns: the largest batch or sequence that fits, or what overflows."""

    title = "costmodel fit"
