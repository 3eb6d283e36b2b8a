"""What a check checks: a model, loaded once per activations' dtype, and its formulas compiled once per options.

A :class:`Subject` is made from anything the verbs take (a preset, a family, a ``config.json``,
``file.py:builder``, a :class:`~costmodel.Model`, or a plain graph). Its sizes are drawn, not taken from the
preset: a check tests the *formulas* at many small sizes, so a preset's own numbers (and a built
``Model``'s values) are left aside, and only the symbols given as ``settings`` (``{"L": 2}``) are pinned.
Builder options among the settings (``tied``, ``d_ff``) shape the graph as they do for every verb.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import sympy

from ..errors import CostModelError
from ..families import Family, Model, graph_symbols, load
from ..formulas.compiled import Formulas
from ..memory.inference import kv_cache
from ..options import Options
from ..sections.quantities import quantities
from ..symbols import C


@dataclass
class Subject:
    """A model under check: ``name``, how to build it for an activations' dtype (``build(None)``: as
    loaded), the symbols pinned by the caller (``fixed``) and builder options (``options``)."""

    name: str
    build: object  # (dtype | None) -> Model
    fixed: dict[str, int] = field(default_factory=dict)
    options: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._models: dict[str | None, Model] = {}
        self._formulas: dict[tuple, Formulas] = {}

    def model(self, dtype: str | None = None) -> Model:
        """The model with activations in ``dtype`` (None: the model's own), built once."""
        if dtype not in self._models:
            self._models[dtype] = self.build(dtype)
        return self._models[dtype]

    def require(self, condition: sympy.Basic, why: str) -> None:
        """A relation every drawn size must meet besides the graph's own (a transformers module's even head width),
        as a constraint of a copy of the model's graph; before any formula is derived."""
        build = self.build

        def constrained(dtype: str | None) -> Model:
            m = build(dtype)
            G = m.graph.copy()
            G.graph = {**m.graph.graph, "constraints": [*m.graph.graph.get("constraints", ()), (condition, why)]}
            return dataclasses.replace(m, graph=G, key=None)

        self.build = constrained
        self._models.clear()
        self._formulas.clear()
        self.__dict__.pop("graph_symbols", None)

    @property
    def graph(self) -> nx.DiGraph:
        return self.model().graph

    @functools.cached_property
    def graph_symbols(self) -> set[sympy.Symbol]:
        """The symbols the graph's sizes and counts use."""
        return graph_symbols(self.graph)

    def formulas(self, options: Options | None = None, dtype: str | None = None) -> Formulas:
        """Every key of an estimate under ``options`` as compiled formulas (derived once, then arithmetic)."""
        options = options or Options()
        key = (dtype, options)
        if key not in self._formulas:
            self._formulas[key] = quantities(self.model(dtype), options, shown=False).formulas()
        return self._formulas[key]

    def estimate(self, values: Mapping[str, int], options: Options | None = None, dtype: str | None = None) -> dict:
        """Every key of an estimate (flat: ``flops.matmul.forward``) at ``values``, exact."""
        f = self.formulas(options, dtype)
        missing = sorted(s for s in f.symbols if s not in values)
        if missing:
            raise CostModelError(f"check: no size for {', '.join(missing)}; expected every symbol the formulas use")
        return f.evaluate({s: values[s] for s in f.symbols})

    @functools.cached_property
    def kv_cache(self) -> sympy.Expr | None:
        """Bytes of the KV cache for C tokens of context (None: the graph keeps no KV cache)."""
        try:
            return kv_cache(self.graph, C)
        except CostModelError:
            return None


def subject(model: object, settings: Mapping[str, object] | None = None, via: str | None = None) -> Subject:
    """The :class:`Subject` of ``model`` (a name the verbs take, a :class:`Model`, a graph or a Subject), with
    ``settings``: builder options shape the graph, symbols given a whole number are pinned; ``via``: how a
    ``config.json`` is read (:data:`costmodel.options.VIA`)."""
    if isinstance(model, Subject):
        if settings:
            raise CostModelError("check: settings apply to a model given by name; this one is already made")
        return model
    if isinstance(model, nx.DiGraph):
        model = Model(str(model.graph.get("name", "graph")), model, {}, Family(str(model.graph.get("name")), None))
    if isinstance(model, Model):
        if settings:
            raise CostModelError("check: settings apply to a model given by name; this Model is already built")
        built = model
        return Subject(model.name, lambda dtype: built)
    if not isinstance(model, str):
        raise CostModelError(
            f"check: expected a model (a preset, family, config.json, file.py:builder or a Model), received {model!r}"
        )
    first = load(model, via=via)
    options = first.family.options
    builder, fixed = {}, {}
    used = {str(s) for s in graph_symbols(first.graph)}
    for name, value in (settings or {}).items():
        if name in options:
            builder[name] = value
            continue
        number = value
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value)
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise CostModelError(f"check: setting {name}={value!r}: a symbol is pinned to a positive whole number")
        if name not in used:
            raise CostModelError(
                f"check: setting {name!r} is no symbol of {model!r} and no option of its builder; "
                f"symbols: {', '.join(sorted(used))}"
            )
        fixed[name] = number

    def build(dtype: str | None) -> Model:
        return load(model, builder, dtype=dtype, via=via)

    return Subject(model, build, fixed, builder)
