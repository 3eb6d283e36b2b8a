"""Op records and the one registry of op kinds.

An :class:`Op` is what a graph node carries: a kind, an einops pattern, the size of every axis, a dtype
and a few attributes. A :class:`Kind`, registered once per kind with :func:`rule`, holds *everything*
costmodel knows about that kind: the rule that derives an :class:`~costmodel.graph.cost.OpCost` from an
op (forward and backward FLOPs and bytes, parameter tensors, tensors saved for backward) and the facts
analyses ask of it (which operand is a weight and how it is used, the output dtype, whether the output is
a view, whether it is element-wise...). Analyses never test ``op.kind``: they ask :func:`kind_of`, so a
new kind declares its facts in one place and every analysis honours them.

Conventions written where they bite:

* A multiply-add is 2 FLOPs, so a contraction costs 2 × the product of all its distinct axes.
* Backward of a contraction is derived, not assumed: it *is* the contractions for the gradient of each
  input (for a weight matmul: the input gradient and the weight gradient), hence 2 × forward.
* Non-matmul FLOPs per element (GELU, softmax, norms...) are conventions of the rules; PyTorch's
  ``FlopCounterMode`` counts none of them, which is why a Cost keeps ``matmul_flops`` apart.
* Causal attention: see :class:`~costmodel.options.Counting`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from ..errors import CostModelError, closest
from ..options import Counting
from .cost import Cost, OpCost
from .pattern import Axes, Pattern, parse


@dataclass(frozen=True)
class Op:
    """One op of a graph: a registered kind applied to a pattern with every axis sized."""

    kind: str
    pattern: str
    sizes: tuple[tuple[str, sympy.Expr], ...]
    dtype: str = "bf16"
    attrs: tuple[tuple[str, object], ...] = ()

    @property
    def parsed(self) -> Pattern:
        return parse(self.pattern)

    @property
    def size(self) -> Mapping[str, sympy.Expr]:
        return dict(self.sizes)

    def attr(self, name: str, default: object = None) -> object:
        return self._attrs.get(name, default)

    @functools.cached_property  # a frozen record: the attributes' dict is built once, not per lookup
    def _attrs(self) -> dict[str, object]:
        return dict(self.attrs)

    def __hash__(self) -> int:
        """The fields' hash, computed once: every ``op_cost`` lookup hashes the op (thousands a derivation)."""
        got = self.__dict__.get("_hash")
        if got is None:
            got = self.__dict__["_hash"] = hash((self.kind, self.pattern, self.sizes, self.dtype, self.attrs))
        return got

    def __getstate__(self) -> dict:
        """The fields only: a cached hash is this process's (a string hashes differently in another)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_attrs")}

    def with_attrs(self, **attrs: object) -> Op:
        """The same op with attributes changed (``None`` removes one)."""
        merged = {**dict(self.attrs), **attrs}
        return Op(
            self.kind,
            self.pattern,
            self.sizes,
            self.dtype,
            tuple(sorted((k, v) for k, v in merged.items() if v is not None)),
        )

    def subs(self, values: Mapping) -> Op:
        """The same op with numbers (or other expressions) substituted into its sizes."""
        return Op(self.kind, self.pattern, tuple((a, s.subs(values)) for a, s in self.sizes), self.dtype, self.attrs)


Rule = Callable[[Op, Counting], OpCost]
WeightOperand = int | None | Callable[[Op], "int | None"]  # an index, none, or a function of the op (composites)


def _own_dtype(op: Op) -> str:
    return op.dtype


def _never(op: Op) -> bool:
    return False


def _no_workspace(op: Op) -> sympy.Expr:
    return sympy.Integer(0)


@dataclass(frozen=True)
class Kind:
    """An op kind: its rule and every fact analyses need about it, declared once by :func:`rule`.

    Attributes
    ----------
    name, cost : the kind and its rule ``(op, counting) -> OpCost``.
    weight_operand : which pattern operand is a weight (no producer node; ``None``: none), or a function of
        the op (a fused op: its first part's).
    weight_use : how that weight is used: ``"dense"`` (a matmul: Megatron tensor parallelism splits it,
        LoRA adapts it, decode may absorb it), ``"routed"`` (experts picked per token: expert parallelism),
        ``"table"`` (rows looked up: vocab-parallel).
    output_dtype : the dtype of the op's output (a loss: its log-probabilities' dtype).
    view : whether the output is a view of input 0 (shares its storage: nothing new is kept).
    pointwise : element-wise (the output has the input's shape): folds into its producer under fusion, and
        may stand between the scores and the softmax, or the softmax and the context, of attention.
    fusion_barrier : nothing folds into it (the loss).
    normalizer : a softmax: attention chains are found around it (scores → softmax → context).
    counts_softmax : its non-matmul FLOPs are softmax FLOPs (kept by Chinchilla's convention).
    training_only : not run in inference (the loss).
    no_grad : data inputs that never get a gradient (a lookup's token ids).
    backward_workspace : bytes alive during its backward beyond the gradients of its inputs and output.
    cache_operands : for one decode step, the operands that may read a KV cache, each with the operand it
        is contracted against (``None``: it meets the probabilities, as a value does).
    dedupes_inputs : reads a tensor given twice once (a fused kernel); attribute ``repeats`` lists them.
    attention_attrs : attributes of a normalizer that the fused ``attention`` op made from its chain keeps
        (a softmax's ``sink``: the learned logit per head joins the fused softmax too).
    state_bytes : bytes of the recurrent state one run of the op carries from one token to the next, for the
        whole batch (a causal convolution's last inputs, a selective scan's state): an inference cache that
        does not grow with the context. A decode step (attribute ``decode=True``, set by
        :func:`~costmodel.graph.decode.decode_graph`) reads it and writes it back.
    """

    name: str
    cost: Rule
    weight_operand: WeightOperand = None
    weight_use: str | None = None
    output_dtype: Callable[[Op], str] = _own_dtype
    view: Callable[[Op], bool] = _never
    pointwise: bool = False
    fusion_barrier: bool = False
    normalizer: bool = False
    counts_softmax: bool = False
    training_only: bool = False
    no_grad: tuple[int, ...] = ()
    backward_workspace: Callable[[Op], sympy.Expr] = _no_workspace
    cache_operands: Callable[[Op], Mapping[int, int | None]] | None = None
    dedupes_inputs: bool = False
    attention_attrs: tuple[str, ...] = ()
    state_bytes: Callable[[Op], sympy.Expr] | None = None


KINDS: dict[str, Kind] = {}
WEIGHT_USES = ("dense", "routed", "table")


def rule(kind: str, **facts: object) -> Callable[[Rule], Rule]:
    """Register the rule of ``kind`` with its facts (the fields of :class:`Kind`); a kind registered twice
    raises. A user's package registers its own kinds the same way, before building graphs with them::

        @rule("my_kind", weight_operand=1, weight_use="dense")
        def _my_kind(op: Op, counting: Counting) -> OpCost: ...
    """
    unknown = [k for k in facts if k not in Kind.__dataclass_fields__ or k in ("name", "cost")]
    if unknown:
        raise CostModelError(
            f"rule {kind!r}: unknown fact {unknown[0]!r}"
            f"{closest(unknown[0], Kind.__dataclass_fields__)}; facts: "
            + ", ".join(k for k in Kind.__dataclass_fields__ if k not in ("name", "cost"))
        )
    if facts.get("weight_use") not in (None, *WEIGHT_USES):
        raise CostModelError(
            f"rule {kind!r}: weight_use must be one of {WEIGHT_USES} or None, received {facts['weight_use']!r}"
        )

    def register(fn: Rule) -> Rule:
        # the same source loaded twice (a module run as a file, e.g. by a doctest collector) registers again
        if kind in KINDS and not _same_source(KINDS[kind].cost, fn):
            raise CostModelError(f"op rule {kind!r} is already registered (by {KINDS[kind].cost.__name__})")
        KINDS[kind] = Kind(kind, fn, **facts)
        return fn

    return register


def _same_source(a: Rule, b: Rule) -> bool:
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (
        code_a is not None
        and code_b is not None
        and (code_a.co_filename, code_a.co_firstlineno, a.__qualname__)
        == (code_b.co_filename, code_b.co_firstlineno, b.__qualname__)
    )


def kind_of(op: Op | str) -> Kind:
    """The registered :class:`Kind` of an op (or a kind name); an unknown kind names the closest."""
    name = op if isinstance(op, str) else op.kind
    if name not in KINDS:
        raise CostModelError(f"no op rule for kind {name!r}{closest(name, KINDS)}; registered: {sorted(KINDS)}")
    return KINDS[name]


def weight_operand(op: Op) -> int | None:
    """The index of ``op``'s weight among its pattern operands (``None``: it has none), from its kind.

    >>> weight_operand(Op("matmul", "b d, d f -> b f", ())), weight_operand(Op("softmax", "b s -> b s", ()))
    (1, None)
    """
    found = kind_of(op).weight_operand
    return found(op) if callable(found) else found


def has_weight(op: Op) -> bool:
    """Whether ``op`` reads a weight operand (a matmul, a routed matmul, a lookup table...)."""
    return weight_operand(op) is not None


def weight_use(op: Op) -> str | None:
    """How ``op`` uses its weight (``"dense"``, ``"routed"``, ``"table"``), ``None`` without one.

    A fused op answers for its first part, whose operands it starts with."""
    parts = op.attr("parts")
    return weight_use(parts[0]) if parts else kind_of(op).weight_use


def state_bytes(op: Op) -> sympy.Expr:
    """Bytes of the recurrent state ``op`` keeps between decode steps (0 for a kind that keeps none).

    >>> state_bytes(Op("matmul", "b d, d f -> b f", ()))
    0
    """
    found = kind_of(op).state_bytes
    return sympy.Integer(0) if found is None else found(op)


def data_operands(op: Op) -> tuple[Axes, ...]:
    """The pattern operands of ``op`` that are graph tensors, in the order of the node's ``inputs``."""
    return tuple(axes for j, axes in enumerate(op.parsed.inputs) if j != weight_operand(op))


def is_activation_product(op: Op, counting: Counting = Counting()) -> bool:
    """A contraction of two activations (attention's scores and context): matmul FLOPs and no weight."""
    return not has_weight(op) and op_cost(op, counting).forward.matmul_flops != 0


@functools.lru_cache(maxsize=65536)
def op_cost(op: Op, counting: Counting = Counting()) -> OpCost:
    """Derive the costs of ``op`` with the registered rule of its kind.

    Any op with the attribute ``detached=True`` has no backward and keeps nothing for it: autograd builds
    no backward node where no input needs a gradient (a mask built from positions, an ``argmax``).
    """
    kind = kind_of(op)
    cost = kind.cost(op, counting)
    if op.attr("detached"):  # no gradient flows through this op (a mask, indices): no backward, nothing kept
        cost = OpCost(cost.forward, Cost(), cost.weights, (), cost.active)
    keep = {"all": True, "none": False, "softmax": kind.counts_softmax}[counting.elementwise]
    if keep:
        return cost
    # drop non-matmul FLOPs (attention keeps its softmax FLOPs: its rule counts no epilogue then)
    return OpCost(
        *(
            Cost(
                flops=c.matmul_flops,
                matmul_flops=c.matmul_flops,
                bytes_read=c.bytes_read,
                bytes_written=c.bytes_written,
                recompute_flops=c.recompute_flops,
            )
            for c in (cost.forward, cost.backward)
        ),
        cost.weights,
        cost.saved,
        cost.active,
    )
