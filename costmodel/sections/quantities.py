"""Every number of one run, derived once per key: the counts, then memory, then time.

:func:`quantities` is the one derivation behind ``estimate`` (which substitutes numbers), ``derive``
(which prints the expressions), ``sweep`` (which compiles them) and the documents. A new capability adds
a function to :data:`SECTIONS` that returns more keys; it never grows ``estimate`` itself.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from ..conventions import CONVENTIONS, Convention
from ..formulas.quantities import Quantities
from ..graph.analysis import tokens_per_step, totals, value_checks
from ..graph.decode import prefill_graph
from ..memory.quantities import memory_quantities
from ..memory.serving import prefill, prompt
from ..options import Counting, Options
from ..symbols import T
from ..timing.quantities import time_quantities
from .counts import training_flops
from .fits import fit_quantities


def count_quantities(model, options: Options, q: Quantities) -> Quantities:
    """``params.*``, ``flops.*``, ``bytes.*`` and ``tokens.*`` of one step (B sequences of T tokens, unless the
    graph says otherwise: :func:`~costmodel.graph.analysis.tokens_per_step`)."""
    t = totals(model.graph, options.counting)
    per_step = tokens_per_step(model.graph)
    out = Quantities()
    active = t.params if t.params_active is None else t.params_active
    exprs = {
        "params.total": t.params,
        "params.embedding": t.params_embedding,
        "params.non_embedding": t.params_non_embedding,
        # active: what one token uses (a mixture of experts: top_k of n_experts), embeddings
        # included (Mixtral's "12.9B active"); active_non_embedding drops the embedding
        # tables and is the N of 6·N·D. Dense models: active = total.
        "params.active": active,
        "params.active_non_embedding": t.params_active_non_embedding,
        "flops.forward": t.forward.flops,
        "flops.backward": t.backward.flops,
        "flops.training": t.training.flops,
        "flops.six_nd": 6 * t.params_active_non_embedding * per_step,
        "flops.matmul.forward": t.forward.matmul_flops,
        "flops.matmul.backward": t.backward.matmul_flops,
        "flops.matmul.training": t.training.matmul_flops,
        "bytes.forward": t.forward.bytes,
        "bytes.backward": t.backward.bytes,
    }
    for key, expr in exprs.items():
        out.add(key, sympy.expand(expr))
    if options.tokens is not None:
        # D / tokens per step steps: whole when every term of a step carries B·T (a decoder); an encoder–decoder's
        # or a classifier's head makes the per-token FLOPs a fraction, shown as a float then
        for key in ("flops.training", "flops.matmul.training"):
            out.add(key + "_total", sympy.expand(exprs[key] * options.tokens / per_step), "number")
        out.add("flops.six_nd", sympy.expand(6 * t.params_active_non_embedding * options.tokens))
    total = out.exprs.get("flops.training_total", out.exprs["flops.training"])
    out.add("flops.six_nd_share", out.exprs["flops.six_nd"] / total, "float")
    out.add("tokens.per_step", per_step)
    out.info["tokens.total"] = options.tokens
    # the model FLOPs an MFU counts (``mfu_basis``): the engine's, or PaLM's 6N (N with a tied unembedding),
    # with or without its attention term
    basis = MFU_BASIS[options.mfu_basis]
    out.add("flops.mfu_basis", exprs["flops.training"] if basis is None else training_flops(model.graph, basis))
    if options.inference:  # one prompt length for the prefill's FLOPs and its memory: min(T, C)
        P = prompt(options)
        first = totals(prefill(prefill_graph(model.graph), options), options.counting).forward
        out.add("tokens.prompt", P)
        out.add("flops.prefill", sympy.expand(first.flops).xreplace({T: P}))
        out.add("flops.matmul.prefill", sympy.expand(first.matmul_flops).xreplace({T: P}))
    return out


#: The model FLOPs of each MFU basis (``Options.mfu_basis``) as a named convention; ``None``: the engine's count.
MFU_BASIS = {
    "engine": None,
    "6n": Convention(
        "6n",
        "PaLM's 6N without its attention term",
        "Chowdhery et al. 2022, Appendix B",
        Counting(elementwise="none"),
        "params",
        attention=False,
        params="matmul",
    ),
    "6n-attention": CONVENTIONS["palm"],
}


#: The sections of a run, in order; each sees the keys of those before it.
SECTIONS: list[Callable[[object, Options, Quantities], Quantities]] = [
    count_quantities,
    lambda model, options, q: memory_quantities(model.graph, options, every_point=q.shown),
    fit_quantities,
    time_quantities,
]


_CACHE: dict[tuple, Quantities] = {}
_CACHE_SIZE = 64


def quantities(model, options: Options, *, shown: bool = True) -> Quantities:
    """Every key of an estimate of ``model`` under ``options``, as expressions of the graph's symbols.

    Derived once per (model, options) in a process: a model loaded by name with the same settings and the
    same options gives the same quantities (and their compiled evaluation) without deriving again.
    ``shown=False``: the expressions are only evaluated, never printed (``estimate``): the same numbers and
    labels from shorter expressions (a liveness peak's maximum over its maximal points only).
    """
    key = None
    if model.key is not None:
        try:
            key = (model.key, options.replace(batch=None, seq=None), options.weights_default, shown)  # B, T: values
            hash(key)
        except TypeError:
            key = None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    q = Quantities(checks=value_checks(model.graph), shown=shown)  # a config must first be one the graph describes
    for section in SECTIONS:
        q.update(section(model, options, q))
    if key is not None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = q
    return q
