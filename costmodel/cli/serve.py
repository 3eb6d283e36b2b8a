"""``costmodel serve MODEL --hardware DEV``: request-level serving — TTFT, TPOT, ITL and E2E percentiles,
throughput, goodput at SLOs and $/M tokens, under an engine's scheduler."""

from __future__ import annotations

import argparse
import math

import costmodel

from ._common import add_finetune_args, add_flag, add_model_args, options, settings


def _text(name: str, convert):
    def read(text: str):
        try:
            return convert(text)
        except costmodel.CostModelError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = name
    return read


def _count(flag: str, least: int = 1):
    def read(text: str) -> int:
        value = int(text) if text.strip().isdigit() else None
        if value is None or value < least:
            raise costmodel.CostModelError(f"{flag}: expected a whole number >= {least}, received {text!r}")
        return value

    return _text(flag, read)


def _rate(text: str) -> float:
    return costmodel.Serve.parse("rate", text)  # the grammar lives with the record it fills


def _speculative(text: str) -> tuple[int, float]:
    return costmodel.Serve.parse("speculative", text)


def _fraction(flag: str):
    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise costmodel.CostModelError(f"{flag}: expected a number, received {text!r}") from None
        if not math.isfinite(value):
            raise costmodel.CostModelError(f"{flag}: expected a finite number, received {text!r}")
        return value

    return _text(flag, read)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serving at the request level: latency percentiles, throughput, goodput, $/M tokens",
        description="Serve a model under an engine's scheduler (vLLM v1, SGLang, TensorRT-LLM): the step time of "
        "each mixed batch derived from the graph, requests simulated (or solved analytically), TTFT, TPOT, ITL and "
        "E2E percentiles, throughput, goodput at SLOs and the cost of a million tokens.",
    )
    add_model_args(p)
    add_flag(p, "hardware")
    for name in ("tp", "ep", "pp"):
        add_flag(p, name)
    add_flag(p, "weights_dtype")
    add_flag(p, "kv_dtype")
    add_flag(p, "price_per_hour")
    add_finetune_args(p)
    g = p.add_argument_group("engine")
    g.add_argument("--engine", default="vllm-v1", help="engine profile: vllm-v1 (default), sglang, trtllm")
    g.add_argument(
        "--engine-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a profile field (max_num_seqs=512, max_num_batched_tokens=2048, gpu_memory_utilization=0.95)",
    )
    g.add_argument("--engine-file", metavar="FILE", help="a JSON file of engine profiles of the built-in file's shape")
    g.add_argument("--replicas", type=_count("--replicas"), default=1, help="engine replicas sharing the load")
    g.add_argument(
        "--attention-dp",
        type=_count("--attention-dp"),
        default=1,
        metavar="N",
        help="attention data parallelism (MoE): N ranks of tp devices, each its own batch and KV pool, the experts "
        "over all N × tp (needs --ep N×tp; SGLang --enable-dp-attention, vLLM --data-parallel-size)",
    )
    load = p.add_argument_group("load").add_mutually_exclusive_group()
    load.add_argument("--rate", type=_text("--rate", _rate), help="requests/s (Poisson), or inf: every request at once")
    load.add_argument("--concurrency", type=_count("--concurrency"), help="a closed loop of C users")
    load.add_argument("--trace", metavar="FILE", help="replay a JSONL trace (timestamp, input and output tokens)")
    w = p.add_argument_group("requests")
    w.add_argument(
        "--input-len",
        default="2048",
        metavar="DIST",
        help="prompt tokens: 2048, uniform:A:B, normal:M:S, lognormal:M:S",
    )
    w.add_argument("--output-len", default="256", metavar="DIST", help="output tokens, as --input-len")
    w.add_argument(
        "--prefix-tokens",
        type=_count("--prefix-tokens", 0),
        default=0,
        help="a shared prompt prefix (prefix cache hits)",
    )
    w.add_argument(
        "--burstiness",
        type=_fraction("--burstiness"),
        default=1.0,
        help="arrival gaps' coefficient of variation (1: Poisson)",
    )
    w.add_argument("--requests", type=_count("--requests"), default=1000, help="requests simulated (default 1000)")
    w.add_argument("--seed", type=_count("--seed", 0), default=0, help="random seed (default 0)")
    w.add_argument(
        "--warmup", type=_fraction("--warmup"), default=0.0, help="share of the first requests left out of the metrics"
    )
    s = p.add_argument_group("answer")
    s.add_argument("--slo", metavar="SLOS", help="e.g. ttft_p90=2s,tpot_p99=50ms (units s or ms)")
    s.add_argument(
        "--speculative",
        type=_text("--speculative", _speculative),
        metavar="K,ALPHA",
        help="speculative decoding: K draft tokens, acceptance ALPHA",
    )
    s.add_argument(
        "--solver",
        choices=("simulate", "analytic"),
        default="simulate",
        help="discrete-event simulation (default) or the analytic solver",
    )
    s.add_argument(
        "--expert-imbalance",
        type=_fraction("--expert-imbalance"),
        default=1.0,
        help="with --ep: the busiest device's routed tokens over the mean (>= 1; default 1, balanced)",
    )
    d = p.add_argument_group("disaggregated prefill and decode")
    d.add_argument("--disaggregate", metavar="P:D", help="P prefill and D decode instances, the KV cache sent between")
    d.add_argument("--prefill-tp", type=_count("--prefill-tp"), help="the prefill instances' tp (default --tp)")
    d.add_argument("--kv-overlap", action="store_true", help="stream the KV cache layer by layer during the prefill")
    s.add_argument(
        "--formulas", action="store_true", help="TPOT(B, C), TTFT(P) and the critical batch as formulas (LaTeX too)"
    )
    s.add_argument(
        "--no-max-rate", action="store_true", help="with --slo: do not search the largest rate that meets it"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def engine_overrides(texts: list[str]) -> tuple[tuple[str, str], ...]:
    """``--engine-set FIELD=VALUE`` flags as (field, value) pairs; the profile checks the field and its value."""
    overrides = []
    for text in texts:
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise costmodel.CostModelError(f"--engine-set: expected FIELD=VALUE, received {text!r}")
        overrides.append((name.strip(), value.strip()))
    return tuple(overrides)


def run(args: argparse.Namespace) -> int:
    spec = costmodel.Serve(
        engine=args.engine,
        engine_set=engine_overrides(args.engine_set),
        engine_file=args.engine_file,
        replicas=args.replicas,
        rate=args.rate,
        concurrency=args.concurrency,
        trace=args.trace,
        burstiness=args.burstiness,
        input_len=args.input_len,
        output_len=args.output_len,
        prefix_tokens=args.prefix_tokens,
        requests=args.requests,
        seed=args.seed,
        warmup=args.warmup,
        slo=args.slo,
        speculative=args.speculative,
        solver=args.solver,
        max_rate=not args.no_max_rate,
        formulas=args.formulas,
        disaggregate=None
        if args.disaggregate is None
        else f"{args.disaggregate}{':overlap' if args.kv_overlap else ''}",
        prefill_tp=args.prefill_tp,
        expert_imbalance=args.expert_imbalance,
        ep=args.ep,  # serving's expert group, not training's layout (ep dividing dp): costmodel.serving.parallel
        attention_dp=args.attention_dp,
    )
    r = costmodel.serve(args.model, settings=settings(args), options=options(args, skip=("ep",)), spec=spec)
    print(r.to_json() if args.json else r.to_text())
    return 0
