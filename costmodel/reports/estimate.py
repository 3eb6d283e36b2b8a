"""One model's exact numbers (:func:`estimate`) and the one place a model's numbers are resolved.

:func:`resolve` gives every symbol of a model's graph a whole number (B defaults to 1, T to the
model's context) and checks them; :func:`estimate` substitutes those numbers into the model's
:func:`~costmodel.reports.quantities.quantities` and nests the dotted keys into the JSON contract of
``costmodel estimate --json``. Numbers are exact Python ints (times and shares are floats).
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from ..errors import CostModelError
from ..families import Model, graph_symbols, load
from ..graph.analysis import check_values, tokens_per_step
from ..memory.policies import precision
from ..options import Options
from ..symbols import B, T
from .quantities import quantities
from .results import Estimate, nest


def model_for(model: Model | str, settings: Mapping[str, object] | None, options: Options) -> Model:
    """The model to count: a :class:`Model` as given, or ``load(spec, settings)`` with the activations'
    dtype of the precision policy when the family has a ``dtype`` option the settings leave alone."""
    if isinstance(model, Model):
        if settings:
            raise CostModelError("settings apply when a model is loaded by name; this Model is already built "
                                 "(load it again with the settings)")
        return model
    return load(model, settings, dtype=precision(options.precision).activations)


def resolve(m: Model, options: Options) -> dict[sympy.Symbol, int]:
    """An exact int for every symbol of ``m``'s graph: B from ``options.batch`` (default 1), T from
    ``options.seq`` (default the model's). Raises :class:`CostModelError` naming every symbol left without
    a value, and wherever a size does not divide (``check_values``).
    """
    values = dict(m.values)
    values[B] = options.batch if options.batch is not None else values.get(B, 1)
    used = graph_symbols(m.graph)
    if options.seq is not None:
        if T not in used:  # a ViT's tokens come from its image and patch sizes
            raise CostModelError(f"model {m.name!r} has no sequence length T for --seq: its tokens per step are "
                                 f"{tokens_per_step(m.graph)}; set those sizes with --set NAME=VALUE")
        values[T] = options.seq
    missing = sorted(str(s) for s in used if s not in values)
    if missing:
        raise CostModelError(f"model {m.name!r} needs a value for {', '.join(missing)}; "
                             f"give them with --set NAME=VALUE (or pick a preset: 'costmodel models')")
    for sym, v in values.items():
        if isinstance(v, bool) or not (isinstance(v, int) or getattr(v, "is_Integer", False)) or v <= 0:
            raise CostModelError(f"{sym}: expected a positive whole number, received {v}")
        values[sym] = int(v)
    check_values(m.graph, values)
    return values


def estimate(model: Model | str, *, settings: Mapping[str, object] | None = None,
             options: Options | None = None, **kwargs: object) -> Estimate:
    """Exact numbers for one step of ``model``: parameters, FLOPs, bytes, memory per device, time.

    ``settings`` set symbols or builder options of a named model (``{"d_ff": "8*d/3"}``); the other
    keywords are :class:`~costmodel.options.Options` (``batch``, ``seq``, ``tokens``, ``recompute``,
    ``flash``, ``tp``, ``hardware``...), or pass ``options=``.

    >>> r = estimate("gpt2-small", batch=1, seq=1024)
    >>> r["params"]["total"]  # 124,439,808: biases on, embeddings tied
    124439808
    """
    opts = Options.make(options, **kwargs)
    m = model_for(model, settings, opts)
    values = resolve(m, opts)
    flat = quantities(m, opts).evaluate(values)
    report = nest(flat)
    c = opts.counting
    report.update({
        "model": m.name,
        "family": m.family.name,
        "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
        "conventions": {"causal": c.causal, "embedding": c.embedding, "elementwise": c.elementwise,
                        "precision": opts.precision, "optimizer": opts.optimizer,
                        "attention": opts.attention, "recompute": opts.recompute,
                        "recompute_fraction": None if opts.recompute_fraction is None else str(opts.recompute_fraction),
                        "norm_stats": opts.norm_stats, "mfu_basis": opts.mfu_basis,
                        **({"logits": opts.logits} if opts.inference else {}),
                        "flop": "a multiply-add is 2 FLOPs",
                        "activations": flat.get("memory.conventions.activations",
                                                "saved for backward, no recompute, attention scores materialised")},
    })
    if m.preset is not None:
        report["source"] = m.preset.source
    return Estimate(report)
