"""Model-state memory of training: precision policies × optimizers.

Bytes per parameter are *summed from components*, never typed in as a total:
weights + gradients + master weights + optimizer moments. With bf16 mixed
precision (bf16 weights and gradients, fp32 master weights) and AdamW (fp32 m
and v) the sum is 2 + 2 + 4 + 4 + 4 = 16. The lecture's table, 2 + 2 + 4 + 4 =
12, is the same without master weights (``bf16-pure-fp32-moments``); a bf16 model
under ``torch.optim`` keeps its moments in the parameters' dtype, 2 + 2 + 2 + 2 = 8
(``bf16-pure``); accumulating gradients in fp32 gives 18 (``bf16-mixed-fp32-grads``).

We count master weights under ``optimizer``, as the ZeRO paper does (its K = 12
for Adam is master weights + m + v), so ZeRO-1 shards exactly that.

:func:`model_state` sums the same components over the weights *of a graph*:
frozen weights (``trainable=False``, LoRA's base weights) hold no gradient,
master copy or optimizer state; Adafactor's factored second moment is sized
from each weight's axes (rows + columns of a matrix); torch's per-tensor
``step`` counters are counted per weight tensor. A frozen matmul weight stored in a weight format (QLoRA's
NF4 base: :func:`costmodel.graph.finetune.store_frozen`) costs that format's bytes (:func:`stored_bytes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import sympy

from ..graph.analysis import op_nodes
from ..graph.cost import Param, dtype_bytes
from ..graph.registry import op_cost, weight_operand, weight_use
from ..graph.rules import matrix
from ..options.policies import (  # noqa: F401 (OPTIMIZERS, PRECISIONS re-exported for readers)
    OPTIMIZERS,
    PRECISIONS,
    WeightFormat,
    optimizer,
    precision,
    weight_format,
)


def bytes_per_param(policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Expr]:
    """Bytes each (trainable) parameter costs, by component.

    Adafactor's factored moment and torch's per-tensor ``step`` depend on the
    weights' shapes, not on the parameter count: see :func:`model_state`.

    >>> parts = bytes_per_param("bf16-mixed", "adamw")
    >>> parts
    {'weights': 2, 'grads': 2, 'master': 4, 'm': 4, 'v': 4}
    >>> sum(parts.values())
    16
    >>> bytes_per_param("bf16-mixed", "adam-8bit")["m"]  # 1 byte + a 4-byte absmax per 2048
    513/512
    """
    p, o = precision(policy), optimizer(opt)
    parts = {"weights": dtype_bytes(p.weights)}
    if p.compute_copy is not None:
        parts["compute_copy"] = dtype_bytes(p.compute_copy)
    parts["grads"] = dtype_bytes(p.grads)
    if p.master is not None:
        parts["master"] = dtype_bytes(p.master)
    for state in o.states:
        parts[state] = dtype_bytes(p.states)
    for state in o.quantized:
        parts[state] = dtype_bytes("int8") + sympy.Rational(dtype_bytes("fp32"), o.block)
    return parts


def _split(parts: dict[str, sympy.Expr]) -> dict[str, sympy.Expr]:
    """Per-parameter components grouped into ``params``, ``grads``, ``optimizer`` (master + states)."""
    return {
        "params": parts["weights"] + parts.get("compute_copy", 0),
        "grads": parts["grads"],
        "optimizer": sum(
            (v for k, v in parts.items() if k not in ("weights", "compute_copy", "grads")), sympy.Integer(0)
        ),
    }


def model_state_bytes(params: sympy.Expr, policy: str = "bf16-mixed", opt: str = "adamw") -> dict[str, sympy.Expr]:
    """Model-state bytes for ``params`` parameters: ``params``, ``grads``, ``optimizer`` (master + moments).

    A function of the parameter count only (every parameter trainable, no
    factored state); :func:`model_state` is the same from a graph's weights.

    >>> from sympy import Symbol
    >>> model_state_bytes(Symbol("Psi"), "fp16-mixed", "adam")  # the ZeRO paper: 2 + 2 + K, K = 12
    {'params': 2*Psi, 'grads': 2*Psi, 'optimizer': 12*Psi}
    """
    return {k: params * v for k, v in _split(bytes_per_param(policy, opt)).items()}


@dataclass(frozen=True)
class Weight:
    """One parameter tensor of a graph: the :class:`~costmodel.graph.cost.Param` an op's rule declares,
    where it lives (``node``), how many copies a step has (``count``: one per layer) and whether it trains."""

    node: str
    param: Param
    count: sympy.Expr
    trainable: bool
    stored: str | None = None  # a weight format it is stored in (QLoRA's frozen base: nf4); None: the policy's

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def elements(self) -> sympy.Expr:
        return self.param.elements

    @property
    def axes(self) -> tuple[tuple[str, sympy.Expr], ...]:
        return self.param.axes

    @property
    def rows(self) -> sympy.Expr | None:
        return self.param.rows

    @property
    def cols(self) -> sympy.Expr | None:
        return self.param.cols

    @property
    def stack(self) -> sympy.Expr:
        return self.param.stack


def weights(G: nx.DiGraph) -> list[Weight]:
    """Every parameter tensor of ``G``, as the op rules declare them (a fused op: its parts'); a tied
    weight is counted at its owner."""
    out: list[Weight] = []
    for name, data in op_nodes(G):
        for op in data["op"].attr("parts") or (data["op"],):
            trainable = op.attr("trainable", True) is not False
            stored = op.attr("stored")
            out += [
                Weight(name, p, data["count"], trainable, stored if p.quantized else None) for p in op_cost(op).weights
            ]
    return out


def stored_bytes(w: Weight, f: WeightFormat) -> sympy.Expr:
    """Bytes of one copy of matmul weight ``w`` (one layer's) in format ``f``: ``f.bits`` per element, the
    scales of each group of ``f.group`` inputs per ``f.block_rows`` outputs (one per row without a group, one
    per matrix without block rows), ``f.index_bytes`` per input column; each of a stack (MoE experts) has its own.

    >>> from costmodel.options.policies import NF4
    >>> from costmodel.graph.cost import Param
    >>> w = Weight("q", Param("w", ((("d", 4096), ("e", 4096))), rows=4096, cols=4096), 1, False)
    >>> stored_bytes(w, NF4) / (4096 * 4096)  # QLoRA: 4 bits + an 8-bit absmax per 64 + an fp32 per 256 of them
    2113/4096
    """
    nbytes = w.elements * sympy.Rational(f.bits, 8)
    if f.index_bytes:
        nbytes += w.stack * w.cols * f.index_bytes
    if f.block_rows is None:  # one scale for the whole matrix
        per_matrix = sympy.Integer(1)
    else:
        rows = w.rows if f.block_rows == 1 else sympy.ceiling(w.rows / f.block_rows)
        per_matrix = rows if f.group is None else rows * sympy.ceiling(w.cols / f.group)
    return nbytes + w.stack * per_matrix * sympy.Rational(f.scale_bytes)


def tied_matrices(G: nx.DiGraph) -> list[Weight]:
    """The weights matmuls read through a tie (a tied unembedding reads the embedding table): owned, and
    counted, elsewhere, but a matmul's own operand, which autocast casts and keeps for backward."""
    out: list[Weight] = []
    for name, data in op_nodes(G):
        for op in data["op"].attr("parts") or (data["op"],):
            if op.attr("tied") and weight_use(op) in ("dense", "routed"):
                w = op.parsed.inputs[weight_operand(op)]
                out.append(Weight(name, matrix(op, w, op.parsed.output), data["count"], False))
    return out


def _factored(w: Weight) -> sympy.Expr:
    """Adafactor's second moment: rows + columns of each stacked matrix, the whole of a vector."""
    return w.elements if w.rows is None or w.cols in (None, 1) or w.rows == 1 else w.stack * (w.rows + w.cols)


def model_state(
    G: nx.DiGraph,
    policy: str = "bf16-mixed",
    opt: str = "adamw",
    share: Callable[[Weight], sympy.Expr] | None = None,
    scalars: bool = False,
) -> dict[str, sympy.Expr]:
    """Model-state bytes of ``G``'s weights, by component, summed from every weight tensor.

    Keys: ``weights``, ``compute_copy`` (fp8 policies: every weight; autocast: the matmul weights, whose
    low-precision casts autograd keeps for backward, a tied unembedding's too: :func:`tied_matrices`), ``grads``, ``master``,
    one per optimizer state, and the groups ``params`` (weights + compute copy),
    ``grads``, ``optimizer`` (master + states), ``trainable`` and ``frozen``
    (parameter counts). Frozen weights cost only their ``weights`` bytes.
    ``share(weight)`` is the fraction of each weight one device holds (tensor,
    pipeline or expert parallelism: see :mod:`costmodel.memory.parallel`); 1 by default.
    ``scalars``: count torch's 0-dim fp32 ``step`` per weight tensor (4 bytes
    each; the ZeRO paper's K and the report leave them out).

    >>> from costmodel.kit import GraphBuilder, symbols as s
    >>> b = GraphBuilder("fc", b=s.B, d=s.d, f=s.d_ff)
    >>> _ = b.matmul("fc", b.input("x", "b d", dtype="bf16"), "b d, d f -> b f")
    >>> st = model_state(b.graph, "fp32", "adafactor", scalars=True)
    >>> st["v"], st["step"]  # factored: rows + cols in fp32; one fp32 step per tensor
    (4*d + 4*d_ff, 4)
    """
    p, o = precision(policy), optimizer(opt)
    parts = bytes_per_param(policy, opt)
    zero = sympy.Integer(0)
    # terms are collected and summed once (a += per weight re-flattens a growing sum: quadratic in the weights)
    terms: dict[str, list[sympy.Expr]] = {k: [] for k in ("weights", "compute_copy", "grads", "master")}
    counters = o.scalars if scalars else ()
    terms.update({k: [] for k in (*o.states, *o.quantized, *o.factored, *counters)})
    trainable: list[sympy.Expr] = []
    frozen: list[sympy.Expr] = []
    if p.copy_of == "matrices":  # autocast's casts: a tied matrix is cast again where a matmul reads it
        for w in tied_matrices(G):
            part = share(w) if share is not None else 1
            terms["compute_copy"].append(w.elements * w.count * part * parts["compute_copy"])
    groups: Counter = Counter()  # equal weights (unrolled identical layers) multiplied once: expanded, the same sums
    for w in weights(G):
        groups[w.param, w.count, share(w) if share is not None else 1, w.trainable, w.stored] += 1
    for (param, count, part, trains, stored), copies in groups.items():
        w = Weight("", param, count * copies, trains, stored)
        n = w.elements * w.count * part
        if stored is not None:  # a frozen base in a weight format (QLoRA), dequantised per matmul: no kept copy
            terms["weights"].append(stored_bytes(w, weight_format(stored)) * w.count * part)
        else:
            terms["weights"].append(n * parts["weights"])
        if stored is None and (p.copy_of == "weights" or w.param.quantized):  # autocast casts the matmuls' only
            terms["compute_copy"].append(n * parts.get("compute_copy", 0))
        if not w.trainable:
            frozen.append(n)
            continue
        trainable.append(n)
        for key in ("grads", "master", *o.states, *o.quantized):
            terms[key].append(n * parts.get(key, 0))
        for key in o.factored:
            terms[key].append(_factored(w) * w.count * part * dtype_bytes(p.states))
        for key in counters:
            terms[key].append(w.count * dtype_bytes("fp32") * (1 if part != 0 else 0))  # every shard keeps one
    out: dict[str, sympy.Expr] = {k: sympy.Add(zero, *v) for k, v in terms.items()}
    trainable, frozen = sympy.Add(zero, *trainable), sympy.Add(zero, *frozen)
    out = {k: sympy.expand(v) for k, v in out.items()}
    out["params"] = out["weights"] + out["compute_copy"]
    out["optimizer"] = sympy.expand(
        sum((out[k] for k in ("master", *o.states, *o.quantized, *o.factored, *counters)), zero)
    )
    out["trainable"], out["frozen"] = sympy.expand(trainable), sympy.expand(frozen)
    return out


def policy_table(optimizers: tuple[str, ...] = ("sgd", "sgd-momentum", "adamw", "adam-8bit", "lion")) -> str:
    """Bytes per trainable parameter, by component, for every policy × ``optimizers`` (a Markdown table).

    ``docs/memory.md`` carries this table; a test fails when the two drift.
    """
    rows = ["| precision | optimizer | bytes per parameter, by component | total |", "| --- | --- | --- | --- |"]
    for p in PRECISIONS:
        for o in optimizers:
            parts = bytes_per_param(p, o)
            rows.append(f"| {p} | {o} | {' + '.join(f'{v} {k}' for k, v in parts.items())} | {sum(parts.values())} |")
    return "\n".join(rows)
