"""``costmodel serve-plan MODEL --hardware DEV --devices 8-64 --slo ...``: the serving deployments ranked by goodput
per GPU (or per dollar) under SLOs, and the Pareto front of tokens/s per GPU against tokens/s per user.

A subcommand of its own rather than ``plan --serve``: ``plan``'s flags (a global batch and sequence, micro-batches,
ZeRO, schedules, recompute) are a training step's and three of them are required, while a serving plan takes an
engine, request lengths, SLOs and a range of device counts; one parser holding both would make every flag of one
meaningless for the other.
"""

from __future__ import annotations

import argparse
import csv
import sys

import costmodel

from ._common import add_chunk_args, add_flag, add_model_args, chunking, options, settings
from .serve import _count, _fraction, engine_overrides

COLUMNS = (
    "rank",
    "hardware",
    "devices",
    "replicas",
    "tp",
    "pp",
    "ep",
    "max_num_seqs",
    "max_num_batched_tokens",
    "disaggregated",
    "prefill_instances",
    "prefill_tp",
    "decode_instances",
    "decode_tp",
    "goodput_requests_per_s",
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "usd_per_million_output_tokens",  # columns are only ever appended: scripts may read them by position
    "attention_dp",
)


def _sizes(flag: str):
    def read(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",")]
        if not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"expected positive whole numbers separated by commas, received {text!r}")
        return tuple(int(p) for p in parts)

    read.__name__ = flag
    return read


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve-plan",
        help="rank serving deployments (tp, pp, ep, attention-dp, replicas, engine limits, prefill:decode pools) by goodput per GPU",
        description="Search TP x PP x EP x attention-DP x replicas x max_num_seqs x max_num_batched_tokens (and prefill:decode pools "
        "with --disaggregate) over a range of device counts with the analytic solver, drop the layouts that do not "
        "fit or meet no SLO (counted by why), rank the rest by goodput per GPU or per dollar, and give the Pareto "
        "front of output tokens/s per GPU against tokens/s per user.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME[,NAME]", help="a device, or several to compare")
    p.add_argument("--devices", required=True, metavar="N|A-B|N,N", help="device counts: 16, 8-64 or 8,16,32,64")
    p.add_argument("--tp", type=_sizes("--tp"), metavar="N,N", help="tp sizes (default: powers of two in a node)")
    p.add_argument(
        "--pp", type=_sizes("--pp"), metavar="N,N", help="pipeline stages (default 1, and 2 and 4 with a node's tp)"
    )
    p.add_argument(
        "--ep", type=_sizes("--ep"), metavar="N,N", help="expert-parallel sizes (MoE: 1 or tp × attention-dp)"
    )
    p.add_argument(
        "--attention-dp",
        type=_sizes("--attention-dp"),
        metavar="N,N",
        help="attention data-parallel ranks (MoE; default powers of two while tp × N fits a node)",
    )
    p.add_argument("--max-num-seqs", type=_sizes("--max-num-seqs"), metavar="N,N", help="default 8,16,...,512")
    p.add_argument(
        "--max-num-batched-tokens", type=_sizes("--max-num-batched-tokens"), metavar="N,N", help="default 2048-16384"
    )
    p.add_argument("--disaggregate", action="store_true", help="also search prefill:decode pools (ratios to 8:1)")
    add_flag(p, "weights_dtype")
    add_flag(p, "kv_dtype")
    add_flag(p, "price_per_hour")
    g = p.add_argument_group("engine and requests (as costmodel serve)")
    g.add_argument("--engine", default="vllm-v1", help="engine profile: vllm-v1 (default), sglang, trtllm")
    g.add_argument("--engine-set", action="append", default=[], metavar="FIELD=VALUE", help="override a field")
    g.add_argument("--engine-file", metavar="FILE", help="a JSON file of engine profiles")
    g.add_argument("--input-len", default="2048", metavar="DIST", help="prompt tokens (their mean is planned for)")
    g.add_argument("--output-len", default="256", metavar="DIST", help="output tokens, as --input-len")
    g.add_argument("--prefix-tokens", type=_count("--prefix-tokens", 0), default=0, help="a shared prompt prefix")
    g.add_argument("--burstiness", type=_fraction("--burstiness"), default=1.0, help="arrival gaps' CV (1: Poisson)")
    g.add_argument("--expert-imbalance", type=_fraction("--expert-imbalance"), default=1.0, help="with ep > 1")
    s = p.add_argument_group("answer")
    s.add_argument("--slo", metavar="SLOS", help="e.g. ttft_p90=2s,tpot_p99=50ms (checked against the means)")
    s.add_argument("--objective", choices=("gpu", "usd"), default="gpu", help="goodput per GPU (default) or per $")
    s.add_argument("--top", type=_count("--top"), default=10, metavar="K", help="layouts to show (default 10)")
    s.add_argument(
        "--verify", action="store_true", help="run the shown layouts again by the simulation at their goodput rate"
    )
    s.add_argument("--requests", type=_count("--requests"), default=1000, help="requests a --verify run simulates")
    s.add_argument(
        "--plot", metavar="FILE", help="chart of tokens/s per GPU against per user, the Pareto front (.png/.svg/.pdf)"
    )
    add_chunk_args(p, "layouts", 32)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true", help="the ranked layouts as CSV")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = costmodel.Serve(
        engine=args.engine,
        engine_set=engine_overrides(args.engine_set),
        engine_file=args.engine_file,
        input_len=args.input_len,
        output_len=args.output_len,
        prefix_tokens=args.prefix_tokens,
        burstiness=args.burstiness,
        requests=args.requests,
        slo=args.slo,
        expert_imbalance=args.expert_imbalance,
    )
    r = costmodel.serve_plan(
        args.model,
        args.hardware,
        devices=args.devices,
        settings=settings(args),
        options=options(args, skip=("hardware", "devices", "tp", "pp", "ep")),
        spec=spec,
        tp=args.tp,
        pp=args.pp,
        ep=args.ep,
        attention_dp=args.attention_dp,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        disaggregate=args.disaggregate,
        objective=args.objective,
        top=args.top,
        verify=args.verify,
        plot=args.plot,
        **chunking(args),
    )
    if args.plot:
        print(f"wrote the serving plan chart to {args.plot}", file=sys.stderr)
    if args.json:
        print(r.to_json())
    elif args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(COLUMNS)
        for row in r["serving_plan"]["rows"]:
            w.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    else:
        print(r.to_text())
    return 0
