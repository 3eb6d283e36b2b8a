"""A model's formulas (:func:`derive`): the expressions behind every number of an estimate.

The expressions are :func:`~costmodel.sections.quantities.quantities` — the very ones ``estimate``
substitutes numbers into — plus a few what-ifs (activations under each recompute choice and with
FlashAttention, the KV cache in C). Symbols the user set (``--set L=12``) are substituted; a preset's own
values are not, so ``derive gpt2-small`` shows the structure's formulas.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import networkx as nx
import sympy

from ..errors import CostModelError
from ..families import Model, load
from ..formulas.python import free_symbols
from ..formulas.quantities import choose, maximum, roundup
from ..graph.analysis import breakdown, check_values
from ..graph.passes import flash_attention
from ..memory.activations import activations
from ..memory.inference import kv_cache, state_cache
from ..options import Counting, Options
from ..render.derivation import Derivation
from ..sections.quantities import quantities
from ..sections.run import prepare, resolve
from ..symbols import SYMBOLS, C, T, describe


def what_ifs(G: nx.DiGraph, counting: Counting = Counting()) -> dict[str, sympy.Expr]:
    """Activation bytes under each recompute choice and with FlashAttention, the KV cache in C and the
    recurrent state cache (a state-space model's)."""
    out = {f"memory_bytes.activations_{r}": activations(G, r, counting).bytes for r in ("selective", "full")}
    try:
        out["memory_bytes.activations_flash"] = activations(flash_attention(G), "none", counting).bytes
    except CostModelError:
        pass  # attention this graph cannot fuse: no FlashAttention what-if
    try:
        out["memory_bytes.kv_cache"] = kv_cache(G, C)
    except CostModelError:
        pass  # no tensor tagged kv_cache: no cache to derive
    if state_cache(G) != 0:
        out["memory_bytes.state_cache"] = state_cache(G)
    return out


_OURS = (maximum, roundup, choose)  # functions sympy's expand only walks into


def _expanded(e: sympy.Basic) -> bool:
    """Whether ``sympy.expand`` would return ``e`` unchanged, for the forms a derivation makes: a sum of
    products of numbers, symbols, integer powers of symbols and our functions of such sums (a liveness peak is
    ``maximum`` of hundreds of expanded sums: re-expanding each was seconds). ``False`` when unsure."""
    if e.is_Atom:
        return True
    for term in e.args if e.is_Add else (e,):
        for f in term.args if term.is_Mul else (term,):
            if f.is_Atom or f.is_Pow and f.base.is_Symbol and f.exp.is_Integer:
                continue
            if not (isinstance(f, _OURS) and all(_expanded(a) for a in f.args)):
                return False
    return True


def expanded(e: sympy.Expr) -> sympy.Expr:
    """``e`` expanded, as a derivation prints it (an expression already in that form: itself, unwalked)."""
    return e if _expanded(e) else sympy.expand(e)


def expressions(
    m: Model,
    opts: Options,
    fix: Callable[[sympy.Expr], sympy.Expr] = expanded,
    keep: Callable[[str], bool] | None = None,
    shown: bool = True,
    q=None,
) -> dict[str, sympy.Expr]:
    """The expressions of :func:`derive` (the quantities of ``m`` under ``opts`` and the :func:`what_ifs`), each
    through ``fix``; ``keep(key)``: only those keys (a report prints a few of them: expanding the time of a
    2,048-device MoE step was most of its minutes); ``shown=False``: the quantities ``estimate`` evaluates (a
    liveness peak over its maximal points only: the same value, one derivation for both); ``q``: those quantities
    when the caller has them already."""
    q = q if q is not None else quantities(m, opts, shown=shown)
    exprs = {k: fix(v) for k, v in q.exprs.items() if keep is None or keep(k)}
    for k, v in what_ifs(m.graph, opts.counting).items():
        if k not in q.exprs and (keep is None or keep(k)):
            exprs[k] = fix(v)
    return exprs


def derive(
    model: Model | str,
    *,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    **kwargs: object,
) -> Derivation:
    """The symbolic formulas of a model: ``{"model", "family", "symbols", "expressions", "ops", "conventions"}``.

    ``expressions`` maps every numeric key of an estimate under the same options to its sympy expression
    (and the what-ifs of :func:`what_ifs`); ``ops`` gives each op's kind, pattern, count, forward FLOPs,
    bytes, intensity and parameters per run.
    """
    opts = Options.make(options, **kwargs)
    m = prepare(model, settings, opts).model
    given = {
        s: sympy.Integer(v) if isinstance(v, int) else v for s, v in m.values.items() if str(s) in (settings or {})
    }
    check_values(m.graph, given)

    def fix(e: sympy.Expr) -> sympy.Expr:
        return expanded(e.xreplace(given))

    q = quantities(m, opts)
    exprs = expressions(m, opts, fix, q=q)
    ops = {}
    rows = breakdown(m.graph, opts.counting)
    for name, c in rows.items():
        data = m.graph.nodes[name]
        per_run = (c.forward * (1 / data["count"])).map(fix)
        ops[name] = {
            "kind": data["op"].kind,
            "pattern": data["op"].pattern,
            "count": fix(data["count"]),
            "flops": per_run.flops,
            "bytes": per_run.bytes,
            "intensity": per_run.intensity,
            "params": fix(c.params / data["count"]),
        }
    # a block's count and its parts (L, ⌊L/4⌋ of Llama 4's every fourth layer): what terms collect by
    counts = {
        a for v in ops.values() for a in sympy.sympify(v["count"]).atoms(sympy.Symbol, sympy.floor, sympy.ceiling)
    }
    used = free_symbols([*exprs.values(), *(v["count"] for v in ops.values())])
    symbols = {str(s): describe(str(s)) if str(s) in SYMBOLS else "user symbol" for s in sorted(used, key=str)}
    peak_at = q.choices.get("memory.peak_at")
    return Derivation(
        {
            "model": m.name,
            "family": m.family.name,
            "symbols": symbols,
            "expressions": exprs,
            "ops": ops,
            "conventions": {"causal": opts.counting.causal, "precision": opts.precision, "optimizer": opts.optimizer},
        },
        peaks={"memory_bytes.peak": peak_at[1]} if peak_at else {},
        counts=tuple(sorted(counts, key=sympy.default_sort_key)),
        at=reference(m, opts, used),
        sources=lambda: contributions(rows, fix),
    )


#: The keys a per-op sum makes, and what each op contributes to them (a row of ``breakdown``: runs × one run).
SUMMED = {
    "params.total": lambda r: r.params,
    "params.active": lambda r: r.active_params,
    "flops.forward": lambda r: r.forward.flops,
    "flops.backward": lambda r: r.backward.flops,
    "flops.training": lambda r: r.forward.flops + r.backward.flops,
    "flops.matmul.forward": lambda r: r.forward.matmul_flops,
    "flops.matmul.backward": lambda r: r.backward.matmul_flops,
    "flops.matmul.training": lambda r: r.forward.matmul_flops + r.backward.matmul_flops,
    "bytes.forward": lambda r: r.forward.bytes,
    "bytes.backward": lambda r: r.backward.bytes,
}


def contributions(rows: Mapping[str, object], fix) -> dict[str, dict[str, sympy.Expr]]:
    """key → op → what the op adds to the key (for ``derive --explain``), worked out when asked."""
    return {key: {name: fix(sympy.sympify(part(r))) for name, r in rows.items()} for key, part in SUMMED.items()}


def reference(m: Model, opts: Options, used: set) -> tuple[str, dict[sympy.Symbol, int]] | None:
    """A config to order terms by and name a peak's point at: the model's own numbers (B = 1, C = T), else its
    family's first preset's; None when some symbol has none (a user symbol, a preset of other sizes)."""
    tries = [lambda: m, *(lambda p=p: load(p.name) for p in m.family.presets[:1])]
    for candidate in tries:
        try:
            c = candidate()
            values = resolve(c, opts)
        except CostModelError:
            continue
        values.setdefault(C, values.get(T, 1))
        if all(s in values for s in used):
            return c.name, {s: values[s] for s in used}
    return None
