"""The roofline report of one model on one device: per-op bounds of a training step, a prefill or a decode step.

The order of the graph passes is part of the answer, and lives here (not in the command line):
FlashAttention first (it looks for the unfused score chain), then decode (it absorbs MLA's
up-projections into the fused attention), then element-wise fusion.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import sympy

from ..devices.table import device
from ..errors import CostModelError
from ..families import Model
from ..graph.analysis import as_int
from ..graph.decode import decode_graph, prefill_graph
from ..graph.passes import attention_pass, fuse_elementwise
from ..memory.activations import storage
from ..memory.inference import working_set
from ..options import Options
from ..render.plot import roofline_chart
from ..render.results import Roofline
from ..sections.decode import summary
from ..sections.quantities import quantities
from ..sections.run import model_for, resolve
from ..sizes import parse_count
from ..symbols import B, C, T
from ..timing.roofline import Bound, total, variants
from ..timing.roofline import roofline as op_rows
from .fit import _engine_fit, _largest, engine_counts


def _row(r: Bound) -> dict[str, object]:
    return {
        "name": r.name,
        "kind": r.kind,
        "count": r.count,
        "flops": as_int(r.flops, f"flops of {r.name}"),
        "bytes": as_int(r.bytes, f"bytes of {r.name}"),
        "intensity": float(r.intensity) if r.bytes else None,
        "bound": r.bound,
        "time_s": float(r.time_s),
        "compute_s": float(r.compute_s),
        "memory_s": float(r.memory_s),
        "attainable_flops": float(r.attainable),
    }


def _mark_fits(d: dict, m: Model, opts: Options, values: dict, dev, step: nx.DiGraph) -> None:
    """Each row of the throughput-versus-batch table says whether decoding that batch fits the device, by the
    one rule of inference memory that ``fit --inference`` uses: the sequences of ``context`` tokens a serving
    engine's KV pool holds (:mod:`costmodel.serving.memory`, vLLM's profile: 90 % of the device, less the weights,
    one chunk's activations and a reserve, cut into KV blocks). A model that keeps a recurrent state (which the
    pool does not count) keeps the earlier reading: the weights, the cache of the context and the state of
    ``estimate --inference``, and the decode ``step``'s own working set (its largest op's inputs + output, the
    cache counted once). The largest batch that fits is ``max_batch_fits`` (0: not even one sequence), the rule
    ``inference_memory``."""
    capacity = int(dev.memory_bytes)
    d["memory_capacity_bytes"] = capacity
    if engine_counts(m.graph):
        ctx = opts.replace(inference=True, context=int(values[C]), hardware=None, micro_batch=None)
        answer = _engine_fit(m, ctx, values, capacity, "vllm-v1", "peak")
        largest = int(answer["largest"])
        for row in d["throughput"]:
            row["fits"] = row["batch"] <= largest
        d["max_batch_fits"] = largest
        d["inference_memory"] = answer["inference_memory"]
        return
    q = quantities(m, opts.replace(inference=True, context=values[C], hardware=None))
    cache = frozenset(
        storage(step, n) for n, data in step.nodes(data=True) if "kv_cache" in data.get("tags", ()) and "op" in data
    )
    work, _ = working_set(step, elsewhere=cache)

    def fits(n: int) -> bool:
        v = {**values, B: n}
        try:
            q.check(v)
        except CostModelError:
            return False
        held = q.value("memory_bytes.total", v) - q.value("memory_bytes.activations", v)
        return bool(held + max(sympy.ceiling(c.xreplace(v)) for c in work) <= capacity)

    for row in d["throughput"]:
        row["fits"] = fits(row["batch"])
    d["max_batch_fits"] = _largest(fits)
    d["inference_memory"] = "weights + B × (KV cache + recurrent state) + the decode step's working set"


def roofline(
    model: Model | str,
    hardware: object = None,
    *,
    decode: bool = False,
    phase: str = "forward",
    fuse: bool = False,
    plot: str | None = None,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    **kwargs: object,
) -> Roofline:
    """Per-op roofline of ``model`` on ``hardware``: FLOPs, bytes, intensity, the binding side and the time
    lower bound max(FLOPs/peak, bytes/bandwidth) of each op; the step is the sum of its ops' bounds.

    ``decode``: one decode step (one new token per sequence, a KV cache of ``context`` tokens, default the
    sequence length); ``phase``: ``"forward"`` (a prefill, no loss) or ``"training"``; ``fuse``: fuse
    element-wise ops first; ``plot``: write a chart (.png/.svg/.pdf; matplotlib). Options used:
    ``batch`` (default 1), ``seq``, ``context``, ``flash``, ``dtype`` (whose peak), ``causal``.
    """
    if phase not in ("forward", "training"):
        raise CostModelError(f"roofline: phase must be 'forward' or 'training', received {phase!r}")
    if decode and phase != "forward":
        raise CostModelError("--decode is an inference step: it takes no --phase training")
    opts = Options.make(options, **{k: v for k, v in kwargs.items() if k != "context"})
    context = kwargs.get("context")
    if context is not None and not decode:
        raise CostModelError("--context is the KV cache length of --decode; give --decode too")
    if hardware is not None and opts.hardware is not None and hardware != opts.hardware:
        raise CostModelError(f"roofline: two devices, hardware={hardware!r} and options.hardware={opts.hardware!r}")
    if hardware is None and opts.hardware is None:
        raise CostModelError("roofline: give a device (options hardware=NAME, or --hardware NAME)")
    dev = device(hardware if hardware is not None else opts.hardware)
    m = model_for(model, settings, opts)
    values = resolve(m, opts)
    base = m.graph if phase == "training" else prefill_graph(m.graph)
    prepared = attention_pass(base, opts.attention)  # FlashAttention looks for the unfused score chain
    # decode first: it absorbs MLA's up-projections; a routed model reads the experts its B tokens touch
    G = decode_graph(prepared, expected_experts=True) if decode else prepared
    if decode:  # (decode_graph refuses a graph without a KV cache, such as an encoder's)
        values[C] = parse_count(context, "context", length=True) if context is not None else values[T]
    if fuse:
        G = fuse_elementwise(G, training=phase == "training")
    dtype = opts.dtype or m.graph.graph.get("dtype", "bf16")
    counting = opts.counting
    rows = op_rows(G, values, dev, phase=phase, dtype=opts.dtype, counting=counting)
    tot = total(rows)
    mode = "decode" if decode else ("training" if phase == "training" else "prefill")
    out: dict[str, object] = {
        "model": m.name,
        "hardware": dev.name,
        "mode": mode,
        "dtype": dtype,
        "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
        "peak_flops": int(dev.peak(dtype)),
        "memory_bandwidth": int(dev.memory_bandwidth),
        "ridge": float(dev.ridge(dtype)),
        "passes": list(G.graph.get("passes", ())),
        "ops": [_row(r) for r in rows],
        "total": _row(tot),
    }
    if decode:
        out["decode"] = summary(prepared, values, dev, dtype=dtype, counting=counting)  # of the unfused step
        _mark_fits(out["decode"], m, opts, values, dev, G)
    else:
        v = variants(base, values, dev, phase=phase, dtype=opts.dtype, counting=counting)  # --dtype for every row
        out["variants"] = {k: {"time_s": float(b.time_s), "bytes": int(b.bytes)} for k, b in v.items()}
        out["variants"]["fusion_bytes_saved"] = int(v["unfused"].bytes - v["fused"].bytes)
        out["variants"]["flash_bytes_saved"] = int(v["unfused"].bytes - v["flash"].bytes)
        if mode == "prefill":
            out["ttft_s"] = float(tot.time_s)
    if plot:
        roofline_chart(
            rows,
            dev,
            plot,
            dtype=dtype,
            title=f"{m.name} {mode} on {dev.name} (B={out['config']['B']}"
            + (f", C={values[C]})" if decode else f", T={values[T]})" if T in values else ")"),
        )
        out["plot"] = plot
    return Roofline(out)
