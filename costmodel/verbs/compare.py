"""Named counting conventions, side by side: why tools disagree about FLOPs.

Every published rule for "training FLOPs" is the same graph counted with
different choices. Here each is *derived by the engine* from the model's graph
with the choices written down (:class:`~costmodel.options.Counting` for op-level
choices, plus how the step is counted), and the symbolic difference between any
two is an exact sympy expression.

Two ways of counting appear in the literature:

``method="ops"``
    sum every op's FLOPs (forward + backward) under the op-level choices, plus,
    when ``recompute`` is set, the forward of every op inside a repeated block
    again (full activation checkpointing of each layer, as Megatron counts it);
``method="params"``
    6 FLOPs per non-embedding parameter per token (2 forward, 4 backward), plus,
    when ``attention`` is set, 3 × the forward FLOPs of the activation ×
    activation contractions (the T-dependent attention term) under the
    convention's causal choice.

>>> from costmodel.conventions import CONVENTIONS
>>> {'6nd', '6nd-total', 'chinchilla', 'engine'} <= set(CONVENTIONS)
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx
import sympy

from ..conventions import CONVENTIONS, Convention, convention
from ..errors import CostModelError
from ..families import Model
from ..graph.analysis import as_int, evaluate, tokens_per_step
from ..memory.activations import activations
from ..memory.states import model_state
from ..options import Options
from ..render.results import Comparison
from ..sections.counts import n_params, position_tables, routers, training_flops  # noqa: F401 (the API)
from ..sections.run import prepare, resolve


def activation_bytes(G: nx.DiGraph, conv: Convention) -> sympy.Expr:
    """Bytes saved for backward under ``conv``: everything, or with ``recompute`` (full
    activation checkpointing) only each repeated block's inputs and what ops outside the blocks save."""
    return sympy.expand(activations(G, "full" if conv.recompute else "none", conv.ops).bytes)


def quantities(G: nx.DiGraph, conv: Convention) -> dict[str, sympy.Expr]:
    """``flops.training`` and ``memory_bytes.*`` of one step under ``conv``, as expressions; for a convention
    that counts 6 per parameter, ``params.convention``: its N."""
    states = model_state(G, conv.policy, "adamw")
    q = {
        "flops.training": training_flops(G, conv),
        "memory_bytes.model_states": sympy.expand(states["params"] + states["grads"] + states["optimizer"]),
        "memory_bytes.activations": activation_bytes(G, conv),
    }
    q["memory_bytes.total"] = sympy.expand(q["memory_bytes.model_states"] + q["memory_bytes.activations"])
    if conv.method == "params":  # the N the convention counts, as its source prints it (Kaplan's, nanoGPT's)
        q["params.convention"] = sympy.expand(n_params(G, conv.params, conv.ops))
    return q


def difference(G: nx.DiGraph, a: str | Convention, b: str | Convention, key: str = "flops.training") -> sympy.Expr:
    """``key`` under ``a`` minus under ``b``, exact and expanded (0 when they agree)."""
    ca = a if isinstance(a, Convention) else convention(a)
    cb = b if isinstance(b, Convention) else convention(b)
    return sympy.expand(quantities(G, ca)[key] - quantities(G, cb)[key])


def compare(G: nx.DiGraph, names: Iterable[str] | None = None) -> dict[str, dict[str, sympy.Expr]]:
    """Quantities per named convention (all of them by default), plus each one's difference from
    the first, per token (``flops.training`` / (B·T)) under the key ``"per_token_minus_first"``."""
    names = list(names or CONVENTIONS)
    if not names:
        raise CostModelError("compare: expected at least one convention name, received none")
    rows = {n: quantities(G, convention(n)) for n in names}
    first = rows[names[0]]["flops.training"]
    tokens = tokens_per_step(G)  # B·T, unless the graph says otherwise (an encoder–decoder, a ViT)
    for row in rows.values():
        row["flops.per_token"] = sympy.expand(row["flops.training"] / tokens)
        row["per_token_minus_first"] = sympy.expand((row["flops.training"] - first) / tokens)
    return rows


def compare_conventions(
    model: Model | str,
    conventions: Iterable[str] | str | None = None,
    *,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    **kwargs: object,
) -> Comparison:
    """Exact numbers and formulas of ``model`` per named convention (the ``compare --json`` shape).

    ``conventions``: names (or one comma-separated string), the first is the reference; default all.
    Options used: ``batch``, ``seq``, ``tokens`` (whole-run totals).
    """
    opts = Options.make(options, **kwargs)
    if isinstance(conventions, str):
        conventions = [n.strip() for n in conventions.split(",") if n.strip()]
    names = list(CONVENTIONS) if conventions is None else list(conventions)
    if not names:
        raise CostModelError(f"compare: expected at least one convention name; known: {', '.join(CONVENTIONS)}")
    m = prepare(model, settings, opts).model
    values = resolve(m, opts)
    rows = compare(m.graph, names)
    step_tokens = as_int(evaluate(tokens_per_step(m.graph), values, "tokens per step"), "tokens per step")
    out = {
        "model": m.name,
        "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
        "reference": names[0],
        "conventions": {},
    }
    for name, q in rows.items():
        c = CONVENTIONS[name]
        number = {
            k: as_int(evaluate(q[k], values, f"{name}: {k}"), k)
            for k in ("flops.training", "memory_bytes.model_states", "memory_bytes.activations", "memory_bytes.total")
        }
        if "params.convention" in q:  # N of a 6N-style convention
            number["params.convention"] = as_int(evaluate(q["params.convention"], values, f"{name}: N"), "N")
        if opts.tokens is not None:  # every term of a step's FLOPs carries B*T, so per token × D is exact
            number["flops.training_total"] = number["flops.training"] * opts.tokens // step_tokens
        out["conventions"][name] = {
            "about": c.about,
            "source": c.source,
            **number,
            "flops.per_token": str(q["flops.per_token"]),
            "flops.per_token_minus_reference": str(q["per_token_minus_first"]),
        }
    return Comparison(out)
