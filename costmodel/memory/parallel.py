"""Parallel layouts: what one device holds, and what it sends, per training step.

A :class:`Layout` names the degrees of data (``dp``), tensor (``tp``), pipeline
(``pp``), sequence/context (``sp``) and expert (``ep``) parallelism, the ZeRO
stage, and Megatron sequence parallelism inside the TP group. Which tensors
each degree splits is read off the graph, never off an architecture's names:

* **Residual axes**: the axes of the tensor entering the repeated block (the
  layers), e.g. ``b t d``. Every other axis of a matmul weight (heads, MLP
  width, vocabulary) is a *split axis*: Megatron TP divides a weight, a bias, or a
  saved tensor by ``tp`` when it has a split axis, and replicates it otherwise
  (norm gains, biases over ``d``, the residual stream). With ``megatron_sp``
  the replicated activations are divided by ``tp`` too.
* **PP**: the repeated block's layers are divided among ``pp`` stages
  (:func:`stage_layers`: ⌈L/pp⌉ each, and where pp does not divide L the missing
  layers are taken one each from the stages at the ends, first and last first, as
  Llama 3 405B splits 126 layers over 16 stages); what runs before the block is on
  the first stage, what runs after on the last. Under 1F1B stage i holds
  ``min(pp − i, micro-batches)`` micro-batches of activations in flight: the first
  ``min(pp, m)``, the last one. The stages a report compares are the first, the last
  and (uneven stages, pp ≥ 3) the first *middle* stage that holds ⌈L/pp⌉ layers.
* **SP/CP**: a tensor with an axis sized T is divided by ``sp`` (each device
  keeps its share of the queries; ring attention's keys are transient).
* **EP**: an expert weight (stacked along a routed matmul's ``experts`` axis) is divided by ``ep``.
* **ZeRO** (FSDP = ZeRO-3) shards over ``dp``: stage 1 the optimizer states
  (master weights included), 2 also the gradients, 3 also the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from ..errors import CostModelError
from ..formulas.compiled import Text, verbatim
from ..formulas.quantities import roundup
from ..graph.analysis import Structure, as_fraction, order, repeated_blocks, structure
from ..graph.cost import Zero, dtype_bytes
from ..graph.pattern import elements
from ..graph.registry import Op, data_operands, weight_operand, weight_use
from ..options import Layout
from ..symbols import T
from .activations import Kept, inputs_of_blocks
from .schedules import block_share, weight_copies
from .schedules import in_flight as scheduled_in_flight
from .states import Weight, model_state


def residual_axes(G: nx.DiGraph) -> set[str]:
    """Axes of the tensors entering the repeated blocks (``b t d``); empty if there is none."""
    out: set[str] = set()
    for inputs in inputs_of_blocks(G).values():
        for kept in inputs.values():
            out |= {a for a, _ in kept.axes}
    return out


def _dense_weight(op: Op | None) -> tuple[str, ...] | None:
    """The weight axes of a dense matmul, which Megatron TP splits (column- or row-parallel); ``None`` otherwise.

    The weight operand is the registry's (:func:`~costmodel.ops.weight_operand`); the kind is this
    layout's choice: a routed matmul's experts are split by EP, a lookup table only vocab-parallel.
    """
    return op.parsed.inputs[weight_operand(op)] if op is not None and weight_use(op) == "dense" else None


def split_axes(G: nx.DiGraph) -> set[str]:
    """Axes TP splits: those of matmul weights outside the residual axes (heads, MLP width, vocabulary).

    A gather table is split (vocab-parallel) only along such an axis, so a
    learned position table (``p d``) stays replicated, as in Megatron.
    """
    residual = residual_axes(G)
    if not residual:
        return set()
    out: set[str] = set()
    for _, data in G.nodes(data=True):
        w = _dense_weight(data.get("op"))
        if w is not None:
            out |= {a for a in w if a not in residual}
    return out


def kv_share(G: nx.DiGraph, node: str, tp: int, split: set[str] | None = None) -> sympy.Expr:
    """The fraction of a cached tensor (tagged ``kv_cache``) one of ``tp`` devices holds.

    Tensor parallelism gives each device whole heads: the first split axis of the tensor's output (``g`` of
    GQA's ``b g t k``, ``h`` of MHA's) of size ``n`` leaves ⌈n/tp⌉ of them on a device. A degree above the head
    count replicates the heads (vLLM, TensorRT-LLM): llama3-8b's 8 kv heads under tp 16 keep one head per
    device, 1/8 of the cache, as under tp 8, not 1/16. Where tp divides ``n`` this is 1/tp.
    """
    if tp == 1:
        return sympy.Integer(1)
    split = split_axes(G) if split is None else split
    op = G.nodes[node]["op"]
    axes = [a for a in op.parsed.output if a in split]
    if not axes:
        return sympy.Rational(1, tp)
    n = op.size[axes[0]]
    return roundup(n / tp) / n


def layout_checks(G: nx.DiGraph, layout: Layout) -> list[tuple[sympy.Basic, object]]:
    """Every axis a degree splits must divide evenly, or the per-device numbers would be fractions of a head.

    Returns (relation, message) pairs checked once numbers are known. TP: the product of the split axes of
    each repeated layer's weight (heads × head dim, MLP width; the vocabulary is exempt: Megatron pads it to
    a multiple of tp). A product, not each axis: a degree above the kv heads replicates them. EP: the
    experts axis. PP: at least one layer per stage (pp may leave the stages uneven: :func:`stage_layers`).
    SP: the sequence length.
    """
    checks: list[tuple[sympy.Basic, object]] = []

    def need(size: sympy.Expr, degree: int, what: str, where: str) -> None:
        message = Text(
            verbatim(f"layout: {what} = ")
            + "{size}"
            + verbatim(f" of {where} does not divide into {degree}; expected a degree that divides it evenly"),
            {"size": size},
        )
        checks.append((sympy.Eq(sympy.Mod(size, degree), 0), message))

    split, blocks = split_axes(G), repeated_blocks(G)
    for name, data in G.nodes(data=True):
        op = data.get("op")
        if op is None:
            continue
        if layout.tp > 1 and _dense_weight(op) is not None and stage_of(G, name) == "block":
            axes = [a for a in _dense_weight(op) if a in split]  # e.g. GQA's g m k: divide the product,
            if axes:  # not each axis (m = h/n_kv may be 1 while g·m·k splits evenly)
                need(
                    elements(tuple(axes), op.size),
                    layout.tp,
                    f"--tp {layout.tp}: split axes {' '.join(axes)!r}",
                    f"op {name!r}",
                )
        experts = op.attr("experts")
        if layout.ep > 1 and experts:
            need(op.size[str(experts)], layout.ep, f"--ep {layout.ep}: experts axis {experts!r}", f"op {name!r}")
    if layout.pp > 1 and layout.stage_layers is None:
        for block, count in blocks.items():
            need(
                count,
                layout.pp * layout.vpp,
                f"--pp {layout.pp}" + (f" × --vpp {layout.vpp}" if layout.vpp > 1 else "") + ": layers",
                f"block {block!r}",
            )
    elif layout.pp > 1:  # uneven stages: the middle stages split what the first and last leave
        first, last = layout.stage_layers
        for block, count in blocks.items():
            rest = count - first - last
            checks.append(
                (
                    sympy.Ge(rest, layout.pp - 2),
                    f"layout: --stage-layers {first},{last} leaves fewer "
                    f"layers than the {layout.pp - 2} middle stage(s) of block {block!r}",
                )
            )
            if layout.pp > 2:
                need(
                    rest, layout.pp - 2, f"--stage-layers {first},{last}: the middle stages' layers", f"block {block!r}"
                )
    if layout.sp > 1:
        need(T, layout.sp, f"--sp {layout.sp}: sequence length", "the input")
    return checks


def kv_head_checks(G: nx.DiGraph, tp: int, split: set[str] | None = None) -> list[tuple[sympy.Basic, object]]:
    """Whole KV heads on every device: each cached tensor's head count ``n`` (the first split axis of a tensor
    tagged ``kv_cache``, :func:`kv_share`) and ``tp`` must divide one into the other. tp | n gives each device n/tp
    heads; n | tp replicates each head on tp/n devices (llama3-8b's 8 kv heads under tp 16). Otherwise a device's
    query heads would straddle two KV heads, and serving engines refuse the layout (vLLM's ``QKVParallelLinear``:
    ``n % tp == 0`` when n >= tp, else ``tp % n == 0``): phi3-medium's 10 kv heads under tp 4.

    Returns (relation, message) pairs, as :func:`layout_checks`. One relation, ``Mod(n, tp)·Mod(tp, n) = 0``: a
    product is 0 where either factor is (the formula printers know no ``Or``).
    """
    if tp == 1:
        return []
    split = split_axes(G) if split is None else split
    checks: list[tuple[sympy.Basic, object]] = []
    seen: set[str] = set()
    for name, data in G.nodes(data=True):
        op = data.get("op")
        if op is None or "kv_cache" not in data.get("tags", ()):
            continue
        axes = [a for a in op.parsed.output if a in split]
        if not axes or axes[0] in seen:
            continue
        seen.add(axes[0])
        n = op.size[axes[0]]
        message = Text(
            verbatim(f"layout: --tp {tp}: the ")
            + "{heads}"
            + verbatim(
                f" kv heads ({axes[0]!r}) of {name!r} and tp {tp} divide neither one into the other; expected a tp "
                "that divides the kv heads or a multiple of them (each head then replicated), as serving engines ask"
            ),
            {"heads": n},
        )
        checks.append((sympy.Eq(sympy.Mod(n, tp) * sympy.Mod(tp, n), 0), message))
    return checks


def check_layout(G: nx.DiGraph, layout: Layout, values: Mapping) -> None:
    """Raise where a degree of ``layout`` does not divide what it splits at ``values`` (see :func:`layout_checks`)."""
    subs = {k: sympy.Integer(v) if isinstance(v, int) else v for k, v in values.items()}
    for relation, message in layout_checks(G, layout):
        if relation.xreplace(subs) is sympy.false:
            fields = {n: as_fraction(e.xreplace(subs)) for n, e in message.fields.items()}
            raise CostModelError(message.fill({str(k): v for k, v in subs.items()}, {}, fields))


def _split(axes, split: set[str]) -> bool:
    return any(a in split for a, _ in axes)


def stage_of(G: nx.DiGraph, node: str) -> str:
    """``"block"`` for a node in a repeated block, else ``"first"`` (before it) or ``"last"`` (after it)."""
    return structure(G).stage(node)


#: The pipeline stages a report compares (the device to fit is the fullest): the first (embeddings and the most
#: micro-batches in flight), the first middle stage holding ⌈L/pp⌉ layers (uneven stages), the last (the head).
def stages(pp: int) -> tuple[str, ...]:
    """The stages whose memory a report compares under ``pp`` stages."""
    return ("first",) if pp == 1 else ("first", "last") if pp == 2 else ("first", "middle", "last")


def _short(count: sympy.Expr, pp: int) -> tuple[sympy.Expr, sympy.Expr]:
    """(⌈count/pp⌉, r): the layers of a full stage and how many stages hold one fewer (:func:`stage_layers`)."""
    c = sympy.ceiling(count / pp)
    return c, pp * c - count


def layers_on(count: sympy.Expr, pp: int, stage: str) -> sympy.Expr:
    """The layers of a repeated block of ``count`` iterations that one ``stage`` holds, as :func:`stage_layers`
    gives them (symbolic in the count). The middle stage is the first that holds ⌈count/pp⌉ (of a second
    block, the same bound)."""
    if pp == 1 or stage == "all":
        return count
    c, r = _short(count, pp)
    if stage == "first":
        return c - sympy.Min(r, 1)
    if stage == "last":
        return c - sympy.Min(sympy.Max(r - 1, 0), 1)
    return c


def stage_index(G: nx.DiGraph, pp: int, stage: str) -> sympy.Expr:
    """The 0-based position of ``stage`` among the ``pp`` stages; the middle one: ⌈r/2⌉, the first stage
    :func:`stage_layers` leaves whole (r counted over all the repeated layers)."""
    if stage in ("first", "all"):
        return sympy.Integer(0)
    if stage == "last":
        return sympy.Integer(pp - 1)
    layers = sympy.Add(*repeated_blocks(G).values()) if G is not None and repeated_blocks(G) else sympy.Integer(pp)
    return sympy.ceiling(_short(layers, pp)[1] / 2)


def weight_share(G: nx.DiGraph, layout: Layout, stage: str = "first"):
    """The fraction of each :class:`~costmodel.memory.states.Weight` one device of ``stage`` holds."""
    split = split_axes(G)
    st = structure(G)  # once, not once per weight: checking the cache is a pass over the graph's adjacency

    def share(w: Weight) -> sympy.Expr:
        part = sympy.Integer(1)
        if layout.tp > 1 and _split(w.axes, split):
            part /= layout.tp
        if layout.ep > 1 and is_expert(w):
            part /= layout.ep
        where = st.stage(w.node)
        if where == "block":
            part *= (
                _block_share(G, w.node, layout.pp, stage)
                if stage == "middle"
                else block_share(layout, stage, _count_of(st, w.node))
            )
        elif layout.pp > 1 and where != stage:
            part = Zero
        return part

    return share


def _block_share(G: nx.DiGraph, node: str, pp: int, stage: str) -> sympy.Expr:
    """The share of a repeated block's iterations (its layers) that ``stage`` holds, for a node inside it."""
    if pp == 1:
        return sympy.Integer(1)
    count = _count_of(structure(G), node)
    return layers_on(count, pp, stage) / count


#: The ZeRO stage that shards each model-state part (``weights``, ``compute_copy``: params, stage 3; ``grads``:
#: stage 2; the master copy and every optimizer state: stage 1), by the group the part belongs to.
ZERO_STAGE = {"params": 3, "weights": 3, "compute_copy": 3, "grads": 2}


def zero_shard(states: dict[str, sympy.Expr], layout: Layout, over: int | None = None) -> dict[str, sympy.Expr]:
    """Model-state bytes after ZeRO stage ``layout.zero`` over ``over`` (dp) devices: the groups
    (``params``/``grads``/``optimizer``) and each part (``master``, ``exp_avg`` ...). A count the degree does
    not divide leaves a remainder: the caller rounds each up to whole bytes, as frameworks pad flat buffers."""
    out = dict(states)
    n = layout.dp if over is None else over
    for key, v in states.items():
        if key not in ("trainable", "frozen") and layout.zero >= ZERO_STAGE.get(key, 1):
            out[key] = v / n
    return out


def is_expert(w: Weight) -> bool:
    """An MoE expert's weight: matrices stacked along the axis a routed matmul selects from (``experts``).

    A router (``d e``, experts as an output axis) is not one: it is replicated.
    """
    return w.stack != 1


def device_states(G: nx.DiGraph, policy: str, opt: str, layout: Layout, stage: str = "first"):
    """(states before ZeRO, ``params``/``grads``/``optimizer`` after ZeRO) of one device.

    Expert weights are already divided by ``ep``; ZeRO shards them over the
    ``dp / ep`` devices that hold the same experts, the rest over ``dp``.
    """
    share = weight_share(G, layout, stage)
    raw = model_state(G, policy, opt, share)
    if layout.ep == 1:
        return raw, zero_shard(raw, layout)
    dense = model_state(G, policy, opt, lambda w: Zero if is_expert(w) else share(w))
    expert = model_state(G, policy, opt, lambda w: share(w) if is_expert(w) else Zero)
    a, b = zero_shard(dense, layout), zero_shard(expert, layout, layout.dp // layout.ep)
    return raw, {k: a[k] + b[k] for k in a if k not in ("trainable", "frozen")}


def expert_states(G: nx.DiGraph, policy: str, opt: str, layout: Layout, stage: str = "first") -> dict:
    """Model-state bytes of the expert weights one device holds, before ZeRO (already ÷ ``ep``): Megatron keeps
    them in their own buffers and reduces their gradients over the expert data-parallel group, the ``dp / ep``
    devices that hold the same experts (``megatron/core/parallel_state.py``: the expert data-parallel group;
    :func:`expert_data_parallel`)."""
    share = weight_share(G, layout, stage)
    return model_state(G, policy, opt, lambda w: share(w) if is_expert(w) else Zero)


def expert_data_parallel(layout: Layout) -> Layout:
    """The layout the experts' data-parallel collectives run over: ``dp / ep`` members (1 when every expert
    lives on one device of each data-parallel group, ``ep = dp``: nothing to reduce).

    >>> expert_data_parallel(Layout(dp=64, ep=8, zero=1)).dp
    8
    """
    return Layout(dp=layout.dp // layout.ep, zero=layout.zero)


def split_share(G: nx.DiGraph, kept: Kept, layout: Layout, split: set[str] | None = None) -> sympy.Expr:
    """The fraction of one copy of a kept tensor a device holds after tensor (and Megatron sequence) and
    sequence/context parallelism split it. ``split``: :func:`split_axes` of ``G``, given by a caller that asks
    for many tensors (finding it is a pass over the graph: once per tensor was quadratic in distinct blocks)."""
    if layout.tp == 1 and layout.sp == 1:
        return sympy.Integer(1)
    return tensor_share(kept.axes, split_axes(G) if split is None else split, layout.tp, layout.sp, layout.megatron_sp)


def tensor_share(axes, split: set[str], tp, sp, megatron_sp: bool) -> sympy.Expr:
    """The fraction of a tensor of ``axes`` (``(axis, size)`` pairs) one device holds: ÷ ``tp`` where tensor
    parallelism splits one of its axes (``split``, :func:`split_axes`) or Megatron sequence parallelism splits
    every activation; ÷ ``sp`` where it has the sequence axis. ``tp`` and ``sp`` may be symbols (the planner
    derives one peak for every degree): a degree of 1 divides by 1."""
    part = sympy.Integer(1)
    if tp != 1 and (megatron_sp or _split(axes, split)):
        part /= tp
    if sp != 1 and any(s == T for _, s in axes):
        part /= sp
    return part


def layout_share(G: nx.DiGraph, layout: Layout):
    """The share function of :func:`costmodel.memory.peak.peak` under ``layout``'s tensor and sequence
    parallelism: a kept tensor's and a running op's operands split as :func:`split_share` splits kept ones;
    ``None`` (nothing split) at tp = sp = 1. Not counted: under Megatron SP the all-gathered input of a
    column-parallel matmul is a full ``b t d`` copy for the op's duration; the walk counts its shard."""
    if layout.tp == layout.sp == 1:
        return None
    split = split_axes(G)
    return lambda axes: tensor_share(axes, split, layout.tp, layout.sp, layout.megatron_sp)


def activation_share(G: nx.DiGraph, kept: Kept, layout: Layout, stage: str, in_flight: sympy.Expr) -> sympy.Expr:
    """The fraction of a kept tensor's bytes one device of ``stage`` holds."""
    return _activation_share(G, structure(G), split_axes(G), kept, layout, stage, in_flight)


def activation_shares(
    G: nx.DiGraph, tensors: Mapping[tuple, Kept], layout: Layout, stage: str, in_flight: sympy.Expr
) -> dict[tuple, sympy.Expr]:
    """:func:`activation_share` of every kept tensor, the graph's structure and split axes looked up once
    (each is a pass over the graph: once per tensor was quadratic in the ops)."""
    st, split = structure(G), split_axes(G)
    return {key: _activation_share(G, st, split, k, layout, stage, in_flight) for key, k in tensors.items()}


def _activation_share(
    G: nx.DiGraph, st: Structure, split: set[str], kept: Kept, layout: Layout, stage: str, in_flight: sympy.Expr
) -> sympy.Expr:
    part = split_share(G, kept, layout, split)
    where = "block" if all(st.stage(s) == "block" for s in kept.savers) else st.stage(kept.savers[0])
    if where == "block":
        if stage == "middle":
            return part * in_flight * _block_share(G, kept.savers[0], layout.pp, stage)
        return (
            part
            * in_flight
            * block_share(layout, stage, _count_of(st, kept.savers[0]))
            / weight_copies(layout.schedule)
        )
    if layout.pp > 1 and where != stage:
        return Zero
    return part * (in_flight if where == "first" else 1)


def layout_in_flight(layout: Layout, micro_batches: sympy.Expr, stage: str, G: nx.DiGraph | None = None) -> sympy.Expr:
    """Micro-batches whose activations a stage holds at once under the layout's pipeline schedule (1F1B:
    ``min(pp, m)`` on the first stage, one on the last; see :mod:`costmodel.memory.schedules`); a middle
    stage i keeps min(pp − i, m), its position read off ``G`` (:func:`stage_index`)."""
    if layout.pp == 1:
        return sympy.Min(layout.pp, micro_batches) if stage == "first" else sympy.Integer(1)
    if stage == "middle":
        return sympy.Min(layout.pp - stage_index(G, layout.pp, stage), micro_batches)
    return scheduled_in_flight(layout.schedule, stage, layout.pp, micro_batches, layout.vpp)


def _count_of(st: Structure, node: str) -> sympy.Expr:
    """The count of the repeated block ``node`` belongs to (its layers), read off the graph's structure."""
    block = st.block_of.get(node)
    return st.blocks[block] if block is not None else sympy.Integer(1)


def _ring(n: int) -> sympy.Rational:
    """Bytes an all-reduce moves per byte of data on each of ``n`` devices (ring): 2(n−1)/n."""
    return sympy.Rational(2 * (n - 1), n)


def dp_collectives(
    layout: Layout, grads: sympy.Expr, weights: sympy.Expr, micro_batches: sympy.Expr
) -> dict[str, sympy.Expr]:
    """Bytes one device sends for data parallelism per step, by collective (ring): ``all_reduce`` (no ZeRO),
    ``reduce_scatter`` and ``all_gather`` (ZeRO; 0 where the collective does not run).

    ``grads``/``weights``: the device's gradient bytes (the gradients' dtype) and weight bytes (the parameters'
    dtype, without a cached low-precision copy) before ZeRO shards them. ZeRO pads each flat buffer to a
    multiple of ``n = dp`` (Megatron's distributed optimizer, DeepSpeed): a member's shard is ⌈X/n⌉ bytes and a
    ring reduce-scatter or all-gather sends ``(n − 1)·⌈X/n⌉``, the padding included. ZeRO-1/2 reduce-scatter the
    gradients and all-gather the updated parameters once per step; ZeRO-3 (FSDP) gathers the parameters for
    forward and again for backward and reduce-scatters the gradients in every micro-batch (Rajbhandari et al.
    2020, Sec. 7.2.3: 3Ψ per forward-backward). Without ZeRO the gradients are all-reduced, ``2(n − 1)/n·G``.

    >>> from costmodel.options import Layout
    >>> c = dp_collectives(Layout(dp=48, zero=1), sympy.Integer(16060522496), sympy.Integer(16060522496), 1)
    >>> c["reduce_scatter"], c["all_gather"]  # 47 × ⌈16,060,522,496 / 48⌉ = 47 × 334,594,219
    (15725928293, 15725928293)
    """
    n = layout.dp
    zero = sympy.Integer(0)
    if layout.zero == 0:
        return {"all_reduce": _ring(n) * grads, "reduce_scatter": zero, "all_gather": zero}
    rs = (n - 1) * roundup(grads / n)
    ag = (n - 1) * roundup(weights / n)
    if layout.zero == 3:
        return {"all_reduce": zero, "reduce_scatter": rs * micro_batches, "all_gather": 2 * ag * micro_batches}
    return {"all_reduce": zero, "reduce_scatter": rs, "all_gather": ag}


def dp_by_group(
    layout: Layout,
    grads: sympy.Expr,
    weights: sympy.Expr,
    micro_batches: sympy.Expr,
    experts: tuple[sympy.Expr, sympy.Expr] | None = None,
) -> tuple[dict[str, sympy.Expr], dict[str, sympy.Expr]]:
    """(the dense weights', the experts') :func:`dp_collectives`: with ``experts`` (their gradient and weight
    bytes) and ``ep > 1``, the experts' over the ``dp / ep`` devices holding the same experts, each group's
    buffer padded on its own; else every weight over ``dp`` and no expert part."""
    if experts is None or layout.ep == 1:
        return dp_collectives(layout, grads, weights, micro_batches), {}
    g, w = experts
    dense = dp_collectives(layout, grads - g, weights - w, micro_batches)
    return dense, dp_collectives(expert_data_parallel(layout), g, w, micro_batches)


def communication(
    G: nx.DiGraph,
    layout: Layout,
    grads: sympy.Expr,
    params: sympy.Expr,
    micro_batches: sympy.Expr,
    weights: sympy.Expr | None = None,
    experts: tuple[sympy.Expr, sympy.Expr] | None = None,
) -> dict[str, sympy.Expr]:
    """Bytes one device sends per step, by kind of parallelism (ring collectives). ``experts``: the
    (gradient, weight) bytes of the expert weights among ``grads``/``weights`` (:func:`expert_states`), whose
    data-parallel collectives run over the expert data-parallel group (:func:`expert_data_parallel`).

    ``grads``/``params``: the device's gradient and parameter bytes before ZeRO
    sharding (``weights``: the parameters ZeRO gathers, without a cached fp8 copy;
    default ``params``). DP: :func:`dp_collectives`, their sum: an all-reduce of the
    gradients, 2(n−1)/n·G; ZeRO-1/2 a reduce-scatter of the gradients and an
    all-gather of the parameters, (n−1)·(⌈G/n⌉ + ⌈P/n⌉) with the padding; ZeRO-3
    the reduce-scatter and two all-gathers (forward, backward), ≈ 3Ψ, for every
    micro-batch.
    TP (Megatron): an all-reduce of the output of every row-parallel matmul in
    forward and of the input gradient of every distinct input of column-parallel
    matmuls in backward, 2(t−1)/t each, per micro-batch. PP: one activation
    forward and one gradient backward per micro-batch. SP/CP: k and v (tagged
    ``kv_cache``) gathered in forward, their gradients scattered in backward.
    EP: every routed matmul (attributes ``experts`` and ``route``) exchanges its
    routed tokens in an all-to-all, (e−1)/e of them leave the device: the
    dispatch sends its input × the route copies, the combine its output before
    the copies are summed; once in forward and once (the gradients) in backward.
    """
    out: dict[str, sympy.Expr] = {}
    weights = params if weights is None else weights
    dense, expert = dp_by_group(layout, grads, weights, micro_batches, experts)
    out["dp"] = sympy.Add(*dense.values(), *expert.values())
    tp = pp = sp = ep = Zero
    split = split_axes(G)
    col_inputs: set[tuple] = set()
    sent: set[tuple] = set()
    for name in order(G):
        data = G.nodes[name]
        op, count = data["op"], data["count"]
        if layout.pp > 1 and stage_of(G, name) == "block":
            count = count * _block_share(G, name, layout.pp, "middle")  # a full stage's share of the layers
        size = dtype_bytes(op.dtype)
        if weight_use(op) in ("dense", "table") and layout.tp > 1 and split:  # TP: dense matmuls, vocab-parallel tables
            x, w = data_operands(op)[0], op.parsed.inputs[weight_operand(op)]
            w_split = any(a in split for a in w)
            x_split = any(a in split for a in x)
            y_split = any(a in split for a in op.parsed.output)
            if w_split and not y_split:  # row-parallel (or vocab-parallel lookup): all-reduce the output
                tp += _ring(layout.tp) * elements(op.parsed.output, op.size) * size * count
            elif w_split and not x_split and weight_use(op) == "dense" and (data["inputs"][0], count) not in col_inputs:
                col_inputs.add((data["inputs"][0], count))
                tp += _ring(layout.tp) * elements(x, op.size) * size * count
        route = op.attr("route")
        dispatch = route in op.parsed.output
        if layout.ep > 1 and op.attr("experts") and route and (not dispatch or (data["inputs"][0], count) not in sent):
            if dispatch:  # matmuls routing the same tokens (SwiGLU's gate and up) share one dispatch
                sent.add((data["inputs"][0], count))
            routed = op.parsed.inputs[0] if dispatch else op.parsed.output
            tokens = elements(tuple(routed), op.size) * op.size[str(route)]  # one copy per routed expert
            ep += 2 * sympy.Rational(layout.ep - 1, layout.ep) * tokens * size * count
        if layout.sp > 1 and "kv_cache" in data.get("tags", ()):
            kv = elements(op.parsed.output, op.size) * size * count
            if layout.tp > 1 and any(a in split for a in op.parsed.output):
                kv /= layout.tp
            sp += 2 * sympy.Rational(layout.sp - 1, layout.sp) * kv
    if layout.pp > 1:
        pp = sympy.Add(pp, *(2 * k.saved.bytes for inputs in inputs_of_blocks(G).values() for k in inputs.values()))
    out["tp"] = tp / layout.sp * micro_batches
    out["pp"] = pp / (layout.tp if layout.megatron_sp else 1) / layout.sp * micro_batches
    out["sp"] = sp * micro_batches
    out["ep"] = ep / (layout.tp if layout.megatron_sp else 1) / layout.sp * micro_batches
    out = {k: sympy.expand(v) for k, v in out.items()}
    out["total"] = sympy.expand(sum(out.values(), Zero))
    return out
