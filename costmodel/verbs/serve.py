"""``costmodel.serve``: request-level serving of a model on a device under an engine — latencies, throughput,
goodput and cost.

The run is put together here from the stages below it: the model loaded for its settings and its device read once
(:func:`~costmodel.sections.run.prepare`), the engine profile (:mod:`costmodel.serving.profiles`), the KV blocks the
engine allocates (:mod:`costmodel.serving.memory`), the step time of a mixed batch derived from the graph
(:mod:`costmodel.serving.step`), then the requests (:mod:`costmodel.serving.workload`) through the discrete-event
simulation of one replica (:mod:`costmodel.serving.simulate`) and the analytic solver
(:mod:`costmodel.serving.analytic`), and the metrics (:mod:`costmodel.serving.metrics`).

Replicas share the load evenly: each of ``r`` replicas serves rate λ/r (random routing of a Poisson stream is a
Poisson stream) or every r-th request of a trace or a closed loop's ``C/r`` users; throughputs are the replica's
times r. The cost of a replica's device-hours is split between prompt and output tokens by the marginal step time
of each: a prompt token's share of a full chunk, an output token's share of the operating decode step.

Pipeline parallelism (``pp`` stages of ``tp`` devices each): the weights and every token's KV cache are split over
the stages, so the pool holds the tokens of the stages' whole memory; the engine keeps ``pp`` batches in flight
(vLLM's virtual engines), each with ``1/pp`` of the KV blocks, so a replica serves as ``pp`` engines side by side.
One step of a batch passes every stage in turn: the tp group's step over all L layers plus ``pp − 1``
point-to-point sends of the batch's hidden states (``tokens × d`` activations, on the scale-up tier inside a node,
scale-out across nodes). With the pipeline full no stage idles, so there is no bubble term.

Expert parallelism and attention data parallelism are serving's own mapping (:mod:`costmodel.serving.parallel`):
``ep`` spreads the experts over the replica's tp × attention-dp devices; each of the ``attention_dp`` ranks is an
engine with its own scheduler, batch and KV pool (its tp group's memory less 1/ep of the experts), served like the
in-flight batches of pp: the replica's load split over its ranks, each rank's step the one whose expert layers
carry every rank's tokens (:mod:`costmodel.serving.step`).

The largest rate that meets the SLOs (``max_rate_under_slo``) is searched by the solver the run asks for
(``max_rate_solver``): bisection over simulations of up to 400 requests by default, over the analytic solver's
means with ``solver="analytic"`` — the number ``costmodel serve-plan`` ranks layouts by.

Speculative decoding (``k`` draft tokens accepted with probability α, :func:`~costmodel.serving.spec.tokens_per_step`
τ per step): a decode of the target verifies ``k + 1`` tokens, the draft (an MTP head, taken as one more layer of
the target per draft token) runs ``k`` times, and a request needs ``⌈(O − 1)/τ⌉`` decode steps after its first
token; latencies and throughput are reported per real token.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

from ..devices.network import collective_seconds, strides
from ..devices.prices import Price, price
from ..dtypes import DTYPE_BYTES
from ..errors import CostModelError
from ..families import Model
from ..memory.device import prepared
from ..options import Options
from ..render.results import Served
from ..sections.run import prepare
from ..serving.analytic import Shape, Solver
from ..serving.batch import Entry
from ..serving.disagg import balanced_ratio, kv_transfer_s, simulate_disaggregated
from ..serving.formulas import formulas
from ..serving.memory import kv_pool
from ..serving.metrics import analytic_metrics, max_rate_under_slo, metrics
from ..serving.parallel import Replica, routed_experts
from ..serving.predictor import replica_step
from ..serving.profiles import profile
from ..serving.simulate import simulate
from ..serving.spec import Serve, tokens_per_step
from ..serving.step import PARTS, StepModel
from ..serving.workload import Workload, from_trace, parse_length, workload
from ..symbols import B, C, T, d


def _options(options: Options | None, hardware: object) -> Options:
    opts = Options.make(options) if options is not None else Options.make()
    if hardware is not None:
        opts = opts.replace(hardware=hardware)
    if opts.hardware is None:
        raise CostModelError("serve needs a device: --hardware NAME (see 'costmodel hardware')")
    layout = opts.layout
    if layout.dp > 1:
        raise CostModelError("serve: data parallelism is --replicas for serving (each replica its own engine)")
    if not opts.attention_default and opts.attention not in ("flash", "sdpa"):
        raise CostModelError(
            f"serve: serving engines run fused attention; --attention {opts.attention} is not served (use flash)"
        )
    return opts.replace(inference=True, attention="flash")


class _Pipelined:
    """One of ``pp`` in-flight batches: its step passes every stage (see the module notes)."""

    def __init__(self, inner, step: StepModel, pp: int, send_s: object):
        self.inner, self.step, self.pp, self.send_s = inner, step, pp, send_s

    def p2p(self, batch: Sequence[Entry]) -> float:
        """Seconds of the batch's ``pp − 1`` sends between stages."""
        return float(self.send_s(sum(c for c, _ in batch)))

    def __call__(self, batch: Sequence[Entry]) -> float:
        return self.inner(batch) + self.p2p(batch)

    def breakdown(self, batch: Sequence[Entry]) -> dict[str, float]:
        parts = dict(self.step.breakdown(batch))
        parts["communication"] += self.p2p(batch)
        return parts


def _sends(m: Model, dev, opts: Options):
    """The seconds of ``pp − 1`` point-to-point sends of ``tokens`` hidden states between pipeline stages."""
    if d not in m.values:
        raise CostModelError(f"serve --pp: {m.name} has no hidden size d to send between pipeline stages")
    layout = opts.layout
    hidden = int(m.values[d]) * DTYPE_BYTES[m.graph.graph.get("dtype", "bf16")]
    stride = strides(layout.tp, 1, 1)["pp"]
    # a send is latency + bytes / bandwidth: affine in the tokens, its two numbers evaluated once (a step calls it)
    fixed = float(collective_seconds("p2p", 0, dev, dev.attained, layout.pp, stride))
    per_token = float(collective_seconds("p2p", hidden, dev, dev.attained, layout.pp, stride)) - fixed
    return lambda tokens: (layout.pp - 1) * (fixed + per_token * tokens)


class _Speculative:
    """The target's step with each decode verifying k + 1 tokens, plus k draft passes (see the module notes)."""

    def __init__(self, step: StepModel, k: int, draft_share: float):
        self.step, self.k, self.draft_share = step, k, draft_share

    def __call__(self, batch: Sequence[Entry]) -> float:
        verify = [(self.k + 1, p) if c == 1 else (c, p) for c, p in batch]
        decodes = [(1, p) for c, p in batch if c == 1]
        return self.step(verify) + self.k * self.draft_share * self.step(decodes)


def serve(
    model: Model | str,
    hardware: object = None,
    *,
    settings: Mapping[str, object] | None = None,
    options: Options | None = None,
    spec: Serve | None = None,
    **choices: object,
) -> Served:
    """Serve ``model`` on ``hardware`` (or ``options.hardware``): see the module notes. ``spec`` (or the
    keywords of :class:`~costmodel.serving.spec.Serve`: ``rate=4``, ``input_len="2048"``, ``slo="ttft_p90=2s"``)
    says the engine and the load.

    >>> r = serve("llama3-8b", "h100-sxm", rate=2, requests=50, input_len="512", output_len="64")
    >>> r["serving"]["ttft_s"]["p50"] > 0, r["serving"]["engine"]
    (True, 'vllm-v1')
    """
    if spec is not None and choices:
        raise CostModelError("serve: give a Serve spec or its fields as keywords, not both")
    spec = spec or Serve(**choices)
    opts = _options(options, hardware)
    run = prepare(model, settings, opts)
    m, dev = run.model, run.device
    layout = opts.layout
    prof = profile(spec.engine, dict(spec.engine_set), file=spec.engine_file)
    values = {k: v for k, v in m.values.items() if k not in (B, T, C)}
    pp = layout.pp
    replica = Replica(
        tp=layout.tp, pp=pp, ep=spec.ep if spec.ep is not None else layout.ep, attention_dp=spec.attention_dp
    )
    replica.check(routed_experts(values), m.name)
    if replica.ranks > 1 and spec.disaggregate is not None:
        raise CostModelError("serve: --attention-dp with --disaggregate is not modelled; drop one of them")
    if pp > 1 and (spec.disaggregate is not None or spec.formulas):
        raise CostModelError("serve: --pp is served as in-flight batches of one engine; drop --disaggregate/--formulas")
    pool = kv_pool(
        m.graph,
        values,
        dev,
        prof,
        tp=layout.tp,
        pp=pp,
        weights_dtype=opts.weights_dtype,
        kv_dtype=opts.kv_dtype,
        name=m.name,
        layout=replica.memory_layout(),
    )
    limits = prof.limits(pool.num_blocks // pp)
    step = replica_step(
        m, dev, opts, prof, graph_sizes=limits.cuda_graph_sizes, imbalance=spec.expert_imbalance, replica=replica
    )
    tau = 1.0
    timed = step
    if spec.speculative is not None:
        k, alpha = spec.speculative
        tau = tokens_per_step(k, alpha)
        layers = float(step.layer_overhead) if step.layer_overhead.is_number else 1.0
        timed = _Speculative(step, k, 1.0 / max(layers, 1.0))
    if pp > 1:
        timed = _Pipelined(timed, step, pp, _sends(m, dev, opts))
    gpus = replica.devices * spec.replicas
    per_replica_gpus = replica.devices
    replicas = spec.replicas
    # the load splits over every in-flight batch and every attention-dp rank: each its own engine, alike
    spec = dataclasses.replace(spec, replicas=spec.replicas * pp * replica.ranks)

    reqs = _workload(spec)
    real = reqs
    if tau > 1:  # a request needs fewer decode steps: simulate those, report per real token
        reqs = Workload(
            tuple(
                dataclasses.replace(r, output_tokens=1 + math.ceil((r.output_tokens - 1) / tau)) for r in reqs.requests
            ),
            reqs.concurrency,
        )
    ins, outs = parse_length(spec.input_len), parse_length(spec.output_len)
    shape = Shape(
        max(1, round(_mean([r.input_tokens for r in real.requests]))),
        max(1, round(_mean([r.output_tokens for r in reqs.requests]))),
        min(spec.prefix_tokens, max(1, round(_mean([r.input_tokens for r in real.requests])))),
    )
    users = max(1, spec.concurrency // spec.replicas) if spec.concurrency is not None else None
    solver = Solver(timed, limits, shape, points=(users,) if users else ())
    out: dict[str, object] = {}
    disagg = None
    if spec.disaggregate is not None:
        disagg, sim = _disaggregated(spec, m, dev, opts, prof, timed, limits, pool, reqs)
        res = metrics(sim, slos=spec.slo, warmup=spec.warmup)
        mean_running = float(sim.step_seqs.mean()) if len(sim.step_seqs) else 1.0
        out.update(res)
        gpus = disagg["gpus"]
    elif spec.solver == "simulate":
        sim = simulate(reqs, timed, limits)
        if tau > 1:
            sim = dataclasses.replace(sim, requests=real.requests)
        res = metrics(sim, slos=spec.slo, warmup=spec.warmup)
        mean_running = float(sim.step_seqs.mean()) if len(sim.step_seqs) else 1.0
        out.update(res)
    else:
        res = _analytic(solver, spec, prof.prefill_queue_share)
        mean_running = float(res.pop("concurrency"))
        out.update(res)
    r = spec.replicas if disagg is None else spec.disaggregate.decode  # the decode pool emits the tokens
    thr = out["throughput"]
    for key in ("input_tokens_per_s", "output_tokens_per_s", "requests_per_s"):
        thr[key] = thr[key] * r
    thr["input_tokens_per_s_per_gpu"] = thr["input_tokens_per_s"] / gpus
    thr["output_tokens_per_s_per_gpu"] = thr["output_tokens_per_s"] / gpus
    if "goodput" in out:
        out["goodput"]["requests_per_s"] *= r
    if disagg is None:
        analytic = _analytic(solver, spec, prof.prefill_queue_share)
        analytic.pop("concurrency", None)
        out["analytic"] = analytic
    else:
        out["disaggregation"] = disagg
    # the largest rate under the SLOs by the solver asked for: the analytic one's (means) is what serve-plan ranks
    rate_solver = "analytic" if spec.solver == "analytic" else "des"
    if spec.slo and spec.max_rate and spec.trace is None and spec.concurrency is None and disagg is None:
        found = max_rate_under_slo(
            timed,
            limits,
            spec.slo,
            input_len=ins,
            output_len=outs,
            prefix_tokens=spec.prefix_tokens,
            requests=min(spec.requests, 400),
            burstiness=spec.burstiness,
            seed=spec.seed,
            iterations=8,
            solver=rate_solver,
        )
        out["max_rate_under_slo"] = found["rate"] * r
        out["max_rate_solver"] = rate_solver
    elif spec.slo:
        out["max_rate_under_slo"] = None
    mean_in = shape.input_tokens
    mean_ctx = mean_in + shape.output_tokens // 2
    n_op = max(1, round(mean_running))
    decode = [(1, mean_ctx)] * n_op
    chunk = min(limits.max_num_batched_tokens, max(mean_in - shape.prefix_tokens, 1))
    prefill = [(chunk, 0)]
    shown = timed if isinstance(timed, _Pipelined) else step
    out["step_breakdown"] = {"decode": _parts(shown, decode), "prefill": _parts(shown, prefill)}
    out["step_breakdown"]["decode"]["batch"] = n_op
    out["step_breakdown"]["decode"]["context"] = mean_ctx
    out["step_breakdown"]["prefill"]["tokens"] = chunk
    usd = _price(opts, dev.name)
    if usd is not None and thr["output_tokens_per_s"] and thr["output_tokens_per_s"] == thr["output_tokens_per_s"]:
        per_s = float(usd.usd_per_hour) * gpus / 3600
        t_in = timed(prefill) / chunk  # seconds of a replica per prompt token
        t_out = timed(decode) / n_op / tau  # per output token at the operating batch
        tokens_in, tokens_out = thr["input_tokens_per_s"], thr["output_tokens_per_s"]
        share_in = tokens_in * t_in / (tokens_in * t_in + tokens_out * t_out)
        out["cost_usd_per_million_input_tokens"] = per_s * share_in / tokens_in * 1e6
        out["cost_usd_per_million_output_tokens"] = per_s * (1 - share_in) / tokens_out * 1e6
        out["cost_usd_per_hour"] = per_s * 3600
        out["price_source"] = usd.describe()
    else:
        out["cost_usd_per_million_input_tokens"] = None
        out["cost_usd_per_million_output_tokens"] = None
    out.update(
        {
            "engine": prof.name,
            "engine_version": prof.version,
            "calibrated_for": prof.calibration(),
            "engine_overrides": list(prof.overridden),
            "hardware": dev.name,
            "gpus": gpus,
            "gpus_per_replica": per_replica_gpus,
            "layout": {
                "tp": layout.tp,
                "ep": replica.ep,
                "pp": pp,
                "replicas": replicas if disagg is None else r,
                "attention_dp": replica.attention_dp,
            },
            "load": spec.load,
            "solver": spec.solver,
            "memory": {**pool.as_dict(), "max_num_seqs": limits.max_num_seqs},
            "limits": {
                "max_num_seqs": limits.max_num_seqs,
                "max_num_batched_tokens": limits.max_num_batched_tokens,
                "block_size": limits.block_size,
                "chunked_prefill": limits.chunked_prefill,
                "decode_first": limits.decode_first,
                "mixed_batches": limits.mixed_batches,
                "prefix_caching": limits.prefix_caching,
            },
            "speculative": None
            if spec.speculative is None
            else {"k": spec.speculative[0], "alpha": spec.speculative[1], "tokens_per_step": tau},
        }
    )
    if spec.formulas:
        out["formulas"] = formulas(prepared(m.graph, opts), step, opts.counting)
    return Served({"model": m.name, "serving": out})


def _disaggregated(spec: Serve, m, dev, opts: Options, prof, decode_step, decode_limits, decode_pool, reqs):
    """The prefill pool (its own tp), the KV transfer and the decode pool: :mod:`costmodel.serving.disagg`."""
    pools = spec.disaggregate
    if spec.replicas > 1:
        raise CostModelError("serve: --disaggregate P:D sets the instances of each pool; drop --replicas")
    if reqs.concurrency is not None:
        raise CostModelError("serve: --disaggregate takes an open load (--rate or --trace), not --concurrency")
    tp_p = spec.prefill_tp or opts.layout.tp
    p_opts = opts.replace(layout=dataclasses.replace(opts.layout, tp=tp_p))
    values = {k: v for k, v in m.values.items() if k not in (B, T, C)}
    p_pool = kv_pool(
        m.graph, values, dev, prof, tp=tp_p, weights_dtype=opts.weights_dtype, kv_dtype=opts.kv_dtype, name=m.name
    )
    p_limits = prof.limits(p_pool.num_blocks)
    p_step = replica_step(m, dev, p_opts, prof, graph_sizes=p_limits.cuda_graph_sizes, imbalance=spec.expert_imbalance)
    eff = dev.efficiency
    link = float(dev.scale_out_bandwidth * eff.scale_out.efficiency)
    layers = (
        int(decode_step.step.layer_overhead)
        if isinstance(decode_step, _Speculative)
        else int(decode_step.layer_overhead)
    )
    per_token = p_pool.kv_bytes_per_token

    def transfer(tokens: int) -> float:
        return kv_transfer_s(tokens, per_token, link, float(eff.scale_out.latency_s), layers, pools.overlap)

    combined, _ = simulate_disaggregated(reqs.requests, p_step, p_limits, decode_step, decode_limits, pools, transfer)
    mean_in = round(_mean([r.input_tokens for r in reqs.requests]))
    mean_out = round(_mean([r.output_tokens for r in reqs.requests]))
    balance = balanced_ratio(p_step, p_limits, decode_step, decode_limits, Shape(mean_in, mean_out))
    return {
        "prefill_instances": pools.prefill,
        "decode_instances": pools.decode,
        "prefill_tp": tp_p,
        "decode_tp": opts.layout.tp,
        "gpus": pools.prefill * tp_p + pools.decode * opts.layout.tp,
        "kv_transfer_s_mean_request": transfer(mean_in),
        "kv_overlap": pools.overlap,
        "link": f"scale-out {link / 1e9:.1f} GB/s per GPU",
        **balance,
    }, combined


def _mean(xs: Sequence[int]) -> float:
    return sum(xs) / len(xs)


def _workload(spec: Serve) -> Workload:
    if spec.trace is not None:
        w = from_trace(spec.trace, limit=spec.requests * spec.replicas)
        return Workload(w.requests[:: spec.replicas], w.concurrency) if spec.replicas > 1 else w
    if spec.concurrency is not None:
        users = max(1, spec.concurrency // spec.replicas)
        return workload(
            spec.requests,
            concurrency=users,
            input_len=spec.input_len,
            output_len=spec.output_len,
            prefix_tokens=spec.prefix_tokens,
            seed=spec.seed,
        )
    return workload(
        spec.requests,
        rate=spec.rate / spec.replicas,
        burstiness=spec.burstiness,
        input_len=spec.input_len,
        output_len=spec.output_len,
        prefix_tokens=spec.prefix_tokens,
        seed=spec.seed,
    )


def _analytic(solver: Solver, spec: Serve, queue_share: object = 0) -> dict[str, object]:
    """The analytic solver's means at the spec's load, in the keys of the simulation's metrics (``queue_share``:
    the engine's, for a closed loop)."""
    if spec.concurrency is not None:
        a = solver.closed_loop(max(1, spec.concurrency // spec.replicas), float(queue_share))
    elif spec.rate is not None and not math.isinf(spec.rate):
        a = solver.open_loop(spec.rate / spec.replicas, spec.burstiness)
    else:
        a = solver.closed_loop(solver.n_max)  # every request at once: the engine full
    out = analytic_metrics(a, slos=spec.slo)
    out["bound"] = a.get("bound")
    return out


def _parts(step: StepModel | _Pipelined, batch: Sequence[Entry]) -> dict[str, object]:
    parts = step.breakdown(batch)
    total = sum(parts.values())
    return {
        "step_s": total,
        **{f"{p}_s": parts[p] for p in PARTS},
        "binds": max(PARTS, key=lambda p: parts[p]),
    }


def _price(opts: Options, hardware: str):
    spec = opts.price_per_hour
    if spec is None:
        try:
            return price("list", hardware)
        except CostModelError:
            return None
    if isinstance(spec, (int, Fraction)):
        return Price("given", hardware, Fraction(spec), "", "--price-per-hour", "the user")
    return price(str(spec), hardware)
