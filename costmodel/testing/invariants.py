"""Invariants every cost model keeps, checked on a model's derived numbers at drawn sizes.

Each invariant is a function of a :class:`~costmodel.testing.subject.Subject` and one drawn sizes, returning
the terms that break it (empty: it holds there), and a reason it does not apply to a model (no ``L``, no KV
cache) or ``None``. The relations, where they come from:

* matmul FLOPs and the KV cache are linear in the batch ``B`` (every op runs per sequence): f(3·B) = 3·f(B),
  and all FLOPs affine in it (a reduction over the batch costs B - 1 adds);
* FLOPs, parameters and total memory grow with the layers ``L`` (the next valid L: Jamba's come in 8s);
* backward = 2 × forward for matmul FLOPs (an input gradient and a weight gradient, each a matmul of the
  forward's size); where a matmul reads a tensor that needs no gradient (a ViT's pixels) it has only its
  weight gradient, so then forward ≤ backward ≤ 2 × forward;
* training = forward + backward (FLOPs, matmul FLOPs);
* the parts sum to their totals: parameters = embedding + non-embedding, memory = states + activations,
  the model states' parts (weights, grads, master, moments) = the states, activations by role = activations;
* the liveness peak holds the model states: peak ≥ each part of them and ≥ their sum;
* the KV cache is affine in the context ``C`` (linear but for a cross-attention's cache of the source), and
  grows at most linearly with a sliding window (kept positions ``Min(C, W - 1)``);
* parameters do not depend on ``B`` or ``T``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

from ..errors import CostModelError
from ..graph.analysis import op_nodes
from ..graph.registry import op_cost
from ..memory.activations import requires_grad
from .results import Difference
from .subject import Subject

FACTOR = 3  # B → 3·B, C → 3·C: a factor that is not a power of two catches a hidden ``B/2``

LINEAR_IN_B = ("flops.matmul.forward", "flops.matmul.backward", "flops.matmul.training", "tokens.per_step")
#: A reduction over n terms costs n - 1 adds: T5's position bias, shared by the batch and the layers, gets a
#: gradient summed over B (B - 1 adds an element), so FLOPs are a + b·B, not b·B.
AFFINE_IN_B = ("flops.forward", "flops.backward", "flops.training")
GROW_WITH_L = ("flops.training", "params.total", "memory_bytes.total")


def _at(subject: Subject, values: Mapping[str, int]) -> dict | None:
    """The estimate at ``values``, or None when they are no valid config (a changed size broke a relation)."""
    try:
        return subject.estimate(values)
    except CostModelError:
        return None


def _next_valid(subject: Subject, values: Mapping[str, int], name: str) -> tuple[dict, dict] | None:
    for step in range(1, 65):
        changed = {**values, name: values[name] + step}
        got = _at(subject, changed)
        if got is not None:
            return changed, got
    return None


def _mismatch(term: str, derived: object, expected: object, relation: str) -> Difference:
    return Difference(term, derived, expected, relation)


def _affine(f1: object, f2: object, f3: object) -> bool:
    """f(1·x), f(2·x), f(3·x) of an affine f (a + b·x): the steps are equal."""
    return f3 - f2 == f2 - f1


def linear_in_batch(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """Matmul FLOPs and the KV cache at k·B are k × those at B; all FLOPs are affine in B."""
    b = values["B"]
    at = [_at(subject, {**values, "B": k * b}) for k in (1, 2, FACTOR)]
    if None in at:
        return [Difference("B", f"2*B, {FACTOR}*B", "no valid config", "linearity in B")]
    one, two, many = at
    out = [
        _mismatch(k, many[k], FACTOR * one[k], f"{FACTOR} x its value at B={b}")
        for k in LINEAR_IN_B
        if k in one and many[k] != FACTOR * one[k]
    ]
    out += [
        _mismatch(k, many[k] - two[k], two[k] - one[k], f"the step from B={b} to {2 * b} (affine in B)")
        for k in AFFINE_IN_B
        if k in one and not _affine(one[k], two[k], many[k])
    ]
    kv = subject.kv_cache
    if kv is not None and kv != 0:
        c = values.get("C", 1)
        a, m = _eval(kv, {**values, "C": c}), _eval(kv, {**values, "C": c, "B": FACTOR * b})
        if m != FACTOR * a:
            out.append(_mismatch("memory_bytes.kv_cache", m, FACTOR * a, f"{FACTOR} x its value at B={b}"))
    return out


def grows_with_layers(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """FLOPs, parameters and total memory are larger with more layers."""
    base = subject.estimate(values)
    found = _next_valid(subject, values, "L")
    if found is None:
        return []
    changed, more = found
    return [
        _mismatch(k, more[k], f"> {base[k]}", f"its value at L={values['L']} (L={changed['L']} should be larger)")
        for k in GROW_WITH_L
        if not more[k] > base[k]
    ]


def _no_input_grad(subject: Subject) -> list[str]:
    """Matmul ops reading a tensor that needs no gradient (a graph input, or an op before any weight)."""
    G = subject.graph
    grad = requires_grad(G)
    return [
        name
        for name, data in op_nodes(G)
        if op_cost(data["op"]).forward.matmul_flops != 0 and any(src not in grad for src in data["inputs"])
    ]


def backward_twice_forward(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """Matmul FLOPs: backward = 2 × forward (forward ≤ backward ≤ 2 × forward where an input needs no grad)."""
    e = subject.estimate(values)
    fwd, bwd = e["flops.matmul.forward"], e["flops.matmul.backward"]
    ops = _no_input_grad(subject)
    if not ops:
        return [] if bwd == 2 * fwd else [_mismatch("flops.matmul.backward", bwd, 2 * fwd, "2 × forward")]
    if fwd <= bwd <= 2 * fwd:
        return []
    return [_mismatch("flops.matmul.backward", bwd, f"{fwd}..{2 * fwd}", f"forward..2 × forward ({ops[0]}...)")]


def training_is_forward_plus_backward(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """training = forward + backward, for FLOPs and matmul FLOPs."""
    e = subject.estimate(values)
    out = []
    for prefix in ("flops", "flops.matmul"):
        fwd, bwd, tr = (e[f"{prefix}.{p}"] for p in ("forward", "backward", "training"))
        if tr != fwd + bwd:
            out.append(_mismatch(f"{prefix}.training", tr, fwd + bwd, "forward + backward"))
    return out


def parts_sum_to_totals(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """Parameters, memory, model states and activations equal the sums of their parts."""
    e = subject.estimate(values)
    states = e["memory_bytes.params"] + e["memory_bytes.grads"] + e["memory_bytes.optimizer"]
    sums = {
        "params.total": (e["params.embedding"] + e["params.non_embedding"], "embedding + non_embedding"),
        "memory_bytes.total": (states + e["memory_bytes.activations"], "params + grads + optimizer + activations"),
        "memory.states_unsharded_bytes": (_sum(e, "memory_bytes.parts."), "the sum of memory_bytes.parts.*"),
        "memory_bytes.activations": (
            _sum(e, "memory_bytes.activations_by_role."),
            "the sum of memory_bytes.activations_by_role.*",
        ),
    }
    if "params.active" in e:
        sums["params.active"] = (
            e["params.active_non_embedding"] + e["params.embedding"],
            "active non-embedding + embedding",
        )
    return [_mismatch(k, e[k], total, why) for k, (total, why) in sums.items() if k in e and e[k] != total]


def peak_holds_its_parts(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """The liveness peak holds the model states: at least each part of them, and their sum."""
    e = subject.estimate(values)
    peak = e["memory_bytes.peak"]
    parts = {k: v for k, v in e.items() if k.startswith("memory_bytes.parts.")}
    parts["params + grads + optimizer"] = (
        e["memory_bytes.params"] + e["memory_bytes.grads"] + e["memory_bytes.optimizer"]
    )
    return [_mismatch("memory_bytes.peak", peak, f">= {v}", k) for k, v in parts.items() if peak < v]


def kv_cache_linear_in_context(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """KV cache bytes are affine in the context C (a + b·C: an encoder-decoder's cross-attention keeps the
    source's keys whatever C is) and grow with it; with a sliding window (kept positions ``Min(C, W - 1)``) they
    grow at most linearly."""
    kv = subject.kv_cache
    c = values.get("C", 1)
    one, two, many = (_eval(kv, {**values, "C": k * c}) for k in (1, 2, FACTOR))
    if kv.has(sympy.Min):
        if one <= many <= FACTOR * one:
            return []
        return [_mismatch("memory_bytes.kv_cache", many, f"{one}..{FACTOR * one}", f"at C={c} .. {FACTOR} x that")]
    if _affine(one, two, many) and one <= two:
        return []
    return [_mismatch("memory_bytes.kv_cache", many - two, two - one, f"the step from C={c} to {2 * c} (affine in C)")]


def params_independent_of_batch_and_sequence(subject: Subject, values: Mapping[str, int]) -> list[Difference]:
    """Parameters at B + 1 and at the next valid T are those at B and T."""
    e = subject.estimate(values)
    out = []
    for name in ("B", "T"):
        if name not in values:
            continue
        found = _next_valid(subject, values, name)
        if found is not None and found[1]["params.total"] != e["params.total"]:
            out.append(
                _mismatch(
                    "params.total", found[1]["params.total"], e["params.total"], f"its value at {name}={values[name]}"
                )
            )
    return out


def _sum(e: Mapping[str, object], prefix: str) -> object:
    return sum((v for k, v in e.items() if k.startswith(prefix)), 0)


def _eval(expr: sympy.Expr, values: Mapping[str, int]) -> Fraction:
    subs = {s: sympy.Integer(values[str(s)]) for s in expr.free_symbols if str(s) in values}
    r = sympy.Rational(expr.xreplace(subs))
    return Fraction(int(r.p), int(r.q))


def _needs(*names: str) -> Callable[[Subject], str | None]:
    def applies(subject: Subject) -> str | None:
        used = {str(s) for s in subject.graph_symbols}
        missing = [n for n in names if n not in used]
        return f"no symbol {', '.join(missing)} in the graph" if missing else None

    return applies


def _kv(subject: Subject) -> str | None:
    kv = subject.kv_cache
    return "the graph keeps no KV cache" if kv is None or kv == 0 else None


#: name → (check, why it does not apply to a subject or None), in the order they run.
INVARIANTS: dict[str, tuple[Callable, Callable[[Subject], str | None]]] = {
    "linear in B": (linear_in_batch, _needs("B")),
    "grows with L": (grows_with_layers, _needs("L")),
    "backward = 2 x forward (matmuls)": (backward_twice_forward, lambda s: None),
    "training = forward + backward": (training_is_forward_plus_backward, lambda s: None),
    "parts sum to totals": (parts_sum_to_totals, lambda s: None),
    "peak >= each part it holds": (peak_holds_its_parts, lambda s: None),
    "KV cache affine in C": (kv_cache_linear_in_context, _kv),
    "params independent of B and T": (params_independent_of_batch_and_sequence, lambda s: None),
}


def invariant_failures(subject: Subject, values: Mapping[str, int]) -> dict[str, list[Difference]]:
    """Every applicable invariant at ``values``: name → the terms that break it (empty: it holds)."""
    return {name: check(subject, values) for name, (check, applies) in INVARIANTS.items() if applies(subject) is None}
