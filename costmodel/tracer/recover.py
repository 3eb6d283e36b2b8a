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

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError
from ..families import Family, Model
from ..symbols import symbol
from .across import fit_across

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
