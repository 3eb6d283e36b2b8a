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
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from importlib.metadata import entry_points

import networkx as nx
import sympy

from .. import sizes
from ..errors import CostModelError, closest
from ..expr import check_budget, parse_value
from ..files import read_capped
from ..graph.analysis import as_int, evaluate, parameters
from ..options import check_settings

ENTRY_POINT_GROUP = "costmodel.architectures"
#: Where a model that is no family's graph is traced: ``module`` (a PyTorch module and its inputs,
#: :func:`costmodel.tracer.trace`) and ``config`` (a config.json transformers knows,
#: :func:`costmodel.tracer.hf.trace_config`). A plug-in point, as the architectures are: the tracer sits a layer
#: above this package (it builds Family and Model records), so this package finds it by its entry points.
TRACER_GROUP = "costmodel.tracers"


@dataclass(frozen=True)
class Preset:
    """A named, sourced configuration of a family."""

    name: str
    family: str
    config: Mapping[str, object]
    source: str
    about: str = ""
    aliases: tuple[str, ...] = ()  # the familiar ids (Hugging Face "gpt2", "meta-llama/Llama-2-7b-hf"); no hub


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
        return {
            n: p.default
            for n, p in inspect.signature(self.build).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }


@functools.lru_cache(maxsize=1)
def families() -> dict[str, Family]:
    """Every family registered under the ``costmodel.architectures`` entry-point group.

    A plugin that fails to load is left out and named (:func:`broken_plugins`), never a crash. A plain
    checkout that was never installed has no entry points: the architectures in the ``graphs/`` folder beside
    ``costmodel/`` are loaded directly, as ``costmodel_graphs``.
    """
    found: dict[str, Family] = {}
    _BROKEN.clear()
    # the same distribution seen twice (an editable install plus a venv, say) is one source
    unique = {(ep.name, ep.value): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    sources = [
        (f"entry point {ep.name} ({ep.value})", ep.load)
        for ep in unique.values()
        if not ep.value.startswith("costmodel_graphs")
    ]
    bundled = [
        f"entry point {ep.name} ({ep.value})" for ep in unique.values() if ep.value.startswith("costmodel_graphs")
    ]
    # costmodel's own architectures: through their entry point when installed, else from a checkout's graphs/
    sources.insert(0, (bundled[0] if bundled else "the bundled graphs/ folder", _bundled))
    for where, load_plugin in sources:
        try:
            provided = load_plugin()()
        except Exception as exc:  # a plugin's own bug or a stale install: name it, keep the others
            _BROKEN[where] = f"{type(exc).__name__}: {exc}"
            continue
        for fam in provided:
            if fam.name in found:
                raise CostModelError(f"architecture family {fam.name!r} is registered twice (again by {where})")
            found[fam.name] = fam
    return found


_BROKEN: dict[str, str] = {}


def broken_plugins() -> dict[str, str]:
    """Architecture plugins that failed to load, with why (after :func:`families` ran)."""
    families()
    return dict(_BROKEN)


def _bundled():
    """``graphs/architectures`` of a checkout beside this package, imported as ``costmodel_graphs``."""
    try:
        import costmodel_graphs  # an installed copy (a wheel without its entry point metadata)

        return costmodel_graphs.architectures
    except ModuleNotFoundError:  # a plain checkout: the folder is graphs/, the package name costmodel_graphs
        pass
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "graphs")
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        raise CostModelError(
            "no architectures installed: expected the costmodel_graphs package (pip install "
            "costmodel) or a checkout with its graphs/ folder"
        )
    spec = importlib.util.spec_from_file_location("costmodel_graphs", init, submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["costmodel_graphs"] = module
    spec.loader.exec_module(module)
    return module.architectures


def aliases() -> dict[str, str]:
    """Familiar ids (Hugging Face model ids) → preset names; offline, nothing is downloaded."""
    out: dict[str, str] = {}
    for p in presets().values():
        for alias in p.aliases:
            if alias in out and out[alias] != p.name:
                raise CostModelError(f"alias {alias!r} names two presets: {out[alias]!r} and {p.name!r}")
            out[alias] = p.name
    return out


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
    key: tuple | None = None  # the graph's identity (family, builder options) when that determines it: a cache key
    notes: tuple[str, ...] = ()  # what reading a config.json did (a wrapper's vision tower not counted, defaults)
    via: str = "family"  # how the graph was made: "family" (a builder) or "traced" (torch.export of the module)


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
        raise CostModelError(
            f"{where}: option {name!r} must be a size (a number or an expression of symbols), received {value!r}"
        )
    return value


def _bounded(config: Mapping[str, object], opts: Mapping[str, object], where: str) -> dict[str, object]:
    """The config with every size bounded before anything is built: a symbol's value is a number (or an
    expression) of magnitude at most 10^MAX_DIGITS, and an expression has the numbers of the config's sized
    symbols substituted first (``d_ff=(d+h+V)**64`` of a preset is one number, never an expansion), then
    must fit the expansion budget of :func:`costmodel.expr.check_budget`."""
    known = {k: v for k, v in config.items() if k not in opts and isinstance(v, int) and not isinstance(v, bool)}
    out = {}
    for k, v in config.items():
        if k not in opts or not isinstance(opts[k], (bool, str)):  # a symbol, or a size option (d_ff)
            if isinstance(v, (bool, str)) and k not in opts:
                raise CostModelError(
                    f"{where}: {k}: expected a positive whole number or an expression of "
                    f"symbols (a size), received {v!r}"
                )
            if isinstance(v, sympy.Expr) and not v.is_Number:
                try:
                    check_budget(v, f"setting {k}")
                except CostModelError:  # over the budget as symbols: put in the numbers known (xreplace: no expansion)
                    subs = {s: sympy.Integer(known[s.name]) for s in v.free_symbols if s.name in known}
                    if not subs:
                        raise
                    v = v.xreplace(subs)
                    check_budget(v, f"setting {k}")
                if v.is_Integer:
                    v = int(v)
            number = v if isinstance(v, (int, Fraction)) else v if isinstance(v, sympy.Rational) else None
            if number is not None and not isinstance(number, bool) and abs(number) > 10**sizes.MAX_DIGITS:
                raise CostModelError(
                    f"{where}: setting {k!r} = about 10^{len(str(abs(int(number)))) - 1} is out "
                    f"of range; expected a size of at most 10^{sizes.MAX_DIGITS}"
                )
        out[k] = v
    return out


def _build(
    fam: Family, config: Mapping[str, object], where: str, cache: bool = True
) -> tuple[nx.DiGraph, dict, tuple | None]:
    """Build with the config's builder options; the rest must be symbols the graph uses.

    Returns the graph, the values of its symbols and the graph's identity (the family and its builder
    options) when the builder is known to be a pure function of them (``cache``): the same identity is the
    same graph, built once per process.
    """
    opts = fam.options
    traced: dict = {}
    config = _bounded(config, opts, where)
    options, sized = {}, {}
    for k, v in config.items():
        if k not in opts:
            continue
        v = _option(k, v, opts[k], where)
        if isinstance(opts[k], sympy.Symbol) and (isinstance(v, int) or getattr(v, "is_Integer", False)):
            sized[opts[k]] = v  # a size option defaulting to a symbol (d_ff): keep the symbol, give it the number
        else:
            options[k] = v
    key = (fam.name, _frozen(options)) if cache else None
    if key is not None and key[1] is None:
        key = None
    if key is not None and key in _GRAPHS:
        graph = _GRAPHS[key]
    else:
        graph = fam.build(**options)
        if _made_module(graph):  # a factory of a PyTorch module (module, example_inputs[, dynamic]): traced
            trace = tracer("module")
            traced_model = trace(graph[0], graph[1], graph[2] if len(graph) == 3 else "B,T", name=fam.name)
            graph, traced = traced_model.graph, dict(traced_model.values)
        if not isinstance(graph, nx.DiGraph):
            raise CostModelError(
                f"{where}: the builder returned {type(graph).__name__}; expected the networkx.DiGraph of a "
                "GraphBuilder (return b.graph), or (module, example_inputs) of a PyTorch module to trace"
            )
        if not nx.is_directed_acyclic_graph(graph):  # every analysis orders the ops: a cycle has no order
            cycle = " -> ".join(str(u) for u, _ in nx.find_cycle(graph))
            raise CostModelError(f"{where}: the builder's graph has a cycle ({cycle:.200}); expected ops in data order")
        if key is not None:
            if len(_GRAPHS) >= 64:
                _GRAPHS.pop(next(iter(_GRAPHS)))
            _GRAPHS[key] = graph
    used = {str(s): s for s in graph_symbols(graph)}
    values = {}
    for name, value in config.items():
        if name in opts:
            continue
        if name not in used:
            known = sorted(set(opts) | set(used))
            raise CostModelError(
                f"{where}: unknown setting {name!r}{closest(name, known)}; expected a symbol "
                f"of the graph or an option of family {fam.name!r}: {', '.join(known)}"
            )
        values[used[name]] = value
    values.update({sym: v for sym, v in sized.items() if sym in used.values()})
    values = {**traced, **values}  # a traced module's own values (T's bound) under the settings
    return graph, values, key


def tracer(name: str):
    """The tracer registered as ``name`` under the ``costmodel.tracers`` entry-point group (:data:`TRACER_GROUP`)."""
    found = [ep for ep in entry_points(group=TRACER_GROUP) if ep.name == name]
    if not found:
        raise CostModelError(
            f"no tracer {name!r} is registered (entry-point group {TRACER_GROUP!r}): reinstall costmodel "
            "(pip install 'costmodel[torch]')"
        )
    return found[0].load()


def _made_module(made: object) -> bool:
    """Whether a builder returned ``(module, example_inputs[, dynamic])`` of a PyTorch module (not a graph)."""
    return (
        isinstance(made, tuple)
        and len(made) in (2, 3)
        and hasattr(made[0], "named_parameters")
        and isinstance(made[1], Mapping)
    )


#: A builder file larger than this is not a builder someone wrote (it is refused before Python reads it).
MAX_BUILDER_BYTES = 16 * 2**20

#: Graphs built by a family's builder, by (family, builder options); graphs are never changed after they
#: are built (passes return copies).
_GRAPHS: dict[tuple, nx.DiGraph] = {}


def load(
    spec: str, settings: Mapping[str, object] | None = None, *, dtype: str | None = None, via: str | None = None
) -> Model:
    """Build the model named ``spec`` with ``settings`` on top.

    ``spec`` is a preset, a family, a Hugging Face ``config.json`` or
    ``path/to/file.py:builder`` (a user's builder function: the file is executed).
    ``settings`` maps a symbol name (``"d"``) or a builder option (``"tied"``)
    to a value: a number, a bool, a name, a sympy expression, or a string read by the restricted
    parser (``"8*d/3"``, ``"true"``, ``"fp32"``); presets' own config comes first, settings override it.
    ``dtype``: the activations' dtype when the family has a ``dtype`` option the settings leave alone.
    ``via``: how a ``config.json`` is read, ``"family"`` (a built-in family, else an error) or ``"trace"`` (its
    transformers model built on meta and traced: needs ``costmodel[torch]``); default: the family where one
    reads its model type, else traced when torch is installed.
    """
    if not isinstance(spec, str):
        raise CostModelError(
            f"model: expected a preset, family, config.json or file.py:builder name, received {spec!r}"
        )
    settings = parse_settings(settings)
    fams, pres = families(), presets()
    got = None  # a config.json's reading
    if spec not in pres and spec not in fams and spec in aliases():
        spec = aliases()[spec]
    if spec not in pres and spec not in fams and not os.path.exists(spec):
        spec = _case_insensitive(spec, pres, fams)
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "config.json")):
        spec = os.path.join(spec, "config.json")  # a Hugging Face model folder: its config.json
    if via == "trace" and not spec.endswith(".json"):
        raise CostModelError(
            f"model {spec!r}: via 'trace' traces a config.json's transformers model; expected a config.json "
            "(a module of your own: 'costmodel trace FILE.py:factory')"
        )
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
        got = read_config(spec, fams, via)
        if got.traced is not None:
            return _traced(spec, got, settings, dtype)
        fam, config = got.family, {**got.settings, **settings}
    elif is_builder_spec(spec):
        preset, fam = None, load_builder(spec)
        config = settings
    else:
        broken = "".join(f"; {where} failed to load ({why})" for where, why in _BROKEN.items())
        raise CostModelError(
            f"unknown model {spec!r}{closest(spec, [*pres, *fams, *aliases()])}; "
            f"see 'costmodel models' for the {len(pres)} presets and {len(fams)} families{broken}"
        )
    if dtype is not None and "dtype" in fam.options and "dtype" not in settings:
        config["dtype"] = dtype
    graph, values, key = _build(fam, config, f"model {spec!r}", cache=not is_builder_spec(spec))
    if got is None:
        return Model(spec, graph, values, fam, preset, key)
    if got.checkpoint is not None:  # the shared graph stays as built: a copy carries how the checkpoint stores it
        graph = graph.copy()
        graph.graph["checkpoint"] = got.checkpoint
        key = None if key is None else (*key, ("checkpoint", repr(got.checkpoint)))
    return Model(spec, graph, values, fam, preset, key, got.notes)


#: Traced config.json graphs, by (the file's data, dtype): tracing takes seconds, the file is read each time.
_TRACED: dict[str, tuple] = {}


def _traced(spec: str, got: object, settings: Mapping[str, object], dtype: str | None) -> Model:
    """The model of a config.json traced (:func:`costmodel.tracer.hf.trace_config`), built once per process for
    one file content and dtype; settings may set its symbols (B, T), not the config's sizes (fixed by tracing)."""
    import hashlib  # deferred: only a traced config needs its hash
    import json  # deferred: as hashlib

    digest = hashlib.sha256(json.dumps([got.traced, dtype], sort_keys=True, default=str).encode()).hexdigest()
    if digest not in _TRACED:
        trace_config = tracer("config")
        if len(_TRACED) >= 16:
            _TRACED.pop(next(iter(_TRACED)))
        _TRACED[digest] = trace_config(got.traced, f"config {spec!r}", dtype)
    traced, note = _TRACED[digest]
    where = f"model {spec!r}"
    used = sorted(str(s) for s in graph_symbols(traced.graph))
    unknown = [name for name in settings if name not in used]
    if unknown:
        raise CostModelError(
            f"{where}: unknown setting {unknown[0]!r}; a traced config's sizes are the file's (edit it to change "
            f"them), its symbols are {', '.join(used)}"
        )
    _, values, _ = _build(traced.family, settings, where, cache=False)
    graph = traced.graph
    if got.checkpoint is not None:  # the shared graph stays as built: a copy carries how the checkpoint stores it
        graph = graph.copy()
        graph.graph["checkpoint"] = got.checkpoint
    key = ("traced", digest, repr(got.checkpoint))
    values = {**traced.values, **values}
    return Model(spec, graph, values, traced.family, None, key, (note, *traced.notes, *got.notes), via="traced")


def _case_insensitive(spec: str, pres: Mapping[str, Preset], fams: Mapping[str, Family]) -> str:
    """The preset or family ``spec`` names in another case (``Llama3-8B``, ``META-LLAMA/Meta-Llama-3-8B``), when
    exactly one name matches; else ``spec`` unchanged (the unknown-model error then names the closest)."""
    lowered = spec.casefold()
    hits = {n for n in (*pres, *fams) if n.casefold() == lowered}
    hits |= {target for alias, target in aliases().items() if alias.casefold() == lowered}
    return hits.pop() if len(hits) == 1 else spec


def _frozen(config: Mapping[str, object]) -> tuple | None:
    try:
        items = tuple(sorted(config.items()))
        hash(items)
        return items
    except TypeError:
        return None


def parse_settings(settings: Mapping[str, object] | None) -> dict[str, object]:
    """Settings with string values read by the restricted parser (never ``eval``): ``"8*d/3"`` is an
    expression of symbols, ``"true"``/``"false"`` a bool, a bare name (``"fp32"``) a name."""
    out: dict[str, object] = {}
    for name, value in dict(check_settings(settings) or {}).items():
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
    path, _, name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise CostModelError(f"model {spec!r}: no file {path!r}; expected path/to/file.py:builder_function")
    read_capped(path, MAX_BUILDER_BYTES, "builder file")  # a regular file of sane size, before Python opens it
    module_name = "costmodel_user_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # so that dataclasses and pickling inside the file work
    try:
        loader_spec.loader.exec_module(module)
    except CostModelError:
        raise
    except (Exception, SystemExit, GeneratorExit) as exc:  # the user's code: one line, like any other bad input
        raise CostModelError(f"model {spec!r}: running {path!r} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module_name)
        raise CostModelError(
            f"model {spec!r}: {path!r} has no function {name!r}{closest(name, found)}; "
            f"functions defined there: {', '.join(found) or 'none'}"
        )

    @functools.wraps(fn)
    def build(**options: object) -> object:
        try:
            return fn(**options)
        except CostModelError:
            raise
        except (Exception, SystemExit, GeneratorExit) as exc:  # a bug in the user's builder (sys.exit too): one line
            raise CostModelError(f"model {spec!r}: the builder raised {type(exc).__name__}: {exc}") from None

    return Family(name, build, f"user builder {name} from {path}")


def catalogue() -> dict[str, object]:
    """Every family (with its Hugging Face model types) and every preset with its exact parameter counts:
    what ``costmodel models`` lists."""
    rows = []
    for fam in families().values():
        for preset in fam.presets:
            m = load(preset.name)
            params, params_active = parameters(m.graph)  # the counts only: the FLOPs are not listed
            n = as_int(evaluate(params, m.values), "params")
            active = as_int(evaluate(params_active, m.values), "active params")
            rows.append(
                {
                    "name": preset.name,
                    "family": fam.name,
                    "params": n,
                    "active_params": active,
                    "about": preset.about,
                    "source": preset.source,
                }
            )
    return {
        "families": {f.name: f.about for f in families().values()},
        "model_types": {f.name: list(f.hf_model_types) for f in families().values()},
        "presets": rows,
    }
