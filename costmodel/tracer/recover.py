"""Formulas in a config's sizes: trace a model class at a few small configs and fit every size exactly.

Tracing fixes the config's sizes (d, L, h...) to numbers; only B and T stay symbolic. But every size in a
traced graph (an axis, a block count, a tensor autograd keeps) is a fixed function of the config's sizes,
and costs are sums of products of sizes. So the class is traced at ``samples`` configs whose listed sizes
vary, the folded graphs are aligned op by op (they must have the same structure), and each size, as a
polynomial in B and T, has each coefficient fitted exactly as a short sum of monomials in the config's
sizes (:func:`~.fit.fit_sparse`: ``h·d_head``, ``d/h``, ``L``). The fits are then checked on ``checks``
configs they did not see; the graph written with the fitted sizes is symbolic in the config's sizes, and
every analysis (FLOPs, parameters, memory, KV cache, roofline, LaTeX) gives formulas in them.

A size that no short monomial sum reproduces (a ``ceil``, a ``min``, a layer pattern that depends on L)
is reported as not polynomial, by op and axis, never guessed: :class:`Recovered` lists it and
:func:`recover` raises unless ``strict=False``.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError
from ..families import Family, Model
from ..symbols import B, T, symbol
from .fit import fit_sparse
from .fold import Run
from .ir import AXIS_ATTRS, TInput, TOp, order_of

HEADS = ("num_attention_heads", "n_head", "n_heads")
KV_HEADS = ("num_key_value_heads",)
HEAD_DIM = ("head_dim", "kv_channels")
WIDTH = ("hidden_size", "n_embd", "d_model")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K = ("num_experts_per_tok",)
POSITIONS = ("max_position_embeddings", "n_positions")


def sample_configs(sizes: Sequence[str], n: int, seed: int = 0) -> list[dict[str, int]]:
    """``n`` distinct assignments of small values to ``sizes`` that keep a model buildable: key/value heads
    divide the heads (by 2 or 3, so grouping never degenerates), a head dim is even (RoPE), the width is
    the heads times an even number (configs check it, ``head_dim`` given or not), top-k is below the expert
    count, a position table holds T, and no size is 1 (torch specialises 0 and 1). Each size walks its
    own list of values with its own stride, so every size varies across the samples."""
    rng = random.Random(seed)
    listed = set(sizes)
    lists = {
        "kv": [2, 3, 5],
        "rep": [2, 3],
        "heads": [2, 3, 4, 5, 6],
        "head_dim": [4, 6, 8, 10, 12],
        "layers": [2, 3, 4],
        "experts": [3, 4, 5, 6],
        "positions": [64, 96, 128, 160],
        "per_head": [4, 6, 8, 10],
        "width": [16, 24, 32, 40],
    }
    strides, primes = {}, [1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    for k, values in lists.items():  # a stride coprime with the list's length walks all of it
        strides[k] = next(p for p in primes if math.gcd(p, len(values)) == 1 and p not in strides.values())
    offsets = {k: rng.randrange(len(v)) for k, v in lists.items()}

    def pick(kind: str, i: int) -> int:
        values = lists[kind]
        return values[(offsets[kind] + i * strides[kind] + i // len(values)) % len(values)]

    out: list[dict[str, int]] = []
    seen: set[tuple] = set()
    i = 0
    while len(out) < n:
        v: dict[str, int] = {}
        g = pick("kv", i)
        heads = g * pick("rep", i) if listed & set(KV_HEADS) else pick("heads", i)
        for name in sizes:
            if name in KV_HEADS:
                v[name] = g
            elif name in HEADS:
                v[name] = heads
            elif name in HEAD_DIM:
                v[name] = pick("head_dim", i)
            elif name in LAYERS:
                v[name] = pick("layers", i)
            elif name in EXPERTS:
                v[name] = pick("experts", i)
            elif name in POSITIONS:
                v[name] = pick("positions", i)
            elif name in WIDTH:  # configs check that the heads divide the width, head_dim given or not
                v[name] = heads * pick("per_head", i) if listed & set(HEADS) else pick("width", i)
            elif name not in TOP_K:
                v[name] = rng.randint(6, 48)
        for name in sizes:
            if name in TOP_K:
                experts = next((v[e] for e in EXPERTS if e in v), 4)
                v[name] = 1 + (i + rng.randrange(2)) % (experts - 1)
        key = tuple(sorted(v.items()))
        if key not in seen:
            seen.add(key)
            out.append(v)
        i += 1
    return out


@dataclass
class Recovered:
    """What recovery found: the model (symbolic in the sizes), the sizes' symbols, what is not polynomial."""

    model: Model
    symbols: dict[str, sympy.Symbol]
    samples: list[dict[str, int]]
    checks: list[dict[str, int]]
    not_polynomial: list[str] = field(default_factory=list)


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


def fit_across(
    traced: Sequence, points: Sequence[Mapping[str, int]], names: Sequence[str], samples: int, what: str, by: str
) -> tuple[object, list[str]]:
    """One Traced whose every size is fitted exactly in ``names`` across ``traced`` (traced at ``points``): the
    first ``samples`` fit, the rest check; and the sizes no fit reproduces (left at the first trace's value).

    The traces must have one structure, op by op (else an error naming the first op that differs: an op or a
    layer pattern depends on ``by``)."""
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
            raise CostModelError(
                f"recover: the traced structure of {what} changes with {by} (at {dict(values)} against "
                f"{dict(points[0])}, first at {where}): an op or a layer pattern depends on them, so one "
                f"symbolic graph cannot describe them all; fix {by} that change it"
            )
    slots = [_slots(t) for t in traced]
    fitted, missing, cache = [], [], {}
    for j, (label, _) in enumerate(slots[0]):
        values = tuple(s[j][1] for s in slots)
        if values not in cache:
            expr = _fit_value(names, points[:samples], values[:samples])
            if expr is not None:  # checked on the points the fit did not see
                subs = [{sympy.Symbol(n, positive=True, integer=True): p[n] for n in names} for p in points[samples:]]
                if any(sympy.expand(expr.xreplace(s) - v) != 0 for s, v in zip(subs, values[samples:])):
                    expr = None
            cache[values] = expr
        expr = cache[values]
        if expr is None:
            missing.append(f"{label}: {', '.join(map(str, values))} at the sample points")
            expr = values[0]
        fitted.append(expr.xreplace({sympy.Symbol(n, positive=True, integer=True): symbol(n) for n in names}))
    result = copy.deepcopy(traced[0])
    _set_slots(result, fitted)
    return result, missing


#: At most this many traced configs (each takes seconds: 100,000 ran for hours).
MAX_SAMPLES = 64


def recover(
    config_class: object,
    sizes: Sequence[str],
    *,
    base: Mapping[str, object] | None = None,
    samples: int = 6,
    checks: int = 2,
    seed: int = 0,
    attn: str = "eager",
    labels: bool = True,
    strict: bool = True,
    symbols: Mapping[str, str] | None = None,
) -> Recovered:
    """Recover the formulas of ``config_class`` (``"transformers:Qwen3Config"``) in the config fields ``sizes``.

    ``base``: values of the other fields (default: the class's own defaults). ``symbols``: field → symbol
    name (default :data:`~.hf.FIELDS`, e.g. ``hidden_size`` → ``d``; otherwise the field's name). Traces
    ``samples + checks`` configs (a few seconds each). ``strict``: raise if a size is not recovered.
    """
    for name, n, low in (("samples", samples, 1), ("checks", checks, 0)):
        if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= MAX_SAMPLES:
            raise CostModelError(
                f"recover: {name} = {n!r}; expected {low} to {MAX_SAMPLES} configs (each is a trace of seconds)"
            )
    from . import read_module, write  # deferred: the tracer's modules import each other
    from .hf import FIELDS, causal_lm, example_inputs  # deferred: the tracer's modules import each other
    from .hf import config_class as resolve_class  # deferred: the tracer's modules import each other

    cls = resolve_class(config_class)
    default = cls().to_dict()
    unknown = [s for s in sizes if s not in default]
    if unknown:
        raise CostModelError(f"recover: {cls.__name__} has no field {unknown[0]!r}; sizes must be config fields")
    names = {s: (symbols or {}).get(s) or FIELDS.get(s) or s for s in sizes}
    configs = sample_configs(list(sizes), samples + checks, seed)
    traced = []
    for values in configs:
        cfg = cls(**{**dict(base or {}), **values})
        model = causal_lm(cfg, attn=attn)
        inputs, dynamic, ranges = example_inputs(cfg, labels=labels)
        traced.append(read_module(model, inputs, dynamic, ranges=ranges, name=cls.__name__.removesuffix("Config")))
    points = [{names[k]: v for k, v in c.items()} for c in configs]
    fit_names = [names[s] for s in sizes]
    result, missing = fit_across(traced, points, fit_names, samples, cls.__name__, "the sizes")
    if missing and strict:
        raise CostModelError(
            f"recover: {len(missing)} size(s) of {cls.__name__} are not polynomial in "
            f"{', '.join(sizes)} (a ceil, a min, or a size not listed): " + "; ".join(missing[:5])
        )
    result.values = {symbol(names[s]): default[s] for s in sizes if isinstance(default[s], int)}
    G = write(result)
    family = Family(
        f"recovered:{cls.__name__}",
        lambda: G,
        f"{cls.__name__} traced at {len(configs)} configs, sizes {', '.join(sizes)} recovered exactly",
    )
    model = Model(cls.__name__.removesuffix("Config"), G, dict(result.values), family)
    return Recovered(model, {s: symbol(names[s]) for s in sizes}, configs[:samples], configs[samples:], missing)
