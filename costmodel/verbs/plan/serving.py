"""The serving planner: the deployments of a model over a range of device counts, ranked by goodput per GPU (or
per dollar) under SLOs, with the Pareto front of output tokens/s per GPU against tokens/s per user.

``serve_plan(model, hardware=..., devices="8-64", slo="ttft_p90=2s,tpot_p99=50ms")`` searches, for each device:

- **aggregated replicas**: tp (powers of two within a node that divide the attention heads) × pp (1, and 2 and 4
  stages of a whole node's tp: pipelines across nodes, tensors inside, as vLLM's docs advise; any given ``pp``
  with every tp) × for a model with routed experts, ep and attention data parallelism as ``serve`` maps them
  (:mod:`costmodel.serving.parallel`: ep 1, or ep = tp × attention-dp with attention-dp 1, 2, 4, … while the
  expert group stays within a node and divides the experts) × ``max_num_batched_tokens`` × ``max_num_seqs``;
- with ``disaggregate=True``, also **prefill and decode pools**: a prefill instance (its tp, its
  ``max_num_batched_tokens``) and a decode instance (its tp, ep, ``max_num_seqs``) in ``p:d`` instances, every
  ratio in lowest terms that some device count of the range holds a whole number of.

Each replica (or pool instance) is the run :func:`costmodel.serve` puts together — the engine profile with the
layout's limits, the KV blocks it allocates (:func:`~costmodel.serving.memory.kv_pool`), the step derived once per
(tp, ep) — and its **goodput** is the largest Poisson (or gamma) rate whose analytic means meet every SLO
(:func:`~costmodel.serving.metrics.max_rate_under_slo` with ``solver="analytic"``): the number
``costmodel serve --solver analytic --slo ...`` gives as ``serving.max_rate_under_slo`` at that layout, to the bit.
Without SLOs it is the replica's capacity (the closed loop at its largest running set). Replicas share the load
evenly, so per-GPU numbers do not depend on their count; a row names the smallest deployment of the device range
(``devices``, ``replicas``) and the largest (``devices_max``, ``replicas_max``). Tokens/s per user is 1/TPOT at
that rate. Cost: the deployment's device-hours over the output tokens it makes (``usd_per_million_output_tokens``:
every dollar charged to output tokens, the rate a provider must recover).

A disaggregated deployment meets the SLOs where each pool meets its own: TTFT is the prefill instance's (the
first token comes from it), TPOT and ITL the decode instance's (its requests arrive with the prompt and first token
cached). Each pool's largest rate is searched once per instance layout, and a ``p:d`` ratio serves
``min(p·λ_prefill, d·λ_decode)``; an E2E SLO couples the pools and is refused here (``serve --disaggregate``
simulates one). The KV transfer adds to E2E only, shown in ``e2e_s``.

Layouts that cannot serve are counted in ``excluded``, by why: the heads do not split over tp, the weights,
activations and reserve leave no KV block, the KV cache holds less than one request, no rate meets the SLOs, or
no device count of the range holds a whole replica. The layouts are evaluated in chunks by the sweeps' chunk
engine (:func:`~costmodel.formulas.chunks.run`: one process, local processes or Dask); the result is the same.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import CostModelError
from ...families import Model
from ...formulas import chunks
from ...options import Options
from ...render.plot import check_path
from ...render.results import ServePlan
from ...render.serving import serve_plan_chart  # matplotlib itself only inside, when a chart is drawn
from ...sections.run import prepare
from ...serving.analytic import Shape, Solver
from ...serving.disagg import kv_transfer_s
from ...serving.memory import kv_pool
from ...serving.metrics import analytic_metrics, max_rate_under_slo, parse_slos
from ...serving.parallel import Replica, routed_experts
from ...serving.predictor import replica_step
from ...serving.profiles import profile
from ...serving.spec import Serve
from ...serving.workload import parse_length
from ...symbols import B, C, T
from ..serve import _options, _Pipelined, _price, _sends
from .rank import pareto

#: ``max_num_seqs`` and ``max_num_batched_tokens`` searched by default.
SEQS = (8, 16, 32, 64, 128, 256, 512)
TOKENS = (2048, 4096, 8192, 16384)
#: Why a layout is left out (``excluded``'s keys).
REASONS = {
    "heads": "tp does not divide the attention heads",
    "memory": "weights, activations and reserve leave no KV block",
    "request": "the KV cache holds less than one request",
    "slo": "no rate meets the SLOs",
    "devices": "no device count of the range holds a whole replica",
}
#: The metrics a pool's own SLOs name: a prefill instance's and a decode instance's.
PREFILL_METRICS, DECODE_METRICS = ("ttft",), ("tpot", "itl")
#: Layouts per chunk of the search (each is a step of bisection over the analytic solver: milliseconds).
CHUNK = 32
#: At most this many instance layouts (each a bisection: milliseconds), and prefill × decode × ratio combinations.
MAX_LAYOUTS, MAX_COMBINATIONS = 4_000, 400_000
#: At most this many device counts (a range is every count in it).
MAX_DEVICES = 100_000


def parse_devices(devices: object) -> tuple[int, ...]:
    """Device counts: a number, ``"A-B"`` (every count from A to B) or ``"8,16,32"``, or a sequence of them.

    >>> parse_devices("8-12"), parse_devices("8,16"), parse_devices(4)
    ((8, 9, 10, 11, 12), (8, 16), (4,))
    """
    if isinstance(devices, bool):
        devices = str(devices)
    if isinstance(devices, int):
        devices = (devices,)
    if isinstance(devices, str):
        text = devices.replace(" ", "")
        a, dash, b = text.partition("-")
        if dash:
            if not (a.isdigit() and b.isdigit()) or not 1 <= int(a) <= int(b) or int(b) - int(a) >= MAX_DEVICES:
                raise CostModelError(
                    f"--devices: expected a range A-B of device counts with 1 <= A <= B, received {devices!r}"
                )
            return tuple(range(int(a), int(b) + 1))
        parts = text.split(",")
        if not all(p.isdigit() for p in parts):
            raise CostModelError(f"--devices: expected N, A-B or N,N,... device counts, received {devices!r}")
        devices = tuple(int(p) for p in parts)
    out = tuple(sorted(set(devices)))
    if not out or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in out) or len(out) > MAX_DEVICES:
        raise CostModelError(f"--devices: expected device counts >= 1, received {devices!r}")
    return out


def _values(name: str, given: object, default: Sequence[int]) -> tuple[int, ...]:
    vals = default if given is None else (given,) if isinstance(given, int) else tuple(given)
    if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
        raise CostModelError(f"serve-plan: {name} takes whole numbers >= 1, received {given!r}")
    return tuple(sorted(set(vals)))


@dataclass(frozen=True)
class Job:
    """One planner's search as plain data (it pickles to a worker, which prepares the model once): the model, the
    choices, the request shape and SLOs, and the instance layouts to evaluate, each ``(role, hardware, tp, ep,
    max_num_batched_tokens, max_num_seqs, pp, attention_dp)`` with ``role`` ``"replica"``, ``"prefill"`` or
    ``"decode"`` (a pool instance's pp and attention_dp are 1)."""

    model: object
    settings: tuple
    options: Options
    spec: Serve
    layouts: tuple[tuple, ...]

    @property
    def size(self) -> int:
        return len(self.layouts)

    def spans(self, chunk: int = CHUNK) -> list[tuple[int, int]]:
        return [(i, min(i + chunk, self.size)) for i in range(0, self.size, chunk)]


@functools.lru_cache(maxsize=8)
def _run(job_key: tuple, hardware: str):
    """(model, device, options, engine profile) of ``hardware``, once per process."""
    model, settings, options, spec = job_key
    opts = _options(options.replace(hardware=hardware), None)
    run = prepare(model, dict(settings) or None, opts)
    return run.model, run.device, opts, profile(spec.engine, dict(spec.engine_set), file=spec.engine_file)


@functools.lru_cache(maxsize=32)
def _step(job_key: tuple, hardware: str, tp: int, ep: int, dp: int = 1):
    """The replica's step of (tp, ep, attention-dp): derived once, its CUDA-graph sizes set per layout."""
    m, dev, opts, prof = _run(job_key, hardware)
    replica = Replica(tp=tp, ep=ep, attention_dp=dp)
    return replica_step(m, dev, opts, prof, imbalance=job_key[3].expert_imbalance, replica=replica)


def _pool(job_key: tuple, hardware: str, tp: int, tokens: int, pp: int = 1, ep: int = 1, dp: int = 1):
    """The KV pool of one engine rank of the layout, or the error that says it does not fit (kept: a layout that
    does not fit is asked about once per max_num_seqs)."""
    pool = _pool_or_error(job_key, hardware, tp, tokens, pp, ep, dp)
    if isinstance(pool, CostModelError):
        raise pool
    return pool


@functools.lru_cache(maxsize=256)
def _pool_or_error(job_key: tuple, hardware: str, tp: int, tokens: int, pp: int, ep: int, dp: int):
    try:
        return _kv_pool(job_key, hardware, tp, tokens, Replica(tp=tp, pp=pp, ep=ep, attention_dp=dp))
    except CostModelError as exc:
        return exc


def _kv_pool(job_key: tuple, hardware: str, tp: int, tokens: int, replica: Replica):
    m, dev, opts, prof = _run(job_key, hardware)
    values = {k: v for k, v in m.values.items() if k not in (B, T, C)}
    p = dataclasses.replace(prof, max_num_batched_tokens=tokens)
    return kv_pool(
        m.graph,
        values,
        dev,
        p,
        tp=tp,
        pp=replica.pp,
        weights_dtype=opts.weights_dtype,
        kv_dtype=opts.kv_dtype,
        name=m.name,
        layout=replica.memory_layout(),
    )


def _slos_for(spec: Serve, role: str) -> str | None:
    if not spec.slo:
        return None
    if role == "replica":
        return spec.slo
    own = PREFILL_METRICS if role == "prefill" else DECODE_METRICS
    mine = [str(s) for s in parse_slos(spec.slo) if s.metric in own]
    return ",".join(mine) or None


def instance(job: Job, role: str, hardware: str, tp: int, ep: int, tokens: int, seqs: int, pp: int = 1, dp: int = 1):
    """One instance's answer: its largest rate under its SLOs, the analytic means there and its memory; or the
    reason (a key of :data:`REASONS`) it cannot serve. A replica of ``pp`` stages or ``dp`` attention-dp ranks
    is that many engines side by side (as ``serve`` runs it): each one's rate, times their number."""
    key = (job.model, job.settings, job.options, job.spec)
    m, dev, opts, prof = _run(key, hardware)
    heads = next((int(v) for s, v in m.values.items() if str(s) == "h"), None)
    if heads and heads % tp:
        return "heads"
    try:
        pool = _pool(key, hardware, tp, tokens, pp, ep, dp)
    except CostModelError:
        return "memory"
    limits = dataclasses.replace(prof, max_num_seqs=seqs, max_num_batched_tokens=tokens).limits(pool.num_blocks // pp)
    spec = job.spec
    ins, outs = parse_length(spec.input_len), parse_length(spec.output_len)
    P, O = round(ins.mean), round(outs.mean)
    if limits.num_blocks * limits.block_size < P + O:
        return "request"
    step = dataclasses.replace(_step(key, hardware, tp, ep, dp), graph_sizes=limits.cuda_graph_sizes)
    timed = step if pp == 1 else _Pipelined(step, step, pp, _sends(m, dev, _at(opts, tp, pp)))
    engines = pp * dp
    prefix = spec.prefix_tokens
    if role == "prefill":  # prompts only: the first token is the prefill's
        outs = 1
    elif role == "decode":  # a request arrives with its prompt and first token cached
        limits = dataclasses.replace(limits, prefix_caching=True)
        ins, outs, prefix = P + 1, max(1, O - 1), P
    slos = _slos_for(spec, role)
    if slos is not None:
        found = max_rate_under_slo(
            timed,
            limits,
            slos,
            input_len=ins,
            output_len=outs,
            prefix_tokens=prefix,
            burstiness=spec.burstiness,
            solver="analytic",
        )
        if not found["rate"] > 0:
            return "slo"
        rate, at = found["rate"], found["metrics"]
    else:
        shape = Shape(round(parse_length(ins).mean), round(parse_length(outs).mean), min(prefix, P))
        solver = Solver(timed, limits, shape)
        at = analytic_metrics(solver.closed_loop(solver.n_max))
        rate = at["throughput"]["requests_per_s"]
    return {
        "rate": rate * engines,
        "ttft_s": at["ttft_s"]["mean"],
        "tpot_s": at["tpot_s"]["mean"],
        "e2e_s": at["e2e_s"]["mean"],
        "kv_blocks": pool.num_blocks,
        "kv_bytes_per_token": pool.kv_bytes_per_token,
        "layers": int(step.layer_overhead) if step.layer_overhead.is_number else 1,
    }


def _at(opts: Options, tp: int, pp: int) -> Options:
    """``opts`` with the layout's tp and pp (the pipeline's sends read them)."""
    return opts.replace(layout=dataclasses.replace(opts.layout, tp=tp, pp=pp))


def _chunk(job: Job, start: int, stop: int) -> list:
    return [instance(job, *job.layouts[i]) for i in range(start, stop)]


def _expert_layouts(t: int, experts: int | None, ep, dps, node: int, name: str) -> list[tuple[int, int]]:
    """(ep, attention-dp) pairs searched at tp ``t`` (see the module notes): ``ep``, ``dps``: the values given
    (None: the defaults)."""
    if experts is None:
        if (ep is not None and _values("ep", ep, (1,)) != (1,)) or (dps is not None and dps != (1,)):
            raise CostModelError(f"serve-plan: {name} routes no experts; --ep and --attention-dp are for MoE models")
        return [(1, 1)]
    given = set(_values("ep", ep, (1,))) if ep is not None else None
    ranks = dps if dps is not None else tuple(1 << i for i in range(node.bit_length()) if t << i <= node)
    out = []
    for a in ranks:
        for e in sorted({1, t}) if a == 1 else [t * a]:
            if (given is None or e in given) and experts % e == 0:
                out.append((e, a))
    return out


def _deployments(unit: int, devices: tuple[int, ...]) -> tuple[int, int] | None:
    """The smallest and largest device counts of ``devices`` that hold a whole number of ``unit``s."""
    held = [d for d in devices if d % unit == 0]
    return (held[0], held[-1]) if held else None


def serve_plan(
    model: Model | str,
    hardware: object = None,
    *,
    devices: object,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    spec: Serve | None = None,
    tp: object = None,
    pp: object = None,
    ep: object = None,
    attention_dp: object = None,
    max_num_seqs: object = None,
    max_num_batched_tokens: object = None,
    disaggregate: bool = False,
    objective: str = "gpu",
    top: int = 10,
    verify: bool = False,
    plot: str | None = None,
    workers: int = 1,
    dask: object = None,
    chunk: int = CHUNK,
    **choices: object,
) -> ServePlan:
    """The deployments of ``model`` on ``hardware`` (a device, or several: ``"h100-sxm,h200"``) over ``devices``
    (``16``, ``"8-64"``, ``"8,16,32"``), ranked by ``objective`` — ``"gpu"``: goodput output tokens/s per GPU,
    ``"usd"``: per dollar — under the SLOs of ``spec`` (a :class:`~costmodel.serving.spec.Serve`, or its fields as
    keywords: ``slo="ttft_p90=2s"``, ``input_len="2048"``, ``engine="sglang"``). See the module notes.
    ``tp``, ``pp``, ``ep``, ``attention_dp``, ``max_num_seqs``, ``max_num_batched_tokens``: the values to search
    (defaults: powers of two within a node; 1, and 2 and 4 with a node's tp; 1 or tp × attention-dp; powers of two
    while tp × attention-dp stays in a node; :data:`SEQS`; :data:`TOKENS`). ``verify``: the top rows again by the
    discrete-event simulation (``serve``, its default solver) at their goodput rate. ``plot``: a chart of the rows and
    the Pareto front (``.png``, ``.svg``, ``.pdf``; needs matplotlib). Returns ``serving_plan``: ``rows`` (the top
    ones), ``pareto`` (the front, fastest per user first), ``searched``, ``fitting`` and ``excluded``."""
    started = time.perf_counter()
    if spec is not None and choices:
        raise CostModelError("serve-plan: give a Serve spec or its fields as keywords, not both")
    spec = spec or Serve(**choices)
    if spec.speculative is not None or spec.disaggregate is not None or spec.trace is not None:
        raise CostModelError(
            "serve-plan: speculative decoding, a fixed --disaggregate P:D and a trace are not searched; "
            "check one layout with costmodel serve"
        )
    if objective not in ("gpu", "usd"):
        raise CostModelError(f"serve-plan: the objective is 'gpu' or 'usd', received {objective!r}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise CostModelError(f"serve-plan: top is a whole number >= 1, received {top!r}")
    if plot is not None:
        check_path(plot)  # a bad name is refused before the search
    counts = parse_devices(devices)
    slos = parse_slos(spec.slo) if spec.slo else ()
    if disaggregate and any(s.metric not in PREFILL_METRICS + DECODE_METRICS for s in slos):
        raise CostModelError(
            "serve-plan --disaggregate: SLOs on ttft, tpot and itl only (each pool meets its own); an e2e SLO "
            "couples the pools: check a layout with costmodel serve --disaggregate"
        )
    pps = _values("pp", pp, (1, 2, 4))
    pp_given = pp is not None
    dps_given = _values("attention_dp", attention_dp, (1,)) if attention_dp is not None else None
    opts = Options.make(options) if options is not None else Options.make()
    hardware = hardware if hardware is not None else opts.hardware
    if hardware is None:
        raise CostModelError("serve-plan needs a device: --hardware NAME (see 'costmodel hardware')")
    names = tuple(h.strip() for h in hardware.split(",")) if isinstance(hardware, str) else (hardware,)
    if len(set(names)) != len(names) or not all(names):
        raise CostModelError(
            f"serve-plan: --hardware takes distinct device names separated by commas, received {hardware!r}"
        )
    base = opts.replace(hardware=None, layout=dataclasses.replace(opts.layout, tp=1, ep=1, pp=1))
    key_settings = tuple(sorted((settings or {}).items()))
    job_key = (model, key_settings, base, spec)
    seqs = _values("max_num_seqs", max_num_seqs, SEQS)
    tokens = _values("max_num_batched_tokens", max_num_batched_tokens, TOKENS)
    P, O = round(parse_length(spec.input_len).mean), round(parse_length(spec.output_len).mean)
    if disaggregate and O < 2:
        raise CostModelError(
            "serve-plan --disaggregate: requests need at least 2 output tokens (the first is the prefill's)"
        )
    layouts, plan_tp, eps_used = [], {}, set()
    for hw in names:
        m, dev, _, prof = _run(job_key, hw)
        node = int(dev.efficiency.node_size)
        tps = _values("tp", tp, tuple(1 << i for i in range(node.bit_length()) if 1 << i <= node))
        full = 1 << (node.bit_length() - 1)
        experts = routed_experts(m.values)
        plan_tp[hw] = tps
        for t in tps:
            for e, a in _expert_layouts(t, experts, ep, dps_given, node, m.name):
                eps_used.add(e)
                # pipelines across nodes, tensors inside (vLLM's advice): pp > 1 at a node's tp (the largest power
                # of two in it) unless pp is given, then at every tp
                stages = [q for q in pps if q == 1 or (a == 1 and (pp_given or t == full))]
                for q in stages:
                    layouts += [("replica", hw, t, e, b, s_, q, a) for b in tokens for s_ in seqs]
                if disaggregate and a == 1:
                    layouts += [("decode", hw, t, e, prof.max_num_batched_tokens, s_, 1, 1) for s_ in seqs]
            if disaggregate:
                layouts += [("prefill", hw, t, 1, b, prof.max_num_seqs, 1, 1) for b in tokens]
    unused = sorted(set(_values("ep", ep, (1,))) - eps_used) if ep is not None else []
    if unused:
        raise CostModelError(
            f"serve-plan: ep is 1 or tp × attention-dp (expert parallelism spans the replica's devices) for a model "
            f"with routed experts that divides its experts; no searched layout has ep {', '.join(map(str, unused))}"
        )
    job = Job(model, key_settings, base, spec, tuple(dict.fromkeys(layouts)))
    pools = sum(1 for lay in job.layouts if lay[0] == "prefill") * sum(1 for lay in job.layouts if lay[0] == "decode")
    if job.size > MAX_LAYOUTS or pools * MAX_INSTANCES**2 > MAX_COMBINATIONS:
        raise CostModelError(
            f"serve-plan: {job.size:,} instance layouts ({pools:,} prefill × decode pairs) to search; at most "
            f"{MAX_LAYOUTS:,} ({MAX_COMBINATIONS // MAX_INSTANCES**2:,} pairs): give fewer --tp, --max-num-seqs or "
            f"--max-num-batched-tokens values"
        )
    results = [r for part in chunks.run(job, _chunk, workers=workers, dask=dask, chunk=chunk) for r in part]
    searched = time.perf_counter() - started
    excluded = dict.fromkeys(REASONS, 0)
    rows = []
    usd = {hw: _price(opts, _run(job_key, hw)[1].name) for hw in names}
    prefills, decodes = [], []
    for lay, res in zip(job.layouts, results):
        role, hw, t, e, b, s, q, a = lay
        if isinstance(res, str):
            excluded[res] += role == "replica"
            continue
        if role == "prefill":
            prefills.append((lay, res))
        elif role == "decode":
            decodes.append((lay, res))
        else:
            held = _deployments(t * q * a, counts)
            if held is None:
                excluded["devices"] += 1
                continue
            fields = dict(tp=t, ep=e, pp=q, attention_dp=a, max_num_seqs=s, max_num_batched_tokens=b)
            rows.append(_row(hw, held, t * q * a, t, res["rate"], res, P, O, usd[hw], fields))
    if disaggregate:
        rows += _disaggregated(job, prefills, decodes, counts, P, O, usd)
    fitting = len(rows)
    score = "output_tokens_per_usd" if objective == "usd" else "output_tokens_per_s_per_gpu"
    if objective == "usd" and any(r["output_tokens_per_usd"] is None for r in rows):
        raise CostModelError(
            f"serve-plan --objective usd: no price for {', '.join(h for h in names if usd[h] is None)}; give --price-per-hour"
        )
    rows.sort(
        key=lambda r: (
            -r[score],
            -r["tokens_per_s_per_user"],
            r["gpus_per_unit"],
            r["max_num_seqs"],
            r["max_num_batched_tokens"],
        )
    )
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    front = []
    if rows:
        x = np.array([r["tokens_per_s_per_user"] for r in rows])
        y = np.array([r["output_tokens_per_s_per_gpu"] for r in rows])
        # values a table shows alike (4 significant digits) are one point: layouts that differ only in noise
        # (a prefill pool's chunk that never binds) do not crowd the front
        front = [rows[j] for j in front_of(_shown(y), _shown(x))]
    best = distinct_top(rows, top)
    if verify:
        for r in best:
            r["verified"] = _verify(model, settings, opts, spec, r)
    out = {
        "model": _run(job_key, names[0])[0].name,
        "serving_plan": {
            "hardware": list(names),
            "engine": spec.engine,
            "devices": [counts[0], counts[-1]]
            if len(counts) > 2 and counts == tuple(range(counts[0], counts[-1] + 1))
            else list(counts),
            "tp": {hw: list(v) for hw, v in plan_tp.items()},
            "pp": list(pps),
            "max_num_seqs": list(seqs),
            "max_num_batched_tokens": list(tokens),
            "disaggregate": bool(disaggregate),
            "input_tokens": P,
            "output_tokens": O,
            "slo": [str(s) for s in slos],
            "objective": score,
            "objective_label": "output tokens/s per $" if objective == "usd" else "goodput output tokens/s per GPU",
            "searched": sum(1 for lay in job.layouts if lay[0] == "replica") + _combos(rows),
            "instances_evaluated": job.size,
            "fitting": fitting,
            "excluded": {k: v for k, v in excluded.items() if v},
            "excluded_why": {k: REASONS[k] for k, v in excluded.items() if v},
            "search_s": searched,
            "rows": best,
            "pareto": front,
        },
    }
    if plot is not None:
        serve_plan_chart({**out, "chart": rows}, plot)
    return ServePlan(out)


#: What a row shows of its outcome: two rows of one deployment that differ in the engine's settings only
#: (:data:`KNOBS`) and show these alike (4 significant digits) are one choice for a reader (the limits never bind).
OUTCOME = (
    "goodput_requests_per_s",
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_s",
    "tpot_s",
    "usd_per_million_output_tokens",
)
#: The engine's settings the planner searches for each deployment.
KNOBS = ("max_num_seqs", "max_num_batched_tokens")
#: A row's keys that are neither its deployment nor its outcome: folded rows may differ in them.
_NEITHER = frozenset(
    {
        *KNOBS,
        "rank",
        "kv_blocks",
        "e2e_s",
        "goodput_requests_per_s_max",
        "input_tokens_per_s_per_gpu",
        "output_tokens_per_usd",
        "kv_transfer_s",
    }
)


def distinct_top(rows: Sequence[dict], top: int) -> list[dict]:
    """The first ``top`` of the ranked ``rows``, each later row of the same deployment and outcome but other
    engine settings folded into the first: its ``[max_num_seqs, max_num_batched_tokens]`` listed in the kept
    row's ``alike_engine_settings`` (the kept row's own first), so that the list does not spend its places on
    one deployment at limits that never bind.

    >>> r = {"tp": 4, "max_num_seqs": 64, "max_num_batched_tokens": 2048, "ttft_s": 0.35, "tpot_s": 0.05}
    >>> rows = [r, {**r, "max_num_seqs": 128, "ttft_s": 0.350001}, {**r, "tp": 8}]
    >>> [(x["tp"], x["alike_engine_settings"]) for x in distinct_top(rows, 2)]
    [(4, [[64, 2048], [128, 2048]]), (8, [[64, 2048]])]
    """

    def key(r: dict) -> tuple:
        deployment = tuple((k, repr(v)) for k, v in r.items() if k not in OUTCOME and k not in _NEITHER)
        shown = tuple(None if r.get(k) is None else float(f"{r[k]:.4g}") for k in OUTCOME)
        return deployment, shown

    kept: dict[tuple, dict] = {}
    for r in rows:
        k, knobs = key(r), [r.get(n) for n in KNOBS]
        if k in kept:
            kept[k]["alike_engine_settings"].append(knobs)
        elif len(kept) < top:
            kept[k] = {**r, "alike_engine_settings": [knobs]}
    return list(kept.values())


def _combos(rows) -> int:
    return sum(1 for r in rows if r["disaggregated"])


def front_of(per_gpu: np.ndarray, per_user: np.ndarray) -> np.ndarray:
    """Indices of the points no other beats on both output tokens/s per GPU and tokens/s per user (both the more
    the better), fastest per user first: :func:`~costmodel.verbs.plan.rank.pareto` of their negatives.

    >>> front_of(np.array([3.0, 2.0, 1.0, 2.5]), np.array([1.0, 2.0, 3.0, 1.0])).tolist()
    [2, 1, 0]
    """
    return pareto(-np.asarray(per_user, dtype=float), -np.asarray(per_gpu, dtype=float))


def _shown(v: np.ndarray) -> np.ndarray:
    """``v`` to 4 significant digits."""
    return np.array([float(f"{x:.4g}") for x in v])


def _row(hw, held, gpus_per_unit, tp_shown, rate_unit, res, P, O, usd, fields) -> dict:
    """One deployment's row: ``rate_unit`` requests/s of one unit (a replica, or a p:d set of pools) of
    ``gpus_per_unit`` devices, held ``held`` (smallest, largest) device counts."""
    lo, hi = held
    per_gpu = rate_unit * O / gpus_per_unit
    price = float(usd.usd_per_hour) if usd is not None else None
    row = {
        "hardware": hw,
        "devices": lo,
        "replicas": lo // gpus_per_unit,
        "devices_max": hi,
        "replicas_max": hi // gpus_per_unit,
        "gpus_per_unit": gpus_per_unit,
        "tp": tp_shown,
        "pp": 1,
        "ep": fields.get("ep", 1),
        "attention_dp": 1,
        "max_num_seqs": fields.get("max_num_seqs"),
        "max_num_batched_tokens": fields.get("max_num_batched_tokens"),
        "disaggregated": False,
        "goodput_requests_per_s": rate_unit * (lo // gpus_per_unit),
        "goodput_requests_per_s_max": rate_unit * (hi // gpus_per_unit),
        "output_tokens_per_s_per_gpu": per_gpu,
        "input_tokens_per_s_per_gpu": rate_unit * P / gpus_per_unit,
        "tokens_per_s_per_user": 1 / res["tpot_s"] if res["tpot_s"] > 0 else math.inf,
        "ttft_s": res["ttft_s"],
        "tpot_s": res["tpot_s"],
        "e2e_s": res["e2e_s"],
        "usd_per_gpu_hour": price,
        "usd_per_million_output_tokens": price / (per_gpu * 3600) * 1e6 if price and per_gpu > 0 else None,
        "output_tokens_per_usd": per_gpu * 3600 / price if price else None,
        "kv_blocks": res["kv_blocks"],
        "prefill_instances": None,  # a disaggregated row's pools; None for a replica
        "decode_instances": None,
        "prefill_tp": None,
        "decode_tp": None,
        "kv_transfer_s": None,
    }
    row.update(fields)
    return row


#: The most instances of either pool in one p:d unit (ratios from 1:8 to 8:1).
MAX_INSTANCES = 8


def _disaggregated(job: Job, prefills, decodes, counts, P: int, O: int, usd) -> list[dict]:
    """The rows of every prefill instance × decode instance × p:d ratio (in lowest terms, each pool at most
    :data:`MAX_INSTANCES`) that some device count holds, each pool at its own share of the rate."""
    rows = []
    combos: dict[tuple, list] = {}
    for lay_p, res_p in prefills:
        _, hw, tp_p, _, tokens_p, _ = lay_p[:6]
        for lay_d, res_d in decodes:
            _, hw_d, tp_d, ep_d, tokens_d, seqs_d = lay_d[:6]
            if hw_d != hw:
                continue
            for p in range(1, MAX_INSTANCES + 1):
                for d in range(1, MAX_INSTANCES + 1):
                    unit = p * tp_p + d * tp_d
                    held = _deployments(unit, counts) if math.gcd(p, d) == 1 else None
                    if held is None:
                        continue
                    rate = min(p * res_p["rate"], d * res_d["rate"])
                    combos.setdefault(lay_d, []).append((lay_p, res_p, p, d, unit, held, rate))
    flat = [(lay_d, *it) for lay_d, items in combos.items() for it in items]
    if not flat:
        return rows
    # each pool instance's means at its share of every combination's rate: one vectorised call per instance
    pre_at, dec_at = {}, {}
    for role, at, lay_of, share in (("prefill", pre_at, 1, 3), ("decode", dec_at, 0, 4)):
        groups: dict[tuple, list[int]] = {}
        for i, f in enumerate(flat):
            groups.setdefault(f[lay_of], []).append(i)
        for lay, idx in groups.items():
            rates = np.array([flat[i][7] / flat[i][share] for i in idx])
            a = _open_loop(job, role, lay, rates)
            for j, i in enumerate(idx):
                at[i] = {k: float(a[k][j]) for k in ("ttft_s", "tpot_s", "e2e_s")}
    key = (job.model, job.settings, job.options, job.spec)
    for i, (lay_d, lay_p, res_p, p, d, unit, held, rate) in enumerate(flat):
        hw, tp_d, ep_d, seqs_d = lay_d[1], lay_d[2], lay_d[3], lay_d[5]
        dev = _run(key, hw)[1]
        eff = dev.efficiency
        link = float(dev.scale_out_bandwidth * eff.scale_out.efficiency)
        transfer = kv_transfer_s(
            P, res_p["kv_bytes_per_token"], link, float(eff.scale_out.latency_s), res_p["layers"], False
        )
        res = {
            "ttft_s": pre_at[i]["ttft_s"],
            "tpot_s": dec_at[i]["tpot_s"],
            "e2e_s": pre_at[i]["ttft_s"] + transfer + dec_at[i]["e2e_s"],
            "kv_blocks": res_p["kv_blocks"],
        }
        fields = {
            "tp": tp_d,
            "ep": ep_d,
            "max_num_seqs": seqs_d,
            "max_num_batched_tokens": lay_p[4],
            "prefill_instances": p,
            "decode_instances": d,
            "prefill_tp": lay_p[2],
            "decode_tp": tp_d,
            "kv_transfer_s": transfer,
        }
        row = _row(hw, held, unit, tp_d, rate, res, P, O, usd[hw], fields)
        row["disaggregated"] = True
        rows.append(row)
    return rows


def _open_loop(job: Job, role: str, lay: tuple, rates: np.ndarray) -> dict:
    """A pool instance's analytic means at each of ``rates`` (requests/s per instance)."""
    _, hw, tp, ep, tokens, seqs = lay[:6]
    key = (job.model, job.settings, job.options, job.spec)
    prof = _run(key, hw)[3]
    pool = _pool(key, hw, tp, tokens)
    limits = dataclasses.replace(prof, max_num_seqs=seqs, max_num_batched_tokens=tokens).limits(pool.num_blocks)
    step = dataclasses.replace(_step(key, hw, tp, ep), graph_sizes=limits.cuda_graph_sizes)
    P, O = round(parse_length(job.spec.input_len).mean), round(parse_length(job.spec.output_len).mean)
    h = min(job.spec.prefix_tokens, P)
    if role == "decode":
        limits = dataclasses.replace(limits, prefix_caching=True)
        shape = Shape(P + 1, max(1, O - 1), P)
    else:
        shape = Shape(P, 1, h)
    return Solver(step, limits, shape).open_loop(np.maximum(rates, 1e-12), job.spec.burstiness)


def _verify(model, settings, opts: Options, spec: Serve, row: dict) -> dict:
    """The row's deployment by the discrete-event simulation (``serve``'s default solver) at its goodput rate:
    percentiles, whether the SLOs are met and the simulation's goodput. A disaggregated row runs its smallest
    deployment's p:d with one engine profile for both pools (the decode pool's ``max_num_seqs``, the prefill
    pool's ``max_num_batched_tokens``)."""
    from ..serve import serve  # the verb runs the simulation; imported when a row is verified

    engine_set = dict(spec.engine_set)
    engine_set.update(max_num_seqs=str(row["max_num_seqs"]), max_num_batched_tokens=str(row["max_num_batched_tokens"]))
    k = row["devices"] // row["gpus_per_unit"]
    fields = dict(
        engine_set=tuple(engine_set.items()),
        rate=row["goodput_requests_per_s"],
        requests=min(spec.requests, 1000),
        max_rate=False,
        solver="simulate",
        ep=row["ep"],
        attention_dp=row["attention_dp"],
    )
    layout = dataclasses.replace(opts.layout, tp=row["tp"], pp=row["pp"])
    if row["disaggregated"]:
        p, d = row["prefill_instances"] * k, row["decode_instances"] * k
        fields.update(disaggregate=f"{p}:{d}", prefill_tp=row["prefill_tp"])
    else:
        fields.update(replicas=row["replicas"])
    run = dataclasses.replace(spec, **fields)
    r = serve(
        model,
        row["hardware"],
        settings=settings,
        options=opts.replace(hardware=row["hardware"], layout=layout),
        spec=run,
    )
    s = r["serving"]
    return {
        "solver": "simulate",
        "requests": run.requests,
        "slo_met": s.get("slo_met"),
        "goodput_requests_per_s": s["goodput"]["requests_per_s"] if "goodput" in s else None,
        "ttft_s": s["ttft_s"],
        "tpot_s": s["tpot_s"],
        "output_tokens_per_s_per_gpu": s["throughput"]["output_tokens_per_s_per_gpu"],
    }
