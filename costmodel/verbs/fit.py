"""Does it fit? The largest micro-batch, sequence or context for a memory size, or what overflows.

Memory per device grows with the micro-batch (linearly) and with the sequence
or context (linearly with FlashAttention, quadratically with materialised
scores), so the largest whole number that fits is found by doubling then
bisection on the exact per-device numbers of the estimate's memory keys (derived once, evaluated per
candidate). A config the model refuses (a sequence longer than learned positions allow) does not fit,
and the answer names the constraint.
For the batch the closed form is also given: ``floor((M − states) / bytes per
sequence)`` with the bytes per sequence derived from the graph.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from ..devices.table import device
from ..errors import CostModelError
from ..families import Model, graph_symbols
from ..graph.analysis import check_values
from ..graph.passes import attention_pass
from ..memory.activations import activations
from ..memory.inference import kv_cache, state_cache
from ..options import Options
from ..render.results import Fit
from ..sections.fits import judged
from ..sections.quantities import quantities
from ..sections.run import model_for, resolve
from ..serving.memory import kv_pool
from ..serving.profiles import profile
from ..sizes import parse_memory
from ..symbols import B, C, T

SIZE_KEYS = ("params", "grads", "optimizer", "kv_cache", "state_cache", "activations", "total", "peak")


def _criterion(r: Mapping[str, object], by: str) -> int:
    """``by="peak"``: the rule of every verb (:func:`costmodel.sections.fits.judged`); ``"total"``: the sum."""
    return int(judged(r, "")[0] if by == "peak" else r["total"])


def _largest(fits, limit: int = 2**31) -> int:
    """The largest n ≥ 1 with ``fits(n)`` (monotone), or 0 if none."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _overflow(r: Mapping[str, object], memory: int) -> str:
    """The first component (in order states → cache → activations) at which the running sum exceeds ``memory``."""
    if "refused" in r:
        return str(r["refused"])
    running = 0
    for key in ("params", "grads", "optimizer", "kv_cache", "state_cache", "activations"):
        running += int(r.get(key) or 0)
        if running > memory:
            return key
    return "peak transients" if _criterion(r, "peak") > memory else ""


def _fits_with(m: Model, opts: Options, values: dict, memory: int, by: str) -> bool:
    """Whether one micro-batch per device fits ``memory`` under ``opts`` (a layout that does not divide: no)."""
    q = quantities(m, opts)
    v = dict(values)
    v[B] = opts.layout.dp * (opts.micro_batch or 1)
    try:
        q.check(v)
        r = {
            k: q.value(f"memory_bytes.{k}", v)
            for k in ("total", "peak")
            if f"memory_bytes.{k}" in q.exprs or f"memory_bytes.{k}" in q.info
        }
    except CostModelError:
        return False
    return _criterion(r, by) <= memory


def smallest_change(m: Model, opts: Options, values: dict, memory: int, by: str = "peak") -> dict[str, object]:
    """The smallest change of a training step that does not fit ``memory`` at one sequence per device, each
    alone: ``recompute`` (``"selective"`` or ``"full"``, the first that fits), ``zero3_devices`` (the fewest
    data-parallel devices whose ZeRO-3 shards of the states fit beside the activations: estimated from the
    states and activations at one device, then checked and raised until it fits; ``zero3_dp`` its dp) and ``tp`` (2, 4 or 8 with
    Megatron sequence parallelism, the first that fits); ``None`` where none does. ``devices``: the layout's
    devices; ``tp_devices``: the devices the ``tp`` change uses (the layout's dp × pp × sp × the new tp);
    ``states_bytes``: the whole model's params, grads and optimizer states; ``devices_for_states``: the fewest
    devices whose memory together holds them (⌈states / memory⌉: fewer hold them in no layout)."""
    one = opts.replace(micro_batch=1)
    out: dict[str, object] = {"recompute": None, "zero3_devices": None, "zero3_dp": None, "tp": None}
    for r in ("selective", "full"):
        if RECOMPUTE_ORDER[r] > RECOMPUTE_ORDER[opts.recompute] and _fits_with(
            m, one.replace(recompute=r), values, memory, by
        ):
            out["recompute"] = r
            break
    q = quantities(m, one)
    v = dict(values)
    v[B] = opts.layout.dp
    num = q.evaluate(v)
    states = sum(num[f"memory_bytes.{k}"] for k in ("params", "grads", "optimizer"))
    need = judged(num)[0] if by == "peak" else num["memory_bytes.total"]
    room = memory - (need - states)
    if room > 0:
        layout = opts.layout
        # the dp whose ZeRO-3 shards fit: the unsharded states over the room, counted in the whole dp (a layout
        # of dp 8 that needs dp 20 takes dp 20, not 8 × 20)
        n = max(2, layout.dp + 1, -(-num["memory.states_unsharded_bytes"] // room))
        for k in range(n, n + 4):  # the estimate leaves out rounding and the bytes ZeRO-3 shards unevenly
            if _fits_with(
                m,
                one.replace(dp=k, zero=3, ep=layout.ep if k % layout.ep == 0 else 1),
                values,
                memory,
                by,
            ):
                out["zero3_devices"], out["zero3_dp"] = k * layout.devices // layout.dp, k
                break
    for t in (2, 4, 8):
        if t > opts.layout.tp and _fits_with(m, one.replace(tp=t, megatron_sp=True), values, memory, by):
            out["tp"] = t
            break
    # what each change costs in devices: --tp on top of the layout's dp multiplies them (dp 8 × tp 2 = 16)
    out["devices"] = opts.layout.devices
    out["tp_devices"] = None if out["tp"] is None else one.replace(tp=out["tp"]).layout.devices
    # whether the layout's devices can hold the states at all: their memory together against the whole model's
    # params + grads + optimizer (at tp = pp = 1 the unsharded states of one device are the model's; else the
    # model's are those of a one-device layout). Fewer than ⌈states / memory⌉ devices hold them in no layout.
    whole = num["memory.states_unsharded_bytes"]
    layout = opts.layout
    if layout.tp * layout.pp * layout.sp * layout.ep != 1:
        alone = one.replace(dp=1, tp=1, pp=1, sp=1, ep=1, zero=0, megatron_sp=False, stage_layers=None)
        whole = quantities(m, alone).evaluate(v)["memory.states_unsharded_bytes"]
    out["states_bytes"] = int(whole)
    out["devices_for_states"] = -(-int(whole) // memory)
    return out


RECOMPUTE_ORDER = {"none": 0, "selective": 1, "full": 2}


def engine_counts(G) -> bool:
    """Whether an engine's KV pool is the memory of ``G``'s inference: a KV cache and no recurrent state (a
    state-space model's, a hybrid's mamba layers: the pool counts KV blocks only, so those keep the prefill
    reading, every sequence's state and prompt held at once)."""
    return kv_cache(G, C) != 0 and state_cache(G) == 0


def _engine_fit(m: Model, opts: Options, values: dict, memory: int, engine: str, by: str) -> Fit:
    """Sequences of ``context`` tokens an engine's KV pool holds on a device of ``memory`` bytes."""
    prof = profile(engine)
    context = int(opts.context or values[T])
    try:
        pool = kv_pool(
            m.graph,
            values,
            memory,
            prof,
            tp=opts.layout.tp,
            weights_dtype=opts.weights_dtype,
            kv_dtype=opts.kv_dtype,
            name=m.name,
        )
        blocks = pool.num_blocks
    except CostModelError:
        pool, blocks = None, 0
    per_seq = -(-context // prof.block_size)  # whole blocks per sequence
    n = blocks // per_seq  # serving.memory.sequences, 0 where no block is left
    out: dict[str, object] = {
        "model": m.name,
        "memory": memory,
        "solve": "batch",
        "by": by,  # the engine's pool is one number: peak and total agree
        "largest": n,
        "fits": n > 0,
        "inference_memory": f"engine: {prof.name} {prof.version}",
        "engine": None if pool is None else {**pool.as_dict(), "blocks_per_sequence": per_seq, "context": context},
    }
    parts = None
    if pool is not None:
        parts = {
            "params": pool.weights_bytes,
            "grads": 0,
            "optimizer": 0,
            "kv_cache": max(n, 1) * per_seq * prof.block_size * pool.kv_bytes_per_token,
            "activations": pool.activation_bytes,
            "reserve": pool.reserve_bytes,
        }
        parts["total"] = sum(parts.values())
    if n == 0:
        out["overflow"] = "kv_cache" if pool is not None else "params"
        out["at_one"] = parts or {}
        return Fit(out)
    out["at_largest"] = parts
    out["overflow_next"] = "kv_cache"
    out["global_batch"] = n * opts.layout.dp
    out["formula"] = (
        f"engine: B_max = floor(floor((M*{float(prof.gpu_memory_utilization):g} - weights - activations(one "
        f"{prof.max_num_batched_tokens}-token chunk) - reserve) / ({prof.block_size}*kv_per_token)) / "
        f"ceil(C/{prof.block_size}))"
    )
    return Fit(out)


def fit(
    model: Model | str,
    memory: object = None,
    *,
    hardware: object = None,
    solve: str = "batch",
    by: str = "peak",
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    inference_memory: str = "engine",
    engine: str = "vllm-v1",
    **kwargs: object,
) -> Fit:
    """Largest micro-batch per device (``solve="batch"``) or sequence/context (``"seq"``) within ``memory``
    (bytes, or a size such as ``"80GB"``) or the memory of ``hardware``.

    ``by="peak"`` compares the liveness peak where it is modelled, else the
    sum ``memory_bytes.total``; ``by="total"`` always the sum. The other keywords are
    :class:`~costmodel.options.Options` (precision, optimizer, recompute, flash, layout, inference,
    weights_dtype...; ``batch`` is the global batch when solving for the sequence, ``seq`` the sequence
    when solving for the batch).

    Inference, solving for the batch: ``inference_memory="engine"`` (the default) counts the sequences a serving
    engine holds (:mod:`costmodel.serving.memory`: ``engine``'s utilisation, the weights, the activations of one
    chunk and a reserve, the rest in KV blocks of its block size, each sequence ⌈C / block⌉ blocks);
    ``"prefill"`` is the earlier reading, every sequence's prompt prefilled at once.
    """
    if solve not in ("batch", "seq"):
        raise CostModelError(f"fit: solve must be 'batch' or 'seq', received {solve!r}")
    if by not in ("peak", "total"):
        raise CostModelError(f"fit: by must be 'peak' or 'total', received {by!r}")
    opts = Options.make(options, **kwargs)
    if hardware is None and memory is None and opts.hardware is not None:
        # the device given with the other options, as every verb takes it: its memory is the size to fill
        hardware, opts = opts.hardware, opts.replace(hardware=None)
    if (memory is None) == (hardware is None):
        raise CostModelError("fit: give a memory size (80GB) or a device whose memory to fill, one of the two")
    if memory is None:
        memory = int(device(hardware).memory_bytes)
    memory = parse_memory(memory)
    if opts.hardware is not None:
        raise CostModelError("fit: the device is the hardware= argument (its memory); time options do not apply")
    dp = opts.layout.dp
    changes: dict[str, object] = {"micro_batch": None}
    if solve == "seq" and opts.inference:
        changes["context"] = None  # the context is the sequence solved for (C = T)
    opts = opts.replace(**changes)
    m = model_for(model, settings, opts)
    if solve == "seq" and T not in graph_symbols(m.graph):
        raise CostModelError(
            f"fit: model {m.name!r} has no sequence length T to solve for (a ViT's tokens come "
            "from its image and patch sizes); solve for the batch instead"
        )
    values = resolve(m, opts.replace(batch=opts.batch or dp))
    if inference_memory not in ("engine", "prefill"):
        raise CostModelError(f"fit: inference_memory must be 'engine' or 'prefill', received {inference_memory!r}")
    if opts.inference and solve == "batch" and inference_memory == "engine" and engine_counts(m.graph):
        return _engine_fit(m, opts, values, memory, engine, by)
    q = quantities(m, opts)
    keys = [k for k in SIZE_KEYS if f"memory_bytes.{k}" in q.exprs or f"memory_bytes.{k}" in q.info]

    def run(n: int) -> dict[str, object]:
        v = dict(values)
        if solve == "batch":
            v[B] = n * dp
        else:
            v[T] = n
        try:
            check_values(m.graph, v)
            q.check(v)
        except CostModelError as exc:
            return {"refused": str(exc)}
        return {k: q.value(f"memory_bytes.{k}", v) for k in keys}

    def fits(n: int) -> bool:
        r = run(n)
        return "refused" not in r and _criterion(r, by) <= memory

    n = _largest(fits)
    out: dict[str, object] = {"model": m.name, "memory": memory, "solve": solve, "by": by, "largest": n}
    if n == 0:
        r = run(1)
        out["fits"] = False
        out["overflow"] = _overflow(r, memory)
        out["at_one"] = {k: v for k, v in r.items() if k != "refused"}
        if "refused" not in r and not opts.inference:
            v = dict(values)
            v[B if solve == "batch" else T] = dp if solve == "batch" else 1
            out["to_fit"] = smallest_change(m, opts, v, memory, by)
        return Fit(out)
    out["fits"] = True
    out["at_largest"] = run(n)
    out["overflow_next"] = _overflow(run(n + 1), memory) or "peak transients"
    if solve == "batch":
        out["global_batch"] = n * dp
        if not opts.inference:
            graph = attention_pass(m.graph, opts.attention)
            acts = activations(graph, opts.recompute).bytes
            per_seq, rest = sympy.expand(sympy.diff(acts, B)), sympy.expand(acts.subs(B, 0))
            out["formula"] = (
                f"sum convention, no layout: B_max = floor((M - states - ({rest})) / ({per_seq})) "
                "(activation bytes per sequence; B-independent saved tensors)"
            )
    return Fit(out)
