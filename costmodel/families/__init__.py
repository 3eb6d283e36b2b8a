"""Model families and presets, and turning a name plus settings into a graph.

The engine knows no architecture. A *family* is a builder function that returns
an op graph; its keyword arguments are structural options (``tied=True``,
``d_ff=4*d``). A *preset* is a family plus a config: values for the symbols
(``d=768``) and options for the builder, with the source of every number.

Families and presets come from the entry-point group ``costmodel.architectures``
(costmodel's own ``costmodel_graphs`` is one), so other packages can add theirs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import sympy

from ..errors import CostModelError, closest

ENTRY_POINT_GROUP = "costmodel.architectures"


@dataclass(frozen=True)
class Preset:
    """A named, sourced configuration of a family."""

    name: str
    family: str
    config: Mapping[str, object]
    source: str
    about: str = ""


@dataclass(frozen=True)
class Family:
    """An architecture: a graph builder and its presets."""

    name: str
    build: Callable[..., nx.DiGraph]
    about: str = ""
    presets: tuple[Preset, ...] = ()
    defaults: Mapping[str, object] = field(default_factory=dict)  # symbol values used when a preset says nothing
    hf_model_types: tuple[str, ...] = ()  # Hugging Face ``model_type`` values this family reads
    from_hf: Callable[[Mapping[str, object]], dict[str, object]] | None = None  # config.json -> settings

    @property
    def options(self) -> dict[str, object]:
        """The builder's keyword options and their defaults."""
        return {n: p.default for n, p in inspect.signature(self.build).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}


@functools.lru_cache(maxsize=1)
def families() -> dict[str, Family]:
    """Every family registered under the ``costmodel.architectures`` entry-point group."""
    from importlib.metadata import entry_points

    found: dict[str, Family] = {}
    # the same distribution seen twice (an editable install plus a venv, say) is one source
    unique = {(ep.name, ep.value): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for ep in unique.values():
        for fam in ep.load()():
            if fam.name in found:
                raise CostModelError(f"architecture family {fam.name!r} is registered twice (again by {ep.value})")
            found[fam.name] = fam
    return found


def presets() -> dict[str, Preset]:
    """Every preset of every family, by name."""
    out: dict[str, Preset] = {}
    for fam in families().values():
        for p in fam.presets:
            if p.name in out:
                raise CostModelError(f"preset {p.name!r} is defined twice")
            out[p.name] = p
    return out


@dataclass(frozen=True)
class Model:
    """A built graph plus the numbers for its symbols (possibly none)."""

    name: str
    graph: nx.DiGraph
    values: Mapping[sympy.Symbol, object]
    family: Family
    preset: Preset | None = None


def graph_symbols(G: nx.DiGraph) -> set[sympy.Symbol]:
    """Every symbol the graph's sizes and counts use, and those of a KV cache's kept positions (a window W)."""
    found: set[sympy.Symbol] = set()
    for _, data in G.nodes(data=True):
        found |= data["count"].free_symbols
        if "kv_positions" in data:
            found |= data["kv_positions"].free_symbols
        if "op" in data:
            for _, size in data["op"].sizes:
                found |= size.free_symbols
    return found


def _option(name: str, value: object, default: object, where: str) -> object:
    """A builder option of the kind its default has: a bool, a name, or a size (a number or an expression)."""
    if isinstance(default, bool) or isinstance(default, str):
        if not isinstance(value, type(default)):
            kind = "true or false" if isinstance(default, bool) else "a name"
            raise CostModelError(f"{where}: option {name!r} must be {kind} (default {default!r}), received {value!r}")
    elif isinstance(value, (bool, str)):
        raise CostModelError(f"{where}: option {name!r} must be a size (a number or an expression of symbols), "
                             f"received {value!r}")
    return value


def _build(fam: Family, config: Mapping[str, object], where: str) -> tuple[nx.DiGraph, dict]:
    """Build with the config's builder options; the rest must be symbols the graph uses."""
    opts = fam.options
    options, sized = {}, {}
    for k, v in config.items():
        if k not in opts:
            continue
        v = _option(k, v, opts[k], where)
        if isinstance(opts[k], sympy.Symbol) and (isinstance(v, int) or getattr(v, "is_Integer", False)):
            sized[opts[k]] = v  # a size option defaulting to a symbol (d_ff): keep the symbol, give it the number
        else:
            options[k] = v
    graph = fam.build(**options)
    if not isinstance(graph, nx.DiGraph):
        raise CostModelError(f"{where}: the builder returned {type(graph).__name__}; expected the "
                             "networkx.DiGraph of a GraphBuilder (return b.graph)")
    used = {str(s): s for s in graph_symbols(graph)}
    values = {}
    for key, value in config.items():
        if key in opts:
            continue
        if key not in used:
            known = sorted(set(opts) | set(used))
            raise CostModelError(f"{where}: unknown setting {key!r}{closest(key, known)}; expected a symbol "
                                 f"of the graph or an option of family {fam.name!r}: {', '.join(known)}")
        values[used[key]] = value
    values.update({sym: v for sym, v in sized.items() if sym in used.values()})
    return graph, values


def load(spec: str, settings: Mapping[str, object] | None = None, *, dtype: str | None = None) -> Model:
    """Build the model named ``spec`` with ``settings`` on top.

    ``spec`` is a preset, a family, a Hugging Face ``config.json`` or
    ``path/to/file.py:builder`` (a user's builder function: the file is executed).
    ``settings`` maps a symbol name (``"d"``) or a builder option (``"tied"``)
    to a value: a number, a bool, a name, a sympy expression, or a string read by the restricted
    parser (``"8*d/3"``, ``"true"``, ``"fp32"``); presets' own config comes first, settings override it.
    ``dtype``: the activations' dtype when the family has a ``dtype`` option the settings leave alone.
    """
    if not isinstance(spec, str):
        raise CostModelError(f"model: expected a preset, family, config.json or file.py:builder name, "
                             f"received {spec!r}")
    settings = parse_settings(settings)
    fams, pres = families(), presets()
    if spec in pres:
        preset = pres[spec]
        fam = fams[preset.family]
        config = {**fam.defaults, **preset.config, **settings}
    elif spec in fams:
        preset, fam = None, fams[spec]
        config = {**fam.defaults, **settings}
    elif spec.endswith(".json"):
        from .hf import read_config  # reading a config.json is rare: its parser loads only then

        preset = None
        fam, hf_settings = read_config(spec, fams)
        config = {**hf_settings, **settings}
    elif is_builder_spec(spec):
        preset, fam = None, load_builder(spec)
        config = settings
    else:
        raise CostModelError(f"unknown model {spec!r}{closest(spec, [*pres, *fams])}; "
                             f"see 'costmodel models' for the {len(pres)} presets and {len(fams)} families")
    if dtype is not None and "dtype" in fam.options and "dtype" not in settings:
        config["dtype"] = dtype
    graph, values = _build(fam, config, f"model {spec!r}")
    return Model(spec, graph, values, fam, preset)


def parse_settings(settings: Mapping[str, object] | None) -> dict[str, object]:
    """Settings with string values read by the restricted parser (never ``eval``): ``"8*d/3"`` is an
    expression of symbols, ``"true"``/``"false"`` a bool, a bare name (``"fp32"``) a name."""
    from ..expr import parse_value

    out: dict[str, object] = {}
    for name, value in dict(settings or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise CostModelError(f"setting: expected a name such as d_ff, received {name!r}")
        out[name] = parse_value(name, value) if isinstance(value, str) else value
    return out


def is_builder_spec(spec: str) -> bool:
    """``path/to/file.py:function``?"""
    path, colon, name = spec.rpartition(":")
    return bool(colon) and path.endswith(".py") and name.isidentifier()


def load_builder(spec: str) -> Family:
    """The builder function ``name`` of the Python file in ``path/to/file.py:name``, as a family.

    Loading a Python file **executes it**, with your permissions: only load files
    you trust. (A ``config.json`` is data and is never executed.)
    """
    import importlib.util
    import os
    import sys

    path, _, name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise CostModelError(f"model {spec!r}: no file {path!r}; expected path/to/file.py:builder_function")
    module_name = "costmodel_user_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # so that dataclasses and pickling inside the file work
    try:
        loader_spec.loader.exec_module(module)
    except CostModelError:
        raise
    except Exception as exc:  # the user's code: report it as one line, like any other bad input
        raise CostModelError(f"model {spec!r}: running {path!r} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module_name)
        raise CostModelError(f"model {spec!r}: {path!r} has no function {name!r}{closest(name, found)}; "
                             f"functions defined there: {', '.join(found) or 'none'}")

    @functools.wraps(fn)
    def build(**options: object) -> object:
        try:
            return fn(**options)
        except CostModelError:
            raise
        except Exception as exc:  # a bug in the user's builder, reported as one line
            raise CostModelError(f"model {spec!r}: the builder raised {type(exc).__name__}: {exc}") from None

    return Family(name, build, f"user builder {name} from {path}")


def catalogue() -> dict[str, object]:
    """Every family (with its Hugging Face model types) and every preset with its exact parameter counts:
    what ``costmodel models`` lists."""
    from ..graph.analysis import as_int, evaluate, totals

    rows = []
    for fam in families().values():
        for preset in fam.presets:
            m = load(preset.name)
            t = totals(m.graph)
            n = as_int(evaluate(t.params, m.values), "params")
            active = n if t.params_active is None else as_int(evaluate(t.params_active, m.values), "active params")
            rows.append({"name": preset.name, "family": fam.name, "params": n, "active_params": active,
                         "about": preset.about, "source": preset.source})
    return {"families": {f.name: f.about for f in families().values()},
            "model_types": {f.name: list(f.hf_model_types) for f in families().values()}, "presets": rows}
