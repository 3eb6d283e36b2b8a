"""A run prepared once (:func:`prepare`), the one place a model's numbers are resolved, and its formulas.

:func:`prepare` reads the device and its software stack (a misspelt ``--hardware`` or ``--stack`` fails
here, before anything is derived), loads the model for its settings, and hands down a :class:`Run`.

:func:`resolve` gives every symbol of a model's graph a whole number (B defaults to 1, T to the
model's context) and checks them; :func:`estimate` substitutes those numbers into the model's
:func:`~costmodel.sections.quantities.quantities` and nests the dotted keys into the JSON contract of
``costmodel estimate --json``. Numbers are exact Python ints (times and shares are floats).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from ..devices.run import run_device
from ..devices.table import Device
from ..errors import CostModelError
from ..families import Model, graph_symbols, load
from ..formulas.compiled import Formulas
from ..graph.analysis import check_values, tokens_per_step
from ..graph.finetune import freeze, lora, store_frozen
from ..options import Options
from ..options.policies import precision
from ..symbols import B, T
from .quantities import quantities


def model_for(model: Model | str, settings: Mapping[str, object] | None, options: Options) -> Model:
    """The model to count: a :class:`Model` as given, or ``load(spec, settings)`` with the activations'
    dtype of the precision policy when the family has a ``dtype`` option the settings leave alone."""
    if isinstance(model, Model):
        if settings:
            raise CostModelError(
                "settings apply when a model is loaded by name; this Model is already built "
                "(load it again with the settings)"
            )
        return finetuned(model, options)
    return finetuned(load(model, settings, dtype=precision(options.precision).activations, via=options.via), options)


def finetuned(m: Model, options: Options) -> Model:
    """``m`` with the fine-tuning options applied to its graph (:mod:`costmodel.graph.finetune`): the weights
    ``options.freeze`` names frozen, then LoRA adapters of rank ``options.lora`` on ``options.lora_targets``
    (every other weight frozen), and the frozen matmul weights of the layers stored as ``options.base_dtype``
    (QLoRA: nf4). ``m`` itself without them."""
    if options.lora is None and not options.freeze:
        return m
    G = m.graph
    if options.freeze:
        G = freeze(G, options.freeze)
    if options.lora is not None:
        G = lora(G, options.lora_targets, options.lora)
    if options.base_dtype is not None:
        G = store_frozen(G, options.base_dtype)
    choice = (
        "finetune",
        options.freeze,
        options.lora,
        options.lora_targets if options.lora else (),
        options.base_dtype,
    )
    return dataclasses.replace(m, graph=G, key=None if m.key is None else (*m.key, choice))


@dataclass(frozen=True)
class Run:
    """What every section of one run reads, prepared once: the model (loaded for its settings), the options,
    and the device with its software stack's sustained factor (None without ``hardware``)."""

    model: Model
    options: Options
    device: Device | None


def prepare(model: Model | str, settings: Mapping[str, object] | None, options: Options) -> Run:
    """The :class:`Run` of ``model`` under ``options``: the device and its stack checked first (they are read
    from the table, not derived), then the model loaded (:func:`model_for`)."""
    dev = None
    if options.hardware is not None:
        dev = run_device(options)  # the table's device, its stack's sustained factor, its cluster
    return Run(model_for(model, settings, options), options, dev)


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
            raise CostModelError(
                f"model {m.name!r} has no sequence length T for --seq: its tokens per step are "
                f"{tokens_per_step(m.graph)}; set those sizes with --set NAME=VALUE"
            )
        values[T] = options.seq
    missing = sorted(str(s) for s in used if s not in values)
    if missing:
        raise CostModelError(
            f"model {m.name!r} needs a value for {', '.join(missing)}; "
            f"give them with --set NAME=VALUE (or pick a preset: 'costmodel models')"
        )
    for sym, v in values.items():
        if isinstance(v, bool) or not (isinstance(v, int) or getattr(v, "is_Integer", False)) or v <= 0:
            raise CostModelError(f"{sym}: expected a positive whole number, received {v}")
        values[sym] = int(v)
    check_values(m.graph, values)
    return values


def estimate_formulas(model: Model | str, settings: Mapping[str, object] | None, opts: Options) -> Formulas:
    """Derive the quantities of ``model`` under ``opts`` and write them as formulas, with what a report of
    them shows (the model, its family and source, its own values, the symbols its graph uses)."""
    m = prepare(model, settings, opts).model
    # evaluated, never printed; with_meta: a copy, the formulas are shared by models of one graph
    f = quantities(m, opts, shown=False).formulas().with_meta({})
    values = {
        str(k): int(v)
        if (isinstance(v, int) and not isinstance(v, bool)) or getattr(v, "is_Integer", False)
        else str(v)
        for k, v in m.values.items()
    }  # anything but a whole number is refused when evaluated
    f.meta.update(
        {
            "model": m.name,
            "family": m.family.name,
            "source": m.preset.source if m.preset else ("traced" if m.via == "traced" else None),
            "notes": list(m.notes),
            "values": values,
            "graph_symbols": sorted(str(s) for s in graph_symbols(m.graph)),
            "tokens": str(tokens_per_step(m.graph)),
        }
    )
    return f
