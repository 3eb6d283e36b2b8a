"""Memory as a serving engine allocates it: the KV blocks left on one tensor-parallel rank.

An engine profiles one forward pass of its largest chunk, then hands what is left of its share of the device to the
KV cache (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``)::

    blocks = ⌊(capacity × utilization − weights − activations(one chunk) − reserve) / (block_size × kv(1 token))⌋

(TensorRT-LLM's ``free_gpu_memory_fraction`` is a share of what is free after the rest, the profile's
``memory_share_of`` "free": ``(capacity − weights − activations − reserve) × utilization`` in the numerator)

per tensor-parallel rank, where ``weights`` is the rank's share in the inference format, ``activations`` the
forward working set of a prefill of ``max_num_batched_tokens`` tokens (fused attention, the last position's logits:
:func:`costmodel.memory.serving.inference_memory` at B = 1, T = C = that chunk), ``reserve`` the profile's CUDA-graph
and runtime memory, and ``kv(1 token)`` one token's keys and values over every layer on the rank (whole KV heads: a
head count below tp is replicated). A sliding-window layer is counted as a full one (an engine without a hybrid
allocator gives it blocks for every token). Every number is exact until the division.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from ..errors import CostModelError
from ..options import Layout, Options
from .profiles import Profile

if TYPE_CHECKING:
    import networkx as nx

    from ..devices.table import Device


@dataclass(frozen=True)
class KVPool:
    """The KV cache one replica's engine allocates (bytes per tensor-parallel rank; see the module notes)."""

    capacity_bytes: int
    utilization: Fraction
    weights_bytes: int
    activation_bytes: int
    reserve_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    share_of: str = "device"  # what utilization is a share of (Profile.memory_share_of)

    @property
    def tokens(self) -> int:
        """Tokens of KV cache the pool holds (all sequences together)."""
        return self.num_blocks * self.block_size

    @property
    def free_bytes(self) -> Fraction:
        """What is left for the KV cache before it is cut into blocks."""
        rest = self.weights_bytes + self.activation_bytes + self.reserve_bytes
        if self.share_of == "free":
            return (self.capacity_bytes - rest) * self.utilization
        return self.capacity_bytes * self.utilization - rest

    def as_dict(self) -> dict[str, object]:
        """The pool's numbers for a result (``serving.memory``)."""
        return {
            "capacity_bytes": self.capacity_bytes,
            "utilization": float(self.utilization),
            "weights_bytes": self.weights_bytes,
            "activation_bytes": self.activation_bytes,
            "reserve_bytes": self.reserve_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.tokens,
            "utilization_of": self.share_of,
        }


def pool_options(
    profile: Profile,
    *,
    tp: int = 1,
    pp: int = 1,
    weights_dtype: str = "bf16",
    kv_dtype: str | None = None,
    layout: Layout | None = None,
) -> Options:
    """The inference options whose memory an engine profiles: one prefill of its largest chunk
    (``max_num_batched_tokens`` tokens, B = 1, T = C = the chunk), fused attention, under ``tp`` and ``pp`` (a
    stage holds its share of the weights and of every token's KV), or ``layout`` where the experts are spread too
    (:meth:`costmodel.serving.parallel.Replica.memory_layout`). Its
    ``memory_bytes.params``, ``.activations`` and ``.kv_cache`` (of the chunk's tokens) are what :func:`pool` takes,
    whichever door evaluates them (:func:`kv_pool` by sympy, ``estimate`` from its cached formulas)."""
    chunk = profile.max_num_batched_tokens
    return Options(
        inference=True,
        batch=1,
        seq=chunk,
        context=chunk,
        layout=layout if layout is not None else Layout(tp=tp, pp=pp),
        weights_dtype=weights_dtype,
        kv_dtype=kv_dtype,
        attention="flash",
    )


def pool(
    capacity: int,
    profile: Profile,
    weights: int,
    activations: int,
    kv_chunk: int,
    *,
    tp: int = 1,
    pp: int = 1,
    name: str = "model",
    where: str | None = None,
) -> KVPool:
    """The :class:`KVPool` of a rank of ``capacity`` bytes from the numbers of :func:`pool_options`: ``weights``
    and ``activations`` bytes on the rank and ``kv_chunk``, the KV bytes of the chunk's tokens (see the module
    notes). Plain arithmetic, exact until the division: the one rule of how many sequences an engine holds."""
    where = where or f"{capacity / 1e9:g} GB"
    per_token = Fraction(kv_chunk) / profile.max_num_batched_tokens
    if per_token.denominator != 1:  # whole heads make it whole; say so if a graph ever does not
        raise CostModelError(f"serving memory: {name}'s KV cache per token is not whole bytes ({per_token})")
    per_token = int(per_token)
    out = KVPool(
        capacity_bytes=capacity,
        utilization=profile.gpu_memory_utilization,
        weights_bytes=weights,
        activation_bytes=activations,
        reserve_bytes=profile.runtime_reserve_bytes,
        kv_bytes_per_token=per_token,
        block_size=profile.block_size,
        num_blocks=0,
        share_of=profile.memory_share_of,
    )
    if per_token == 0:
        raise CostModelError(f"serving memory: {name} keeps no KV cache; a recurrent state is not served here yet")
    blocks = int(out.free_bytes // (profile.block_size * per_token)) if out.free_bytes > 0 else 0
    if blocks < 1:
        gb = lambda x: f"{float(x) / 1e9:.2f} GB"  # noqa: E731
        raise CostModelError(
            f"{name} does not fit {where} under tp {tp}{f' pp {pp}' if pp > 1 else ''}: weights {gb(weights)} + activations {gb(activations)} "
            f"+ reserve {gb(profile.runtime_reserve_bytes)} per rank leave no KV block in "
            + (
                f"{gb(capacity)}"
                if profile.memory_share_of == "free"
                else f"{float(profile.gpu_memory_utilization):g} × {gb(capacity)}"
            )
            + "; raise --tp or --pp, or use --weights-dtype fp8"
        )
    return KVPool(**{**out.__dict__, "num_blocks": blocks})


def sequences(kv: KVPool, context: int) -> int:
    """Sequences of ``context`` tokens the pool holds: each takes ⌈C / block⌉ whole blocks."""
    return kv.num_blocks // -(-context // kv.block_size)


def kv_pool(
    G: nx.DiGraph,
    values: dict,
    dev: Device | int,
    profile: Profile,
    *,
    tp: int = 1,
    pp: int = 1,
    weights_dtype: str = "bf16",
    kv_dtype: str | None = None,
    name: str = "model",
    layout: Layout | None = None,
) -> KVPool:
    """The :class:`KVPool` of ``G`` (at ``values``) on ``dev`` (a device, or a memory size in bytes) under
    ``profile`` and ``tp`` (``pp`` stages: each device holds its stage's share of the weights and of every
    token's KV cache, so the pool counts the tokens the pipeline holds); ``layout``: the weights' layout where
    the experts are spread over more devices (the pool is still one tp group's)."""
    # deferred: the derivation needs sympy and the graph's analyses; pool() and pool_options() (what a cached
    # estimate calls) do not
    from ..graph.analysis import evaluate  # deferred: sympy (see above)
    from ..memory.serving import inference_memory  # deferred: sympy (see above)
    from ..symbols import B, C, T  # deferred: sympy (see above)

    capacity, where = (
        (int(dev), f"{int(dev) / 1e9:g} GB") if isinstance(dev, int) else (int(dev.memory_bytes), dev.name)
    )
    chunk = profile.max_num_batched_tokens
    q = inference_memory(
        G, pool_options(profile, tp=tp, pp=pp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, layout=layout)
    )
    at = {**{k: v for k, v in values.items() if k not in (B, T, C)}, B: 1, T: chunk, C: chunk}

    def number(key: str) -> int:
        return int(evaluate(q.exprs[key], at, key))

    return pool(
        capacity,
        profile,
        number("memory_bytes.params"),
        number("memory_bytes.activations"),
        number("memory_bytes.kv_cache"),
        tp=tp,
        pp=pp,
        name=name,
        where=where,
    )
