"""``costmodel roofline MODEL --hardware NAME``: per-op roofline of a step, prefill or decode."""

from __future__ import annotations

import argparse
import sys
import textwrap

import costmodel
from costmodel import units

from ._common import (
    add_counting_args,
    add_finetune_args,
    add_model_args,
    add_step_args,
    duration,
    options,
    output_file,
    sci,
    settings,
    typed,
)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "roofline",
        help="per-op roofline: intensity, bound, time on a device",
        description="Per-op roofline of a model on a device: FLOPs, bytes, intensity, which side "
        "binds, and the time lower bound max(FLOPs/peak, bytes/bandwidth); the step is "
        "the sum of its ops' bounds.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME", help="a device of 'costmodel hardware' or a file")
    add_step_args(p)
    p.add_argument("--decode", action="store_true", help="one decode step: one new token per sequence")
    p.add_argument("--context", type=typed("context", "--context"), help="KV cache length C for --decode")
    p.add_argument(
        "--phase",
        choices=["forward", "training"],
        default="forward",
        help="forward (prefill, no loss) or a training step (default forward)",
    )
    p.add_argument("--fuse", action="store_true", help="fuse element-wise ops into their producers first")
    p.add_argument(
        "--flash", action="store_true", default=None, help="replace materialised attention by FlashAttention first"
    )
    p.add_argument(
        "--dtype", choices=costmodel.Options.choices("dtype"), help="whose peak to use (default: each op's dtype)"
    )
    add_counting_args(p)
    add_finetune_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--plot", metavar="FILE", type=output_file, help="write a roofline chart (.png, .svg or .pdf; needs matplotlib)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    opts = options(args, skip=("hardware", "context"))
    if args.dtype:
        opts = opts.replace(dtype=args.dtype)
    r = costmodel.roofline(
        args.model,
        args.hardware,
        decode=args.decode,
        phase=args.phase,
        fuse=args.fuse,
        plot=args.plot,
        context=args.context,
        settings=settings(args),
        options=opts,
    )
    print(r.to_json() if args.json else text(r))
    if args.plot:  # as every chart says it (sweep, plan, estimate --plot-memory): on stderr, --json too
        print(f"wrote the roofline chart to {args.plot}", file=sys.stderr)
    return 0


def _time(s: float) -> str:
    return duration(s)  # µs to years, as every report says it


def text(r) -> str:
    w = min(31, max((len(o["name"]) for o in r["ops"]), default=2) + 2)  # 100 columns for names up to 30
    lines = [
        f"{r['model']} {r['mode']} on {r['hardware']}: peak {sci(r['peak_flops'])} FLOP/s ({r['dtype']}), "
        f"{r['memory_bandwidth'] / 1e12:.2f} TB/s, ridge {r['ridge']:.0f} FLOPs/byte",
        "  "
        + " ".join(f"{k}={v}" for k, v in r["config"].items())
        + (f"; passes: {', '.join(r['passes'])}" if r["passes"] else ""),
        f"{'op':<{w}}{'kind':<12}{'count':>6}{'FLOPs':>11}{'bytes':>11}{'FLOP/B':>9}  {'bound':<8}{'time':>10}",
    ]
    for o in r["ops"]:
        inten = f"{o['intensity']:>9.1f}" if o["intensity"] is not None else f"{'inf':>9}"
        lines.append(
            f"{o['name']:<{w}}{o['kind']:<12}{o['count']:>6}{sci(o['flops']):>11}{sci(o['bytes']):>11}"
            f"{inten}  {o['bound']:<8}{_time(o['time_s']):>10}"
        )
    t = r["total"]
    n_mem = sum(o["bound"] == "memory" for o in r["ops"])
    lines.append(
        f"total: {_time(t['time_s'])} (sum of op bounds; compute alone {_time(t['compute_s'])}, "
        f"memory alone {_time(t['memory_s'])}); {n_mem} of {units.plural(len(r['ops']), 'op')} memory-bound"
    )
    if "decode" in r:
        d = r["decode"]
        state = d.get("state_cache_bytes")
        own = "KV cache read" if state is None else "reads (KV cache, recurrent state)"
        crit = (
            f"turns compute-bound at B* = {d['critical_batch']:,.0f}"
            if d["critical_batch"] is not None
            else f"never turns compute-bound at this context (each sequence's {own} alone is below the ridge)"
        )
        routed = "experts_touched" in d  # the every-expert closed form bounds a mixture of experts' B* from above
        if d["max_context_compute_bound"] is not None:
            crit += (
                f"; B*(C) {'<=' if routed else '='} {d['critical_batch_expr']}"
                + (" (every expert read)" if routed else "")
                + f", finite for C < {d['max_context_compute_bound']:,.0f}"
            )
        lines += [
            f"decode: {_time(d['latency_per_token_s'])} per token per sequence, {d['tokens_per_s']:,.0f} tokens/s",
            f"  per step: FLOPs = {d['flops_expr']}; bytes = {d['bytes_expr']}",
            *(
                [
                    f"  experts read per routed layer: {d['experts_touched']:,.2f} of {d['experts']} "
                    f"(E·(1 − (1 − k/E)^B), k = {d['top_k']}: the distinct experts B tokens are expected to touch)"
                ]
                if routed
                else []
            ),
            f"  reads weights {d['weights_bytes'] / 1e9:,.2f} GB + KV cache {d['kv_cache_bytes'] / 1e9:,.2f} GB "
            + ("" if state is None else f"+ recurrent state {state / 1e9:,.3f} GB (read and written) ")
            + f"per step; {crit} (ridge {d['ridge']:.0f})",
            "  throughput vs batch (while the batch fits the device's memory): "
            + (
                ", ".join(f"B={c['batch']}: {c['tokens_per_s']:,.0f}/s" for c in d["throughput"] if c.get("fits", True))
                or "none fits"
            )
            + (
                f"; at most B = {d['max_batch_fits']:,} fits {d['memory_capacity_bytes'] / 1e9:,.0f} GB"
                + (f" ({d['inference_memory']}, as fit --inference)" if "inference_memory" in d else "")
                if "max_batch_fits" in d
                else ""
            ),
        ]
    if "variants" in r:
        v = r["variants"]
        lines += [
            f"fusing element-wise ops: {_time(v['fused']['time_s'])}, saves {v['fusion_bytes_saved'] / 1e9:,.3f} GB",
            f"FlashAttention: {_time(v['flash']['time_s'])}, removes {v['flash_bytes_saved'] / 1e9:,.3f} GB "
            f"of T×T score traffic; both: {_time(v['flash+fused']['time_s'])}",
        ]
    if "ttft_s" in r:
        lines.append(f"time to first token (prefill): {_time(r['ttft_s'])}")
    # 100 columns: a long line (a config of many sizes, a total with its parts) continues indented
    return "\n".join(
        part
        for line in lines
        for part in textwrap.wrap(line, 100, subsequent_indent="    ", break_on_hyphens=False) or [""]
    )
