"""Build op graphs: a thin writer over a plain ``networkx.DiGraph``.

Each call adds one node carrying an :class:`~costmodel.ops.Op` and returns the
:class:`Tensor` it produces; edges carry tensors from producer to consumer.
A block repeated ``L`` times is built once inside :meth:`GraphBuilder.repeat`
and its nodes carry ``count=L``: the graph never grows with ``L``.

Node attributes: ``op`` (the Op), ``count`` (how many times it runs per step),
``block`` (the dotted name of its enclosing block), ``inputs`` (producer node of
each input operand, in order), ``embedding`` (its parameters are embeddings).

>>> from costmodel.kit import GraphBuilder, symbols as s
>>> b = GraphBuilder("mlp", b=s.B, t=s.T, d=s.d, f=s.d_ff)
>>> x = b.input("x", "b t d")
>>> with b.repeat("layers", s.L):
...     y = b.matmul("up", x, "b t d, d f -> b t f")
>>> b.graph.nodes["layers.up"]["count"]
L
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import networkx as nx
import sympy

from ..dtypes import check_dtype
from ..errors import CostModelError
from .pattern import Axes, check_size, elements, parse, resolve_sizes
from .registry import Op, kind_of, op_cost, weight_operand


@dataclass(frozen=True)
class Tensor:
    """A tensor of the graph: the node that makes it, its axes and their sizes."""

    node: str
    axes: Axes
    sizes: tuple[tuple[str, sympy.Expr], ...]
    dtype: str

    @property
    def elements(self) -> sympy.Expr:
        return elements(self.axes, dict(self.sizes))


class GraphBuilder:
    """Write ops into ``self.graph``; axis sizes given here apply to every op.

    Parameters
    ----------
    name:
        The graph's name.
    dtype:
        The dtype of activations and weights unless an op says otherwise.
    **sizes:
        Axis name → size (a symbol, an expression or a positive integer).
    """

    def __init__(self, name: str, *, dtype: str = "bf16", **sizes: object) -> None:
        self.graph = nx.DiGraph(name=name, dtype=dtype, blocks={})
        self.dtype = dtype
        self.sizes = {axis: check_size(v, f"graph {name!r}: axis {axis!r}") for axis, v in sizes.items()}
        self._prefix: list[str] = []
        self._count: sympy.Expr = sympy.Integer(1)

    # -- structure -------------------------------------------------------------------------

    @contextlib.contextmanager
    def repeat(self, name: str, count: object) -> Iterator[None]:
        """Ops added inside run ``count`` times (nested repeats multiply)."""
        count = check_size(count, f"block {name!r}: count")
        saved = self._count
        self._prefix.append(name)
        self._count = saved * count
        self.graph.graph["blocks"][".".join(self._prefix)] = self._count
        try:
            yield
        finally:
            self._prefix.pop()
            self._count = saved

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Group ops under a dotted name without repeating them."""
        with self.repeat(name, 1):
            yield

    def input(self, name: str, pattern: str, *, dtype: str = "int64", **sizes: object) -> Tensor:
        """A tensor fed to the graph (token ids, positions...). It costs nothing."""
        full = self._name(name)
        p = parse(pattern)
        resolved = resolve_sizes(p, {**self.sizes, **self._checked(sizes, full)}, f"input {full!r}")
        self.graph.add_node(full, count=self._count, block=".".join(self._prefix), inputs=())
        return Tensor(full, p.output, tuple((a, resolved[a]) for a in p.output), dtype)

    def require(self, condition: sympy.Basic, why: str) -> None:
        """A condition every config of the graph must meet (``T <= T_max``), checked with the numbers.

        Stored in ``graph.graph["constraints"]`` as ``(condition, why)``; a config that
        makes it false is refused with ``why`` in the message.
        """
        if not isinstance(condition, sympy.logic.boolalg.Boolean):
            raise CostModelError(f"require: expected a sympy relation such as T <= T_max, received {condition!r}")
        self.graph.graph.setdefault("constraints", []).append((condition, why))

    def tokens(self, per_step: sympy.Expr) -> None:
        """The tokens one step processes, when not B·T: an encoder–decoder's ``B·(T_src + T)``, a ViT's
        ``B·((r_img/r_patch)² + 1)``. Stored in ``graph.graph["tokens"]``; what ``tokens.per_step``, 6·N·D and
        per-token numbers divide by (:func:`costmodel.graph.analysis.tokens_per_step`)."""
        self.graph.graph["tokens"] = check_size(per_step, f"graph {self.graph.graph['name']!r}: tokens per step")

    def tag(self, tensor: Tensor, *tags: str, positions: sympy.Expr | None = None) -> Tensor:
        """Mark the node that makes ``tensor`` (node attribute ``tags``, a set).

        Tags are how analyses find roles the engine cannot infer from patterns:
        ``"kv_cache"`` marks a tensor an inference KV cache keeps for every token
        of context (the k and v projections, or MLA's latent). ``positions``: how
        many of T tokens it keeps, as an expression of T (a sliding window's
        ``Min(T, W - 1)``; node attribute ``kv_positions``; default all T).
        """
        data = self.graph.nodes[tensor.node]
        data.setdefault("tags", set()).update(tags)
        if positions is not None:
            data["kv_positions"] = positions
        return tensor

    # -- ops (thin entry points over one engine) ----------------------------------------------

    def matmul(
        self,
        name: str,
        x: Tensor,
        pattern: str,
        *,
        bias: str | None = None,
        tied: str | None = None,
        trainable: bool = True,
        embedding: bool = False,
        input_grad: bool = True,
        **sizes: object,
    ) -> Tensor:
        """Input × weight: ``"b t d, d f -> b t f"``; the second operand is the weight.

        ``bias="f"`` adds a bias over those axes; ``tied="wte"`` reuses the weight of
        that node (its parameters are counted there). ``input_grad=False``: the input needs no
        gradient (a graph input such as pixels), so backward has no input-gradient matmul.
        """
        if tied is not None:
            tied = self._tied(tied, pattern)
        attrs = {
            "bias": bias,
            "tied": tied,
            "trainable": None if trainable else False,
            "input_grad": None if input_grad else False,
        }
        return self._add(name, "matmul", pattern, [x], attrs, sizes, embedding=embedding)

    def contract(
        self, name: str, a: Tensor, b: Tensor, pattern: str, *, causal: bool = False, **sizes: object
    ) -> Tensor:
        """Activation × activation: ``"b h t k, b h s k -> b h t s"``."""
        return self._add(name, "contraction", pattern, [a, b], {"causal": causal or None}, sizes)

    def elementwise(self, name: str, fn: str, inputs: Tensor | list[Tensor], pattern: str, **sizes: object) -> Tensor:
        """An element-wise function (``"add"``, ``"gelu"``, ``"dropout"``...)."""
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        return self._add(name, "elementwise", pattern, inputs, {"fn": fn}, sizes)

    def softmax(self, name: str, x: Tensor, pattern: str, *, axis: str | None = None, **sizes: object) -> Tensor:
        return self._add(name, "softmax", pattern, [x], {"axis": axis}, sizes)

    def norm(
        self,
        name: str,
        x: Tensor,
        pattern: str,
        *,
        axis: str | None = None,
        rms: bool = False,
        bias: bool | None = None,
        **sizes: object,
    ) -> Tensor:
        """LayerNorm (default) or RMSNorm (``rms=True``) over ``axis`` (default: the last)."""
        return self._add(name, "norm", pattern, [x], {"axis": axis, "rms": rms or None, "bias": bias}, sizes)

    def gather(
        self, name: str, ids: Tensor, pattern: str, *, tied: str | None = None, embedding: bool = True, **sizes: object
    ) -> Tensor:
        """Embedding lookup ``"b t, v d -> b t d"``: the second operand is the table."""
        if tied is not None:
            tied = self._tied(tied, pattern)
        return self._add(name, "gather", pattern, [ids], {"tied": tied}, sizes, embedding=embedding)

    def loss(self, name: str, logits: Tensor, pattern: str, *, axis: str | None = None, **sizes: object) -> Tensor:
        """Cross-entropy over ``axis`` (default: the last input axis): ``"b t v -> b t"``."""
        return self._add(name, "loss", pattern, [logits], {"axis": axis}, sizes)

    def reshape(self, name: str, x: Tensor, pattern: str, *, copy: bool = False, **sizes: object) -> Tensor:
        """A rearrange (``"b t (h k) -> b h t k"``): a view unless ``copy=True``."""
        return self._add(name, "reshape", pattern, [x], {"copy": copy or None}, sizes)

    def op(
        self,
        name: str,
        kind: str,
        inputs: list[Tensor],
        pattern: str,
        *,
        dtype: str | None = None,
        attrs: Mapping[str, object] | None = None,
        **sizes: object,
    ) -> Tensor:
        """Any registered op kind, for rules added outside the core."""
        return self._add(name, kind, pattern, inputs, dict(attrs or {}), sizes, dtype=dtype)

    # -- the one engine --------------------------------------------------------------------

    def _name(self, name: str) -> str:
        full = ".".join([*self._prefix, name])
        if full in self.graph:
            raise CostModelError(f"graph {self.graph.graph['name']!r}: node {full!r} is added twice")
        return full

    def _checked(self, sizes: Mapping[str, object], where: str) -> dict[str, sympy.Expr]:
        return {a: check_size(v, f"{where}: axis {a!r}") for a, v in sizes.items()}

    def _tied(self, owner: str, pattern: str) -> str:
        if owner not in self.graph or "op" not in self.graph.nodes[owner]:
            raise CostModelError(f"tied weight: no op named {owner!r} to share a weight with (pattern {pattern!r})")
        return owner

    def _add(
        self,
        name: str,
        kind: str,
        pattern: str,
        inputs: list[Tensor],
        attrs: Mapping[str, object],
        sizes: Mapping[str, object],
        *,
        embedding: bool = False,
        dtype: str | None = None,
    ) -> Tensor:
        full = self._name(name)
        where = f"op {full!r}"
        p = parse(pattern)
        try:  # the weight operand is no graph tensor; the kind's rule says which it is
            w_index = weight_operand(Op(kind, pattern, ()))
        except CostModelError as exc:
            raise CostModelError(f"{where}: {exc}") from None
        if len(p.inputs) != len(inputs) + (w_index is not None) or (w_index is not None and w_index >= len(p.inputs)):
            raise CostModelError(
                f"{where}: pattern {pattern!r} has {len(p.inputs)} input operand(s), "
                f"expected {len(inputs)} tensor(s){' and a weight' if w_index is not None else ''}"
            )
        known = dict(self.sizes)
        for t in inputs:  # an input tensor's own axis sizes are known too
            for a, s in t.sizes:
                known.setdefault(a, s)
        known.update(self._checked(sizes, where))
        resolved = resolve_sizes(p, known, where)
        data = [axes for j, axes in enumerate(p.inputs) if j != w_index]
        for i, t in enumerate(inputs):
            n = elements(data[i], resolved)
            if sympy.expand(n - t.elements) != 0:
                raise CostModelError(
                    f"{where}: input {i} from {t.node!r} is sized inconsistently: pattern operand "
                    f"{' '.join(data[i])!r} has {n} elements, expected {t.elements} "
                    f"(axes {' '.join(t.axes)!r})"
                )
        dtype = dtype or self.dtype
        try:
            check_dtype(dtype)
        except CostModelError as exc:
            raise CostModelError(f"{where}: {exc}") from None
        # attributes are part of the op's identity (ops are cached): lists become tuples
        attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items() if v is not None}
        op = Op(kind, pattern, tuple(resolved.items()), dtype, tuple(sorted(attrs.items())))
        try:
            op_cost(op)  # derive now: a bad op fails where it is built
        except CostModelError as exc:
            raise CostModelError(f"{where}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:  # a rule met an attribute it cannot read
            raise CostModelError(
                f"{where}: invalid attributes {dict(op.attrs)} for a {kind!r} op (pattern {pattern!r}): {exc!r}"
            ) from None
        if op.attr("tied"):
            owner = self.graph.nodes[op.attr("tied")]["op"]
            if weight_operand(owner) is None or w_index is None:
                raise CostModelError(f"{where}: tied to {op.attr('tied')!r}, but one of the two ops has no weight")
            owner_w = elements(owner.parsed.inputs[weight_operand(owner)], owner.size)
            own_w = elements(p.inputs[w_index], resolved)
            if sympy.expand(owner_w - own_w) != 0:
                raise CostModelError(f"{where}: tied weight has {own_w} elements, {op.attr('tied')!r} has {owner_w}")
        self.graph.add_node(
            full,
            op=op,
            count=self._count,
            block=".".join(self._prefix),
            inputs=tuple(t.node for t in inputs),
            embedding=embedding,
        )
        for t in inputs:
            self.graph.add_edge(t.node, full, tensor=t)
        return Tensor(full, p.output, tuple((a, resolved[a]) for a in p.output), kind_of(op).output_dtype(op))
