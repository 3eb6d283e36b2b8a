"""The time of one engine step of a mixed batch, derived from the model's graph: ``T_step(batch)``.

A batch is a list of ``(c, p)`` pairs: ``c`` new tokens of a request whose KV cache already holds ``p`` tokens (a
decode is ``(1, p)``, a chunk of a prefill ``(c, p)``). One step runs every op of the decode graph
(:func:`~costmodel.graph.decode.decode_graph`, after the attention pass) once, and the step's sizes are four sums
over the batch (window ``w`` = ∞ for full attention):

* ``N = Σ c``: new tokens. Every op that does not read the KV cache runs on N tokens as one batch (the weights are
  read once per step, the GEMMs are N rows tall, the attained rate of :mod:`costmodel.devices.efficiency` at that
  shape);
* ``K_w = Σ_i Σ_{j=1..c_i} min(p_i + j, w)``: query–key pairs of causal attention — a chunk's j-th token attends to
  the p cached tokens and the j before it, ``c·(p + (c+1)/2)`` without a window (not Vidur's surrogate);
* ``S_w = Σ min(p + c, w)``: KV positions read (each request's cache once, its new keys included);
* ``R``: requests in the step.

An op that reads the cache (fused attention) costs ``a₀·N + a₁·K`` FLOPs and ``b_q·N + b_k·S`` bytes, its
coefficients read off its operands (those with a query axis scale with N, those with only key axes with S). A
routed expert matmul reads the weights of the experts the step's tokens touch: with top-k routing of N tokens over
E experts, uniform and independent, ``E·(1 − (1 − k/E)^N)`` of them on average (issue 30's decode correction), per
device holding ``1/n`` of the experts (``ep``, or ``tp`` over the experts axis) its share of those and ``1/n`` of the
token copies, the busiest device ``imbalance`` times the mean under expert parallelism, the tokens sent there and
back by an all-to-all over the ep group (dispatch before the first expert matmul, combine after the last).
Serving's expert group is the replica's tp × attention-dp devices (:mod:`costmodel.serving.parallel`): under
attention data parallelism (``attention_dp`` = a) each of a ranks runs attention on its own batch, and the
expert layers of a step see the tokens of all a ranks (taken alike: the step of one rank with a·N tokens routed,
a·N·k copies spread over ep devices, each sending and receiving its 1/ep share). Tensor parallelism splits the ops as in training
(:mod:`costmodel.timing.kernels`), a KV head count below tp is replicated, and each row-parallel matmul ends in an
all-reduce of its output over the tp group (:mod:`costmodel.devices.network`).

Fixed overheads are the engine profile's (:mod:`costmodel.serving.profiles`): per step (scheduler, sampler) always,
per layer (eager kernel launches) only on a step that is not a captured CUDA graph (a decode-only step of at most
the largest captured size). Each kernel's own ``t₀`` is the device's. Kernels here run at their measured rates:
the training step's ``sustained`` factor does not apply.

The step is a sympy expression in N, K_w, S_w, R and E_touched (``expression``), compiled once to plain Python
(:meth:`StepModel.__call__` evaluates it in microseconds).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import sympy

from ..devices.efficiency import gemm_seconds
from ..devices.network import collective_seconds
from ..devices.table import Device
from ..errors import CostModelError
from ..formulas.compiled import EXACT
from ..formulas.python import compile_exprs
from ..formulas.quantities import choose, maximum
from ..graph.analysis import op_nodes
from ..graph.composite import experts_touched
from ..graph.cost import dtype_bytes
from ..graph.decode import decode_graph
from ..graph.passes import head
from ..graph.registry import op_cost, weight_use
from ..memory.parallel import split_axes
from ..options import Counting
from ..options.policies import weight_format
from ..symbols import B, C, T
from ..timing.kernels import Split, _gemm, divisors, on_device, routed_bytes, tp_bytes, tp_collectives
from .batch import Entry

#: The step's sizes: new tokens, requests, and (per attention window) query–key pairs and KV positions read.
N = sympy.Symbol("N", positive=True)
R = sympy.Symbol("R", positive=True)
PARTS = ("compute", "weights", "kv", "activations", "communication", "overhead")


def pairs(c: int, p: int, w: int | None = None) -> int:
    """Query–key pairs of a causal chunk of ``c`` tokens after ``p`` cached ones, each query seeing at most ``w``
    keys: Σ_{j=1..c} min(p + j, w).

    >>> pairs(4, 0), pairs(1, 10), pairs(3, 5, w=6)  # 1+2+3+4; 11; min(6,6)+min(7,6)+min(8,6)
    (10, 11, 18)
    """
    if w is None or p + c <= w:
        return c * p + c * (c + 1) // 2
    if p >= w:
        return c * w
    m = w - p  # the first m queries see p + j <= w keys
    return m * p + m * (m + 1) // 2 + (c - m) * w


def _window(size: sympy.Expr) -> tuple[sympy.Expr, int | None] | None:
    """(C's coefficient form, window) of a key axis' size: ``C`` → (C, None), ``Min(C, W)`` → (C, W)."""
    if size == C:
        return C, None
    if isinstance(size, sympy.Min) and C in size.args:
        rest = [a for a in size.args if a != C]
        if len(rest) == 1 and rest[0].is_Integer:
            return C, int(rest[0])
    return None


@dataclass(frozen=True)
class StepModel:
    """``T_step`` of one replica: a compiled expression of the batch's sums (see the module notes).

    ``expression``: seconds as a sympy expression of :data:`N`, :data:`R`, ``K_w``/``S_w`` per window (``windows``)
    and ``E`` (experts touched per layer, where the model routes); ``parts``: the same split by what binds.
    """

    expression: sympy.Expr
    parts: Mapping[str, sympy.Expr]
    flops: sympy.Expr  # FLOPs one device runs in the step (exact in N, R, K_w)
    matmul_flops: sympy.Expr  # the part of them in matmuls and attention's two contractions
    windows: tuple[int | None, ...]
    pair_symbols: tuple[sympy.Symbol, ...]
    read_symbols: tuple[sympy.Symbol, ...]
    routing: tuple[int, int] | None  # (experts, top_k) where the model routes
    layer_overhead: sympy.Expr
    graph_sizes: tuple[int, ...]
    eager: sympy.Symbol
    attention_dp: int = 1  # ranks whose tokens the expert layers see together (serving.parallel)
    _fn: object = field(repr=False, compare=False, default=None)
    _parts_fn: object = field(repr=False, compare=False, default=None)
    _flops_fn: object = field(repr=False, compare=False, default=None)

    def _args(self, batch: Sequence[Entry]) -> list[float]:
        """The batch's sums in the order of :attr:`symbols` (one pass over the batch per window: a simulation
        calls this once a step)."""
        n = decodes = 0
        for c, _ in batch:
            n += c
            decodes += c == 1
        pair_sums, read_sums = [], []
        for w in self.windows:
            if w is None:
                pair_sums.append(sum(c * p + c * (c + 1) // 2 for c, p in batch))
                read_sums.append(n + sum(p for _, p in batch))
            else:
                pair_sums.append(sum(pairs(c, p, w) for c, p in batch))
                read_sums.append(sum(min(p + c, w) for c, p in batch))
        e, k = self.routing or (1, 1)
        touched = experts_touched(e, k, n * self.attention_dp) if n else 0
        captured = decodes == len(batch) and self.graph_sizes and n <= self.graph_sizes[-1]
        return [n, len(batch), *pair_sums, *read_sums, touched, 0 if captured else 1]

    def sizes(self, batch: Sequence[Entry]) -> dict[sympy.Symbol, float]:
        """The batch's sums, by symbol (the arguments of :attr:`expression`)."""
        return dict(zip(self.symbols, self._args(batch)))

    @functools.cached_property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """The arguments of the compiled functions, in order."""
        return (N, R, *self.pair_symbols, *self.read_symbols, TOUCHED, self.eager)

    def __call__(self, batch: Sequence[Entry]) -> float:
        """Seconds of one step of ``batch``; an empty batch takes no time."""
        if not batch:
            return 0.0
        return float(self._fn(*self._args(batch)))

    def step_flops(self, batch: Sequence[Entry], *, matmul: bool = False) -> int:
        """FLOPs one device runs in a step of ``batch``, exact (a multiply-add is 2); ``matmul``: only those of
        matmuls and attention's contractions (what ``FlopCounterMode`` counts)."""
        if not batch:
            return 0
        s = self.sizes(batch)
        return self._flops_fn(*(int(s[x]) if x is not TOUCHED else 0 for x in self.symbols))[1 if matmul else 0]

    def breakdown(self, batch: Sequence[Entry]) -> dict[str, float]:
        """Seconds of the step by what binds each kernel (:data:`PARTS`); they add up to the step."""
        if not batch:
            return dict.fromkeys(PARTS, 0.0)
        return dict(zip(PARTS, (float(x) for x in self._parts_fn(*self._args(batch)))))


TOUCHED = sympy.Symbol("E_touched", positive=True)


def _where(cond, a, b):
    return a if cond else b


#: Scalar float mode of the generated formulas (a step is one point, not an array): floats and math's functions.
SCALAR = (lambda p, q=1: p / q, operator.truediv, max, min, math.ceil, math.floor, _where, lambda *c: all(c))


def _query_axes(op, original) -> set[str]:
    """Axes of a decode op that index the new tokens: sized T in the prefill graph's op of the same node."""
    return {a for a, v in original.size.items() if v.has(T)} if original is not None else set()


def _ceil_share(axes, sizes, split, tp: int) -> sympy.Expr:
    """The share of a tensor with ``axes`` one of ``tp`` devices holds: whole heads of its first split axis."""
    for a in axes:
        if a in split and tp > 1:
            n = sympy.Integer(sizes[a])
            return sympy.ceiling(n / tp) / n if n.is_Integer else sympy.Integer(1) / tp
    return sympy.Integer(1)


def step_model(
    G: nx.DiGraph,
    values: Mapping[sympy.Symbol, int],
    dev: Device,
    *,
    tp: int = 1,
    ep: int = 1,
    weights_dtype: str = "bf16",
    step_overhead_s: object = 0,
    layer_overhead_s: object = 0,
    graph_sizes: tuple[int, ...] = (),
    graph_kernel_overhead_s: object = 0,
    allreduce_latency_s: object = None,
    imbalance: object = 1,
    compute_scale: object = 1,
    memory_scale: object = 1,
    communication_scale: object = 1,
    kv_dtype: str | None = None,
    attention_dp: int = 1,
) -> StepModel:
    """The step model of ``G`` (its attention pass applied) at ``values`` on ``dev`` under ``tp``/``ep``.

    ``compute_scale``, ``memory_scale`` and ``communication_scale`` multiply each kernel's compute time, its
    memory time (before the max of the two) and the collectives' time: an engine's kernels against the device
    table's attained rates, fitted to measured serving runs (:mod:`costmodel.serving.validation`; 1 leaves the
    step as derived). ``kv_dtype``: the KV cache's element type where it is not the attention op's (``fp8``): the
    cache's reads are that many bytes a position (the default reads the op's dtype). ``attention_dp``: ranks of
    attention data parallelism whose tokens the expert layers see together (see the module notes)."""
    if tp < 1 or ep < 1 or attention_dp < 1:
        raise CostModelError(
            f"serving step: tp, ep and attention_dp must be >= 1, received tp={tp}, ep={ep}, attention_dp={attention_dp}"
        )
    if attention_dp > 1 and ep != tp * attention_dp:
        raise CostModelError(
            f"serving step: attention data parallelism shards the experts over the tp × attention_dp devices: "
            f"ep {tp * attention_dp}, received ep {ep}"
        )
    if not float(imbalance) >= 1:
        raise CostModelError(
            f"serving step: the expert load imbalance is the busiest device's load over the mean, >= 1; received {imbalance}"
        )
    D = decode_graph(G)
    keep = {k: sympy.Integer(v) for k, v in values.items() if k not in (B, C, T)}
    eff = dataclasses.replace(dev.efficiency, sustained=sympy.Integer(1))
    if allreduce_latency_s is not None:  # an engine's own all-reduce for small messages (vLLM's custom kernel)
        tier = dataclasses.replace(eff.scale_up, latency_s=sympy.Rational(str(allreduce_latency_s)))
        eff = dataclasses.replace(eff, scale_up=tier)
    split = frozenset(split_axes(G))
    fmt = weight_format(weights_dtype)
    dtype = G.graph.get("dtype", "bf16")
    # a GEMM of fp8 weights runs in fp8 (W8A8: the activations are quantized too) at the fp8 peak and on the
    # device's measured fp8 curve where the table has one (b200: its small shapes reach less of the peak than
    # bf16's do); elsewhere on bf16's curve at the fp8 peak (Efficiency.curve's fallback)
    compute_dtype = "fp8" if fmt.name == "fp8" and "fp8" in dev.peak_flops else dtype
    peak = dev.peak(compute_dtype)
    vector = dev.peak("fp32") if "fp32" in dev.peak_flops else peak
    bw = dev.memory_bandwidth
    s = Split(
        micro=N, tp=sympy.Integer(tp), cp=sympy.Integer(1), ep=sympy.Integer(ep), seq_tp=sympy.Integer(1), split=split
    )
    parts = dict.fromkeys(PARTS, sympy.Integer(0))
    windows: dict[int | None, tuple[sympy.Symbol, sympy.Symbol]] = {}
    routing = None
    layers = sympy.Integer(0)

    eager = sympy.Symbol("eager", nonnegative=True)  # 1 on a step launched kernel by kernel, 0 in a CUDA graph
    in_graph = sympy.Rational(str(graph_kernel_overhead_s))
    k_compute, k_memory, k_comm = (sympy.Rational(str(x)) for x in (compute_scale, memory_scale, communication_scale))
    if not all(k > 0 for k in (k_compute, k_memory, k_comm)):
        raise CostModelError(
            f"serving step: time scales must be > 0, received compute {compute_scale}, memory {memory_scale}, "
            f"communication {communication_scale}"
        )

    def charge(count, compute_s, weight_b, other_b, t0, kv: bool = False):
        """One kernel: max(compute, memory) + its fixed time, that time given to what binds the kernel."""
        compute_s = compute_s * k_compute
        memory_s = (weight_b + other_b) / (bw * eff.memory) * k_memory
        body = maximum(compute_s, memory_s)
        fixed = eager * t0 + (1 - eager) * min(in_graph, t0)  # a captured kernel pays no launch
        parts["overhead"] += count * fixed
        bound = choose(compute_s, memory_s, 1, 0) if compute_s != 0 else sympy.Integer(0)
        parts["compute"] += count * bound * body
        total_b = weight_b + other_b
        if total_b != 0:  # memory time: the weights' (or the cache's) share of the bytes, and the rest
            share_w = weight_b / total_b
            parts["kv" if kv else "weights"] += count * (1 - bound) * body * share_w
            parts["activations"] += count * (1 - bound) * body * (1 - share_w)
        return count * (body + fixed)

    total = flops_total = matmul_total = a2a = sympy.Integer(0)
    s_ep = dataclasses.replace(s, tp=sympy.Integer(1))
    heads = set(head(G))
    dispatched: set[str] = set()  # inputs already sent to the experts
    for name, data in op_nodes(D):
        op = data["op"]
        count = sympy.sympify(data["count"]).xreplace(keep)
        layers = sympy.Max(layers, count)
        key_axes = {a for a, v in op.size.items() if v.has(C)}
        if key_axes:  # an op that reads the KV cache: per query, per pair and per cached position
            wins = {_window(op.size[a].xreplace(keep)) for a in key_axes}
            if len(wins) != 1 or None in wins:
                raise CostModelError(f"serving step: cannot read the key positions of {name} ({op.pattern})")
            ((_, w),) = wins
            if w not in windows:
                tag = "" if w is None else f"_{w}"
                windows[w] = (sympy.Symbol(f"K{tag}", positive=True), sympy.Symbol(f"S{tag}", positive=True))
            k_sym, s_sym = windows[w]
            query = _query_axes(op, G.nodes[name]["op"] if name in G else None) - key_axes
            one = {B: 1, C: sympy.Symbol("_c")}
            f = sympy.expand(
                (op_cost(op).forward.flops + op_cost(op).forward.recompute_flops).xreplace(keep).xreplace(one)
            )
            f1 = f.coeff(one[C], 1)
            f0 = f - f1 * one[C]
            by_q = by_k = sympy.Integer(0)
            sizes = {a: v.xreplace(keep) for a, v in op.size.items()}
            unit = key_axes | query | {a for a, v in op.size.items() if v == B}  # one query, one key, one sequence
            for axes in (*op.parsed.inputs, op.parsed.output):
                el = sympy.Mul(*(1 if a in unit else sizes[a] for a in axes)) * dtype_bytes(op.dtype)
                if any(a in key_axes for a in axes) and not any(a in query for a in axes):
                    if kv_dtype is not None:  # the cache in its own format
                        el = el * dtype_bytes(kv_dtype) / dtype_bytes(op.dtype)
                    by_k += el * _ceil_share(axes, sizes, split, tp)  # the cache: read once per position
                else:
                    by_q += el * _ceil_share(axes, sizes, split, tp)  # queries and outputs: once per new token
            fm = sympy.expand(op_cost(op).forward.matmul_flops.xreplace(keep).xreplace(one))
            fm1 = fm.coeff(one[C], 1)
            flops_total += count * (f1 * k_sym + f0 * N) / tp
            matmul_total += count * (fm1 * k_sym + (fm - fm1 * one[C]) * N) / tp
            compute = (f1 * k_sym + f0 * N) / tp / (peak * eff.attention)
            total += charge(count, compute, by_k * s_sym, by_q * N, eff.overhead_s, kv=True)
            continue
        use = weight_use(op)
        # the unembedding runs on each request's last position only; an expert layer on every attention-dp rank's
        rows = R if name in heads else N * attention_dp if use == "routed" else N
        expert_parallel = use == "routed" and ep > 1
        div = divisors(op, s_ep if expert_parallel else s)
        # a device holding 1/n of the experts (expert parallelism, or tensor parallelism over the experts axis, as
        # the layout splits it) computes the tokens routed to them: 1/n of the copies; under expert parallelism the
        # busiest device `imbalance` times the mean
        share = sympy.Integer(1)
        if use == "routed":
            share = (sympy.Rational(str(imbalance)) if expert_parallel else 1) / div.get(str(op.attr("experts")), 1)
        sized = on_device(op, div, rows)
        cost = op_cost(sized).forward
        flops_total += count * share * (cost.flops + cost.recompute_flops).xreplace(keep)
        matmul_total += count * share * cost.matmul_flops.xreplace(keep)
        moved = sympy.expand(cost.bytes.xreplace(keep))
        weight_b = moved.subs(rows, 0)  # the weights: bytes whatever the batch
        other_b = sympy.expand(moved - weight_b) * share
        if use == "dense" and weight_b != 0:
            weight_b = weight_b * sympy.Rational(fmt.bits, 8 * dtype_bytes(op.dtype)) + (
                weight_b / dtype_bytes(op.dtype) * sympy.Rational(fmt.scale_bytes, fmt.group) if fmt.group else 0
            )
        if use == "routed":
            e, k = (
                int(sympy.Integer(op.size[str(op.attr("experts"))].xreplace(keep))),
                int(sympy.Integer(op.size[str(op.attr("route"))].xreplace(keep))),
            )
            routing = (e, k)
            weight_b = weight_b * sympy.Rational(fmt.bits, 8 * dtype_bytes(op.dtype)) * TOUCHED / e
            if expert_parallel:
                dispatch = str(op.attr("route")) in op.parsed.output
                source = D.nodes[name]["inputs"][0]
                first = (
                    dispatch and weight_use(D.nodes[source]["op"]) != "routed" if "op" in D.nodes[source] else dispatch
                )
                # the tokens go out once before the first expert matmuls (gate and up read the same input: one
                # dispatch), come back after the last
                if (first and source not in dispatched) or not dispatch:
                    dispatched.add(source)
                    nbytes = routed_bytes(op, N * attention_dp).xreplace(keep).xreplace({T: 1}) / ep
                    a2a += collective_seconds("all_to_all", nbytes, dev, eff, ep, 1, count)
        gemm = _gemm(sized, Counting()) if cost.matmul_flops != 0 else None
        flops = cost.matmul_flops.xreplace(keep)
        if gemm is not None:
            a, b_, c_ = (x.xreplace(keep) for x in gemm)
            if use == "routed":  # a GEMM per touched expert: the untouched ones are not launched
                b_ = b_ * TOUCHED / routing[0]
            curve = eff.curve(compute_dtype)
            compute = gemm_seconds(flops * share, a * share, b_, c_ * share, peak, curve)
            t0 = curve.overhead_s
        else:
            compute, t0 = sympy.Integer(0), eff.overhead_s
        compute += share * (cost.flops - cost.matmul_flops).xreplace(keep) / vector
        if compute == 0 and weight_b == 0 and other_b == 0:
            continue
        total += charge(count, compute, weight_b, other_b, t0)
    comm = a2a
    if tp > 1:
        for name, items in tp_collectives(D, split).items():
            count = sympy.sympify(D.nodes[name]["count"]).xreplace(keep)
            for phase, op in items:
                if phase == "forward":
                    nbytes = tp_bytes(op, "forward", N, sympy.Integer(1)).xreplace(keep).xreplace({T: 1})
                    comm += collective_seconds("all_reduce", nbytes, dev, eff, tp, 1, count)
    comm = comm * k_comm
    parts["communication"] += comm
    fixed = sympy.Rational(str(step_overhead_s)) + eager * sympy.Rational(str(layer_overhead_s)) * layers
    parts["overhead"] += fixed
    expression = total + comm + fixed
    pair_syms = tuple(windows[w][0] for w in windows)
    read_syms = tuple(windows[w][1] for w in windows)
    model = StepModel(
        expression,
        parts,
        sympy.expand(flops_total),
        sympy.expand(matmul_total),
        tuple(windows),
        pair_syms,
        read_syms,
        routing,
        layers,
        tuple(graph_sizes),
        eager,
        attention_dp,
    )
    args = model.symbols
    fn = compile_exprs([expression, *(parts[p] for p in PARTS)], args)
    exact = compile_exprs([model.flops, model.matmul_flops], args)
    object.__setattr__(model, "_fn", lambda *v: fn(SCALAR, *v)[0])
    object.__setattr__(model, "_parts_fn", lambda *v: fn(SCALAR, *v)[1:])
    object.__setattr__(model, "_flops_fn", lambda *v: exact(EXACT, *v))
    return model


def decode_tokens_per_s(model: StepModel, batch: int, context: int) -> float:
    """Output tokens per second of a steady decode of ``batch`` sequences at ``context`` tokens."""
    return batch / model([(1, context)] * batch)
