"""Reports: one model's numbers (:func:`estimate`) or one family's formulas (:func:`derive`).

Both return plain nested dicts, the shape of ``costmodel estimate --json`` and
``costmodel derive --format json``: keys named in the issues are a contract.
Numbers in :func:`estimate` are exact Python ints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from .analysis import Totals, as_int, breakdown, check_values, evaluate, totals
from .errors import CostModelError
from .models import Model, graph_symbols, load
from .ops import Conventions
from .symbols import SYMBOLS, B, T, describe
from .timing import time_section
from .training import model_state_bytes, precision


def quantities(t: Totals, policy: str = "bf16-mixed", optimizer: str = "adamw") -> dict[str, sympy.Expr]:
    """The headline quantities of one training step, as expressions, by dotted key."""
    states = model_state_bytes(t.params, policy, optimizer)
    q = {
        "params.total": t.params,
        "params.embedding": t.params_embedding,
        "params.non_embedding": t.params_non_embedding,
        # active: what one token uses (a mixture of experts: top_k of n_experts), embeddings
        # included (Mixtral's "12.9B active"); active_non_embedding drops the embedding
        # tables and is the N of 6·N·D. Dense models: active = total.
        "params.active": t.params if t.params_active is None else t.params_active,
        "params.active_non_embedding": t.params_active_non_embedding,
        "flops.forward": t.forward.flops,
        "flops.backward": t.backward.flops,
        "flops.training": t.training.flops,
        "flops.six_nd": 6 * t.params_active_non_embedding * B * T,
        "flops.matmul.forward": t.forward.matmul_flops,
        "flops.matmul.backward": t.backward.matmul_flops,
        "flops.matmul.training": t.training.matmul_flops,
        "bytes.forward": t.forward.bytes,
        "bytes.backward": t.backward.bytes,
        "memory_bytes.params": states["params"],
        "memory_bytes.grads": states["grads"],
        "memory_bytes.optimizer": states["optimizer"],
        "memory_bytes.activations": t.activations,
    }
    q["memory_bytes.total"] = sum(q[f"memory_bytes.{k}"] for k in ("params", "grads", "optimizer", "activations"))
    return {k: sympy.expand(v) for k, v in q.items()}


def nest(flat: Mapping[str, object]) -> dict:
    """``{"a.b": 1}`` → ``{"a": {"b": 1}}``."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def flatten(obj: Mapping, prefix: str = "") -> dict[str, object]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (the inverse of :func:`nest`)."""
    out: dict[str, object] = {}
    for k, v in obj.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _settings_for(model: Model | str, settings: Mapping[str, object] | None, policy: str) -> Model:
    if isinstance(model, Model):
        return model
    settings = dict(settings or {})
    from .models import families, presets

    pres = presets()
    fam = families()[pres[model].family] if model in pres else families().get(model)
    if fam is not None and "dtype" in fam.options and "dtype" not in settings:
        settings["dtype"] = precision(policy).activations
    return load(model, settings)


def resolve(model: Model | str, *, batch: int | None = None, seq: int | None = None,
            settings: Mapping[str, object] | None = None,
            policy: str = "bf16-mixed") -> tuple[Model, dict[sympy.Symbol, int]]:
    """The model and an exact int for every symbol of its graph (B defaults to 1, T to the preset's).

    Raises :class:`CostModelError` naming every symbol left without a value.
    """
    m = _settings_for(model, settings, policy)
    values = dict(m.values)
    if batch is not None:
        values[B] = batch
    values.setdefault(B, 1)
    if seq is not None:
        values[T] = seq
    missing = sorted(str(s) for s in graph_symbols(m.graph) if s not in values)
    if missing:
        raise CostModelError(f"model {m.name!r} needs a value for {', '.join(missing)}; "
                             f"give them with --set NAME=VALUE (or pick a preset: 'costmodel models')")
    for sym, v in values.items():
        if isinstance(v, bool) or not (isinstance(v, int) or getattr(v, "is_Integer", False)) or v <= 0:
            raise CostModelError(f"{sym}: expected a positive whole number, received {v}")
        values[sym] = int(v)
    check_values(m.graph, values)
    return m, values


@dataclass(frozen=True)
class Step:
    """What a report section sees: the model, the numbers for its symbols, the options.

    ``options`` holds every keyword given to :func:`estimate` beyond the model
    and its sizes (``policy``, ``optimizer``, ``tokens``, ``conventions``, and
    whatever later sections read, such as a hardware name).
    """

    model: Model
    values: Mapping[sympy.Symbol, int]
    options: Mapping[str, object]

    @property
    def conventions(self) -> Conventions:
        return self.options.get("conventions") or Conventions()

    def totals(self) -> Totals:
        return totals(self.model.graph, self.conventions)

    def number(self, expr: sympy.Expr, what: str) -> int:
        """An expression of the graph's symbols as an exact int for this step."""
        return as_int(evaluate(expr, self.values, what), what)


def counts_section(step: Step, report: Mapping[str, object]) -> dict[str, object]:
    """``params.*``, ``flops.*``, ``bytes.*`` and the default ``memory_bytes.*``."""
    q = quantities(step.totals(), str(step.options.get("policy", "bf16-mixed")),
                   str(step.options.get("optimizer", "adamw")))
    flat: dict[str, object] = {k: step.number(v, k) for k, v in q.items()}
    step_tokens = step.values[B] * step.values[T]
    tokens = step.options.get("tokens")
    if tokens is not None:
        for key in ("flops.training", "flops.matmul.training"):
            per_token = sympy.Rational(flat[key], step_tokens)  # every term of a step carries B*T
            flat[key + "_total"] = as_int(per_token * tokens, key + "_total")
        flat["flops.six_nd"] = 6 * flat["params.active_non_embedding"] * tokens
    total = flat.get("flops.training_total", flat["flops.training"])
    flat["flops.six_nd_share"] = float(sympy.Rational(flat["flops.six_nd"], total)) if total else 0.0
    flat["tokens.per_step"] = step_tokens
    flat["tokens.total"] = tokens
    return flat


def memory_section(step: Step, report: Mapping[str, object]) -> dict[str, object]:
    """``memory_bytes.*`` per device (precision, optimizer, recompute, flash, layout, inference)."""
    from .budget import memory_section as section

    return section(step, report)


#: The sections of an estimate, in order; each adds flat dotted keys.
SECTIONS: list[Callable[[Step, Mapping[str, object]], dict[str, object]]] = [counts_section, memory_section, time_section]


def estimate(model: Model | str, *, batch: int | None = None, seq: int | None = None,
             settings: Mapping[str, object] | None = None, **options: object) -> dict:
    """Exact numbers for one training step of ``batch`` sequences of ``seq`` tokens.

    Options: ``tokens`` (D: adds ``flops.training_total``), ``policy``,
    ``optimizer``, ``conventions``, and those of later sections.

    >>> r = estimate("gpt2-small", batch=1, seq=1024)
    >>> r["params"]["total"]  # 124,439,808: biases on, embeddings tied
    124439808
    """
    options.setdefault("policy", "bf16-mixed")
    options.setdefault("optimizer", "adamw")
    options.setdefault("conventions", Conventions())
    m, values = resolve(model, batch=batch, seq=seq, settings=settings, policy=str(options["policy"]))
    step = Step(m, values, options)
    flat: dict[str, object] = {}
    for section in SECTIONS:
        flat.update(section(step, flat))
    report = nest(flat)
    conv = step.conventions
    report.update({
        "model": m.name,
        "family": m.family.name,
        "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
        "conventions": {"causal": conv.causal, "embedding": conv.embedding, "elementwise": conv.elementwise,
                        "precision": options["policy"], "optimizer": options["optimizer"],
                        "flop": "a multiply-add is 2 FLOPs",
                        "activations": flat.get("memory.conventions.activations",
                                                "saved for backward, no recompute, attention scores materialised")},
    })
    if m.preset is not None:
        report["source"] = m.preset.source
    return report


def derive(model: Model | str, *, settings: Mapping[str, object] | None = None, policy: str = "bf16-mixed",
           optimizer: str = "adamw", conventions: Conventions = Conventions()) -> dict:
    """The symbolic formulas of a family (or a preset's structure), as sympy expressions.

    Returns ``{"symbols": {name: meaning}, "expressions": {key: expr},
    "ops": {name: {kind, count, flops, bytes, intensity}}}``.
    """
    m = _settings_for(model, settings, policy)
    # symbols the user set (--set L=12) are substituted; a preset's or family's own values are not,
    # so `derive gpt2-small` shows the structure's formulas
    given = {s: sympy.Integer(v) if isinstance(v, int) else v for s, v in m.values.items()
             if str(s) in (settings or {})}
    check_values(m.graph, given)
    fix = lambda e: sympy.expand(e.xreplace(given))  # noqa: E731
    q = quantities(totals(m.graph, conventions), policy, optimizer)
    from .budget import memory_expressions

    q.update(memory_expressions(m.graph, conventions))
    q = {k: fix(v) for k, v in q.items()}
    ops = {}
    for name, c in breakdown(m.graph, conventions).items():
        data = m.graph.nodes[name]
        per_run = (c.forward * (1 / data["count"])).map(fix)
        ops[name] = {"kind": data["op"].kind, "pattern": data["op"].pattern, "count": fix(data["count"]),
                     "flops": per_run.flops, "bytes": per_run.bytes,
                     "intensity": per_run.intensity, "params": fix(c.params / data["count"])}
    used = set().union(*(e.free_symbols for e in q.values()),
                       *(v["count"].free_symbols for v in ops.values() if hasattr(v["count"], "free_symbols")))
    symbols = {str(s): describe(str(s)) if str(s) in SYMBOLS else "user symbol"
               for s in sorted(used, key=str)}
    return {"model": m.name, "family": m.family.name, "symbols": symbols, "expressions": q, "ops": ops,
            "conventions": {"causal": conventions.causal, "precision": policy, "optimizer": optimizer}}
