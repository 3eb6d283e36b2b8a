"""Peak memory of a training step by liveness in the graph's order, not only a sum.

The step is walked as PyTorch runs it: the forward in topological order, the
backward in reverse, each repeated block's iterations one after another (the
block is not unrolled: an iteration's bytes are multiplied by its count). Live at a point:

* every tensor kept for backward (:func:`costmodel.memory.activations.activations`) from the
  forward of the first op that saves it to the backward of that op;
* under recompute, an iteration's recomputed tensors from the start of its
  backward until the op that used them is done;
* the running op's transients: in forward its input and output tensors that
  are not kept anyway, in backward the gradients of its output and inputs
  (in the op's dtype, none for an input its kind never differentiates) and its kind's
  backward workspace (the loss: the gradient of its log-probs). A view (a sliding
  window's unfold) is its storage: an operand that is a view counts the tensor it
  views, once, and a view's own output allocates nothing.

With a training :class:`~costmodel.memory.loop.Loop` whose gradients are not resident, the gradients are
tensors of the walk too: none in forward, each born at its weight's backward, all alive at the two points after
the backward: ``end of backward`` and ``optimizer step`` (with the step's temporary). A repeated block's
backward then has two sets of points: its first backward iteration (the last layer: every iteration's tensors
alive, few gradients) and its last (``(first iteration of layers)``: its own tensors left, every other
iteration's gradients made); the live bytes are linear in the iteration between them.

Not counted: tensors held across ops without being saved (the forward
residual stream, the running gradient of the residual stream beyond the op
that touches it), allocator caching and fragmentation, kernels' workspaces,
the CUDA context. Model states are added as one constant.

Under tensor and sequence parallelism (one pipeline stage) the walk is one device's: every kept tensor and every
transient is its share (``share``: ÷ tp where TP or Megatron SP splits it, ÷ sp where it has the sequence axis),
the rule the per-device activations use.

The result is symbolic: the live bytes at every point of the walk are expressions of the graph's
sizes, and the peak is their maximum (:class:`Peak`), evaluated when numbers are known.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import sympy
from sympy.core.add import _addsort  # sympy's canonical order of a sum's terms

from ..errors import CostModelError
from ..formulas.quantities import maximum, roundup, whole
from ..graph.analysis import evaluate, order, repeated_blocks, structure
from ..graph.cost import Zero, dtype_bytes, ratio
from ..graph.pattern import elements
from ..graph.registry import data_operands, kind_of
from ..options import Counting
from .activations import Activations, Kept, activations, is_view, storage, storage_bytes
from .implementation import ROLES, loss_workspace
from .loop import Loop

#: A device's fraction of a tensor given its ``(axis, size)`` pairs (:func:`costmodel.memory.parallel.layout_share`).
Share = Callable[[tuple], sympy.Expr]


@dataclass(frozen=True)
class Peak:
    """Live activation bytes at every point of a step, as expressions, and where each point is.

    ``candidates[i]`` are the live bytes at ``labels[i]`` (``"backward of loss"``); the peak is their
    maximum plus ``states``.
    """

    candidates: tuple[sympy.Expr, ...]
    labels: tuple[str, ...]
    states: sympy.Expr = Zero
    #: the candidates that can be the peak (:func:`maximal`, indices) and the bytes of each by category
    #: (``activations``, ``grads``, ``temporaries``; the states are ``states``)
    top: tuple[int, ...] = ()
    parts: tuple[Mapping[str, sympy.Expr], ...] = ()

    @property
    def bytes(self) -> sympy.Expr:
        """The peak as one expression: states + the largest candidate."""
        return self.states + maximum(*self.candidates)

    def at(self, values: Mapping) -> tuple[int, str]:
        """(peak bytes, where) for numbers; of equal points, the last label in alphabetical order."""
        nums = [evaluate(c, values, f"live bytes at {label}") for c, label in zip(self.candidates, self.labels)]
        i = max(range(len(nums)), key=lambda j: (nums[j], self.labels[j]))
        return int(evaluate(self.states, values, "model states")) + int(nums[i]), self.labels[i]


class _Polys:
    """Expanded sums kept as ``{monomial: coefficient}`` while the walk adds and subtracts them.

    Each point of the walk is the running sum plus one op's transients: expanding that sum in sympy per
    op was most of a derivation; adding coefficient dicts gives the same expanded expression (sympy's
    ``Add`` of the same terms) at a fraction of the cost. Coefficients are Python ints and Fractions while
    the walk adds them (sympy's numbers add slowly); terms are built once per (monomial, coefficient).
    """

    def __init__(self) -> None:
        self._dicts: dict[sympy.Expr, dict] = {}
        self._terms: dict[tuple, sympy.Expr] = {}

    def of(self, expr: sympy.Expr) -> dict:
        """The coefficient dict of an expanded expression (a sum of terms, a term or a number)."""
        got = self._dicts.get(expr)
        if got is None:
            got = {m: _python(c) for m, c in sympy.expand(expr).as_coefficients_dict().items()}
            self._dicts[expr] = got
        return got

    @staticmethod
    def plus(a: dict, b: dict, sign: int = 1) -> dict:
        out = dict(a)
        for m, c in b.items():
            c = out.get(m, 0) + sign * c
            if c:
                out[m] = c
            else:
                out.pop(m, None)
        return out

    def total(self, dicts) -> dict:
        out: dict = {}
        for d in dicts:
            out = self.plus(out, d)
        return out

    def times(self, d: dict, n: sympy.Expr) -> dict:
        """``n`` times the sum: a number scales the coefficients, a symbolic count (``L``) is expanded in."""
        if n.is_Rational:
            k = _python(n)
            return {m: c * k for m, c in d.items()} if k != 0 else {}
        return self.of(sympy.expand(n * self.expr(d)))

    def expr(self, d: dict) -> sympy.Expr:
        """The sum as sympy's ``Add`` of the same terms would build it: its monomials are distinct already, so
        only the canonical order is left to make (sympy's own sort, the number first), not ``Add``'s collection
        of like terms, which cost a millisecond a point."""
        number, terms = _sympy(d.get(sympy.S.One, 0)), []
        for m, c in d.items():
            if m is sympy.S.One:
                continue
            t = self._terms.get((m, c))
            if t is None:  # Add's own shortcut: a coefficient goes first in a product's sorted factors
                k = _sympy(c)
                t = m if k == 1 else sympy.Mul._from_args((k, *(m.args if m.is_Mul else (m,))), is_commutative=True)
                self._terms[(m, c)] = t
            terms.append(t)
        if len(terms) + (number != 0) < 2:
            return terms[0] if terms else number
        _addsort(terms)
        return sympy.Add._from_args([number, *terms] if number != 0 else terms, is_commutative=True)


def _python(c: sympy.Expr):
    """A sympy coefficient as a Python number (an int or a Fraction; anything else stays as it is)."""
    if c.is_Integer:
        return int(c)
    return Fraction(int(c.p), int(c.q)) if c.is_Rational else c


def _sympy(c) -> sympy.Expr:
    """The inverse of :func:`_python`."""
    if type(c) is int:
        return sympy.Integer(c)
    return sympy.Rational(c.numerator, c.denominator) if isinstance(c, Fraction) else c


def _sign(m: sympy.Expr, memo: dict) -> int:
    """2 when monomial ``m`` is above 0 at every config (a product of powers of positive symbols, ⌈x⌉ of a sum
    of such with positive coefficients), 1 when it is at least 0 (⌈(L − 2)·x/6⌉ is 0 at L = 2), 0 unknown."""
    got = memo.get(m)
    if got is None:
        if m.is_Mul:
            got = min(_sign(f, memo) for f in m.args)
        elif m.is_Pow and m.exp.is_real:
            got = _sign(m.base, memo) if m.exp.is_positive else 2 * (_sign(m.base, memo) == 2)
        elif isinstance(m, roundup) and all(c > 0 and _sign(t, memo) == 2 for t, c in _terms(m.args[0])):
            got = 2
        else:  # a symbol, a number, a ⌈⌉ of anything else: sympy's assumptions (positive integer sizes)
            arg = m.args[0] if isinstance(m, roundup) else m
            got = 2 if m.is_positive else 1 if arg.is_nonnegative else 0
        memo[m] = got
    return got


def _terms(expr: sympy.Expr):
    return expr.as_coefficients_dict().items()


def maximal(points: list[dict], labels: list[str]) -> list[int]:
    """The indices (in order) of the points of a walk that can be the peak, with the label the peak would name.

    ``points`` are expanded sums ``{monomial: coefficient}``. A point P is dropped when another Q has every
    coefficient ≥ P's (equal where the monomial's sign is unknown; sizes are positive, a ⌈⌉ is of bytes), so
    that Q ≥ P at every config, and Q also wins where they are equal: Q's label comes later in alphabetical
    order (the tie rule of ``memory.peak_at``), or a coefficient Q has larger is of a monomial never 0 (then
    Q > P). Both relations chain, so checking each point against the points kept before it, largest first,
    leaves exactly those no other point covers: the maximum and the label it names are unchanged.
    """
    index: dict[sympy.Expr, int] = {}
    for p in points:
        for m in p:
            index.setdefault(m, len(index))
    memo: dict = {}
    sign = [_sign(m, memo) for m in index]
    unknown, known, strict = ([j for j, s in enumerate(sign) if s == want] for want in (0, 1, 2))
    known += strict
    rows = []  # per point: (coefficients compared for equality, ≤, and the part of those above 0)
    for p in points:  # coefficients are Python numbers (:class:`_Polys`): exact, and fast to compare
        row = [0] * len(index)
        for m, c in p.items():
            row[index[m]] = c
        rows.append(([row[j] for j in unknown], [row[j] for j in known], [row[j] for j in strict], sum(row)))
    # every weight 1 ≥ 0: a point never comes before one that covers it (an equal sum with every coefficient ≥
    # is the same sum, then the later label goes first)
    ranked = sorted(range(len(points)), key=lambda i: (rows[i][3], labels[i]), reverse=True)
    kept: list[int] = []
    for i in ranked:
        u, g, s2, _ = rows[i]
        for k in kept:
            uk, gk, s2k, _ = rows[k]
            if u == uk and all(map(operator.le, g, gk)) and (labels[k] > labels[i] or any(map(operator.lt, s2, s2k))):
                break
        else:
            kept.append(i)
    return sorted(kept)


def _segments(G: nx.DiGraph, ops: list[str]) -> list[tuple[str | None, list[str]]]:
    block_of = structure(G).block_of
    segs: list[tuple[str | None, list[str]]] = []
    for n in ops:
        block = block_of.get(n)
        if segs and segs[-1][0] == block:
            segs[-1][1].append(n)
        else:
            segs.append((block, [n]))
    return segs


def _ledger(
    tensors: Mapping[tuple, Kept],
    iters: Mapping[str | None, sympy.Expr],
    block_of: Mapping[str, str],
    share: Share | None = None,
) -> dict[str, sympy.Expr]:
    """Per first saver: bytes it allocates/frees per iteration of its block (rounded up to whole bytes), of a
    device's ``share`` of each tensor."""
    at: dict[str, list[sympy.Expr]] = {}
    for k in tensors.values():
        first = k.savers[0]
        block = block_of.get(first)
        if block is not None and any(block_of.get(s) != block for s in k.savers):
            block = None
        nbytes = k.bytes if share is None else k.bytes * share(k.axes)
        at.setdefault(first, []).append(_per_iteration(nbytes, iters[block]))
    return {n: sympy.Add(*v) for n, v in at.items()}


@functools.lru_cache(maxsize=4096)
def _per_iteration(nbytes: sympy.Expr, count: sympy.Expr) -> sympy.Expr:
    """⌈bytes / count⌉, once per distinct pair (the layers of a model keep tensors of a few shapes)."""
    # cancel: a count such as L − L_dense or (L − 2)/6 divides out exactly, leaving a polynomial (fast to expand)
    return whole(ratio(nbytes, count), force=True)


@functools.lru_cache(maxsize=4096)
def _expanded(terms: tuple[sympy.Expr, ...]) -> sympy.Expr:
    """The expanded sum of ``terms``, once per distinct tuple (ops of one shape have the same operands)."""
    return sympy.expand(sympy.Add(*terms))


def _operand_bytes(
    G: nx.DiGraph, name: str, skip: set[str], share: Share | None = None
) -> tuple[sympy.Expr, sympy.Expr]:
    """(forward transient bytes, backward gradient bytes) of one run of op ``name`` (a device's ``share`` of each
    tensor); a view operand counts the storage it views (once), a view's output nothing."""
    op = G.nodes[name]["op"]
    kind = kind_of(op)
    sizes, size = op.size, dtype_bytes(op.dtype)

    def part(axes, of=op) -> sympy.Expr:  # the device's share of a tensor of ``axes`` (of op ``of``'s sizes)
        return 1 if share is None else share(tuple((a, of.size[a]) for a in axes))

    def stored(node: str) -> sympy.Expr:  # a view's storage, split as the op that holds it
        base = G.nodes[storage(G, node)]["op"]
        return storage_bytes(G, node) * part(base.parsed.output, base)

    operands = []  # (storage node, bytes) of each data operand (a weight is a parameter, not a transient)
    for axes, src in zip(data_operands(op), G.nodes[name]["inputs"]):
        base = storage(G, src) if "op" in G.nodes[src] else src
        operands.append((base, stored(src) if base != src else elements(axes, sizes) * size * part(axes)))
    held = {base: nbytes for base, nbytes in operands if base not in skip}  # storage node → bytes
    own = is_view(G, name)
    out = elements(op.parsed.output, sizes) * size * part(op.parsed.output)
    fwd = list(held.values())
    if name not in skip and not own:
        fwd.append(out)
    if op.attr("detached"):  # no backward runs here
        return _expanded(tuple(fwd)), Zero
    # a view's gradient is its storage's (accumulated in place), once per storage
    grad_of = {base: nbytes for i, (base, nbytes) in enumerate(operands) if i not in kind.no_grad}
    grads = [stored(name) if own else out, *grad_of.values()]
    # the kind's workspace (the loss: the gradient of its log-probs) split as the op's output
    return _expanded(tuple(fwd)), _expanded((*grads, kind.backward_workspace(op) * part(op.parsed.output)))


def peak(
    G: nx.DiGraph,
    recompute: str = "none",
    states: sympy.Expr = Zero,
    counting: Counting = Counting(),
    norm_stats: bool = True,
    acts: Activations | None = None,
    *,
    every_point: bool = True,
    loop: Loop | None = None,
    implementation: str = "fused",
    autocast: bool = False,
    share: Share | None = None,
) -> Peak:
    """Peak memory of one training step of ``G`` (see the module notes), as a :class:`Peak`.

    ``acts``: ``activations(G, recompute, counting, norm_stats=norm_stats)`` when the caller has it already
    (the analysis is the larger part of a walk). ``every_point``: a candidate per point of the walk (what
    ``derive`` prints); else only the :func:`maximal` ones (the same peak and label; what ``estimate``
    evaluates: a 64-layer walk has 2,184 points and 8 maximal ones). ``loop``: the training loop's gradients
    and step (module notes); None: none (gradients resident in ``states``, no step point). ``share``: the fraction
    of a tensor (its ``(axis, size)`` pairs) one device holds under tensor and sequence parallelism
    (:func:`costmodel.memory.parallel.layout_share`), applied to every kept tensor and every transient alike;
    ``None``: one device holds all of each.
    """
    ops = order(G)
    segs = _segments(G, ops)
    iters: dict[str | None, sympy.Expr] = {None: sympy.Integer(1), **repeated_blocks(G)}
    if acts is None:
        acts = activations(
            G, recompute, counting, norm_stats=norm_stats, implementation=implementation, autocast=autocast
        )
    elif acts.recompute != recompute:
        raise CostModelError(f"peak: activations under recompute {acts.recompute!r} given for recompute {recompute!r}")
    kept = acts.tensors
    full = (
        kept
        if recompute == "none"
        else activations(
            G, "none", counting, norm_stats=norm_stats, implementation=implementation, autocast=autocast
        ).tensors
    )
    block_of = structure(G).block_of
    alloc_kept = _ledger(kept, iters, block_of, share)
    alloc_full = alloc_kept if full is kept else _ledger(full, iters, block_of, share)
    # autocast's cache holds every weight cast until the forward ends (torch.autocast's exit clears it): a cast
    # recomputed in backward (not kept) is still alive through the rest of the forward
    cached = {k: t for k, t in full.items() if t.saved.role == "weight_cast" and k not in kept}
    alloc_fwd = _ledger({**kept, **cached}, iters, block_of, share) if cached else alloc_kept
    skip = {k.node for k in kept.values() if k.saved.role not in ROLES}
    transient = {n: _operand_bytes(G, n, skip, share) for n in ops}
    for n in ops:  # transformers' loss workspace (fp32 logits): not split by tp here (vocab-parallel loss aside)
        fwd, bwd = loss_workspace(G, n, implementation)
        if fwd != 0 or bwd != 0:
            transient[n] = (sympy.expand(transient[n][0] + fwd), sympy.expand(transient[n][1] + bwd))

    loop = loop or Loop()
    grad_at = {n: _per_iteration(b, iters[structure(G).block_of.get(n)]) for n, b in loop.grads.items()}
    points: list[tuple[dict, dict, dict]] = []  # (kept tensors, gradients, the running op's transients)
    labels: list[str] = []
    live: dict = {}
    poly = _Polys()

    def iteration(table: Mapping[str, sympy.Expr], nodes: list[str]) -> dict:
        return poly.total(poly.of(table.get(x, Zero)) for x in nodes)

    cache: dict = {}
    for block, nodes in segs:
        n = iters[block]
        per_iter = iteration(alloc_fwd, nodes)
        running = poly.plus(live, poly.times(per_iter, n - 1))  # the last iteration holds the most
        for x in nodes:
            running = poly.plus(running, poly.of(alloc_fwd.get(x, Zero)))
            points.append((running, {}, poly.of(transient[x][0])))
            labels.append(f"forward of {x}")
        live = poly.plus(live, poly.times(per_iter, n))
        if cached:
            cache = poly.plus(cache, poly.times(iteration(alloc_fwd, nodes), n))
            cache = poly.plus(cache, poly.times(iteration(alloc_kept, nodes), n), -1)
    live = poly.plus(live, cache, -1)  # the forward is over: autocast's cache cleared
    born: dict = {}  # gradients made so far
    for block, nodes in reversed(segs):
        n = iters[block]
        kept_iter = iteration(alloc_kept, nodes)
        grads_iter = iteration(grad_at, nodes)
        ends = [(poly.plus(live, kept_iter, -1), born, "")]  # the first backward iteration: every other one's kept
        if grads_iter and n != 1:  # ... and the last: the others' tensors freed, their gradients made
            ends.append(
                (
                    poly.plus(live, poly.times(kept_iter, n), -1),
                    poly.plus(born, poly.times(grads_iter, n - 1)),
                    f" (first iteration of {block})",
                )
            )
        for others, grads, where in ends:
            running = poly.plus(others, iteration(alloc_full, nodes))  # recomputed: back
            for x in reversed(nodes):
                grads = poly.plus(grads, poly.of(grad_at.get(x, Zero)))
                points.append((running, grads, poly.of(transient[x][1])))
                labels.append(f"backward of {x}{where}")
                running = poly.plus(running, poly.of(alloc_full.get(x, Zero)), -1)
        live = poly.plus(live, poly.times(kept_iter, n), -1)
        born = poly.plus(born, poly.times(grads_iter, n))
    if born or loop.step != 0:
        points.append((live, born, {}))
        labels.append("end of backward")
        points.append((live, born, poly.of(loop.step)))
        labels.append("optimizer step")
    if not points:
        return Peak((Zero,), ("nothing",), states, (0,), ({},))
    sums = [poly.total(p) for p in points]
    top = maximal(sums, labels)
    keep = range(len(points)) if every_point else top
    parts = tuple({k: poly.expr(d) for k, d in zip(("activations", "grads", "temporaries"), points[i])} for i in top)
    top = tuple(top) if every_point else tuple(range(len(top)))
    return Peak(tuple(poly.expr(sums[i]) for i in keep), tuple(labels[i] for i in keep), states, top, parts)
