"""``costmodel roofline MODEL --hardware NAME``: per-op roofline of a step, prefill or decode."""

from __future__ import annotations

import argparse

from ..analysis import as_int, check_values
from ..errors import CostModelError
from ..hardware import device
from ..inference import decode_graph, prefill_graph, summary
from ..models import load
from ..ops import Conventions
from ..passes import flash_attention, fuse_elementwise
from ..roofline import Bound, roofline, total, variants
from ..symbols import B, C, T
from ._common import add_model_args, duration, dump_json, positive_int, sci, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="per-op roofline: intensity, bound, time on a device",
                       description="Per-op roofline of a model on a device: FLOPs, bytes, intensity, which side "
                                   "binds, and the time lower bound max(FLOPs/peak, bytes/bandwidth); the step is "
                                   "the sum of its ops' bounds.")
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME", help="a device of 'costmodel hardware' or a file")
    p.add_argument("--batch", type=positive_int("--batch"), default=1, help="sequences B (default 1)")
    p.add_argument("--seq", type=positive_int("--seq"), help="prompt/sequence length T (default: the model's)")
    p.add_argument("--decode", action="store_true", help="one decode step: one new token per sequence")
    p.add_argument("--context", type=positive_int("--context"), help="KV cache length C for --decode")
    p.add_argument("--phase", choices=["forward", "training"], default="forward",
                   help="forward (prefill, no loss) or a training step (default forward)")
    p.add_argument("--fuse", action="store_true", help="fuse element-wise ops into their producers first")
    p.add_argument("--flash", action="store_true", help="replace materialised attention by FlashAttention first")
    p.add_argument("--dtype", help="whose peak to use (default: each op's dtype)")
    p.add_argument("--causal", default="full", choices=["full", "half"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", metavar="FILE", help="write a roofline chart (.png, .svg or .pdf; needs matplotlib)")
    p.set_defaults(run=run)


def _row(r: Bound) -> dict[str, object]:
    return {"name": r.name, "kind": r.kind, "count": r.count, "flops": as_int(r.flops, f"flops of {r.name}"),
            "bytes": as_int(r.bytes, f"bytes of {r.name}"),
            "intensity": float(r.intensity) if r.bytes else None, "bound": r.bound, "time_s": float(r.time_s),
            "compute_s": float(r.compute_s), "memory_s": float(r.memory_s),
            "attainable_flops": float(r.attainable)}


def run(args: argparse.Namespace) -> int:
    if args.decode and args.phase != "forward":
        raise CostModelError("--decode is an inference step: it takes no --phase training")
    if args.context is not None and not args.decode:
        raise CostModelError("--context is the KV cache length of --decode; give --decode too")
    dev = device(args.hardware)
    conv = Conventions(causal=args.causal)
    m = load(args.model, settings(args))
    values = {**m.values, B: args.batch}
    if args.seq is not None:
        values[T] = args.seq
    if args.decode:
        values[C] = args.context or values.get(T)
        if values[C] is None:
            raise CostModelError("--decode needs the KV cache length: give --context C")
    check_values(m.graph, values)  # heads divide d, and the like
    base = m.graph if args.phase == "training" else prefill_graph(m.graph)
    prepared = flash_attention(base) if args.flash else base  # FlashAttention looks for the unfused score chain
    G = decode_graph(prepared) if args.decode else prepared  # decode first: it absorbs MLA's up-projections
    if args.fuse:
        G = fuse_elementwise(G, training=args.phase == "training")
    dtype = args.dtype or m.graph.graph.get("dtype", "bf16")
    rows = roofline(G, values, dev, phase=args.phase, dtype=args.dtype, conventions=conv)
    tot = total(rows)
    mode = "decode" if args.decode else ("training" if args.phase == "training" else "prefill")
    out: dict[str, object] = {
        "model": m.name, "hardware": dev.name, "mode": mode, "dtype": dtype,
        "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
        "peak_flops": int(dev.peak(dtype)), "memory_bandwidth": int(dev.memory_bandwidth),
        "ridge": float(dev.ridge(dtype)), "passes": list(G.graph.get("passes", ())),
        "ops": [_row(r) for r in rows], "total": _row(tot),
    }
    if args.decode:
        out["decode"] = summary(prepared, values, dev, dtype=dtype, conventions=conv)  # of the unfused step
    else:
        v = variants(base, values, dev, phase=args.phase, conventions=conv)
        out["variants"] = {k: {"time_s": float(b.time_s), "bytes": int(b.bytes)} for k, b in v.items()}
        out["variants"]["fusion_bytes_saved"] = int(v["unfused"].bytes - v["fused"].bytes)
        out["variants"]["flash_bytes_saved"] = int(v["unfused"].bytes - v["flash"].bytes)
        if mode == "prefill":
            out["ttft_s"] = float(tot.time_s)
    if args.plot:
        from ..plot import roofline_chart

        roofline_chart(rows, dev, args.plot, dtype=dtype,
                       title=f"{m.name} {mode} on {dev.name} (B={args.batch}"
                             + (f", C={values[C]})" if args.decode else f", T={values[T]})"))
        out["plot"] = args.plot
    if args.json:
        print(dump_json(out))
    else:
        print(text(out))
    return 0


def _time(s: float) -> str:
    return f"{s * 1e6:,.1f} µs" if s < 1e-3 else f"{s * 1e3:,.3f} ms" if s < 1 else duration(s)


def text(r: dict) -> str:
    lines = [f"{r['model']} {r['mode']} on {r['hardware']}: peak {sci(r['peak_flops'])} FLOP/s ({r['dtype']}), "
             f"{r['memory_bandwidth'] / 1e12:.2f} TB/s, ridge {r['ridge']:.0f} FLOPs/byte",
             "  " + " ".join(f"{k}={v}" for k, v in r["config"].items())
             + (f"; passes: {', '.join(r['passes'])}" if r["passes"] else ""),
             f"{'op':<34}{'kind':<12}{'count':>6}{'FLOPs':>11}{'bytes':>11}{'FLOP/B':>9}  {'bound':<8}{'time':>12}"]
    for o in r["ops"]:
        inten = f"{o['intensity']:>9.1f}" if o["intensity"] is not None else f"{'inf':>9}"
        lines.append(f"{o['name']:<34}{o['kind']:<12}{o['count']:>6}{sci(o['flops']):>11}{sci(o['bytes']):>11}"
                     f"{inten}  {o['bound']:<8}{_time(o['time_s']):>12}")
    t = r["total"]
    n_mem = sum(o["bound"] == "memory" for o in r["ops"])
    lines.append(f"total: {_time(t['time_s'])} (sum of op bounds; compute alone {_time(t['compute_s'])}, "
                 f"memory alone {_time(t['memory_s'])}); {n_mem} of {len(r['ops'])} ops memory-bound")
    if "decode" in r:
        d = r["decode"]
        crit = (f"turns compute-bound at B* = {d['critical_batch']:,.0f}" if d["critical_batch"] is not None else
                "never turns compute-bound at this context (each sequence's KV cache read alone is below the ridge)")
        if d["max_context_compute_bound"] is not None:
            crit += f"; B*(C) = {d['critical_batch_expr']}, finite for C < {d['max_context_compute_bound']:,.0f}"
        lines += [f"decode: {_time(d['latency_per_token_s'])} per token per sequence, {d['tokens_per_s']:,.0f} tokens/s",
                  f"  per step: FLOPs = {d['flops_expr']}; bytes = {d['bytes_expr']}",
                  f"  reads weights {d['weights_bytes'] / 1e9:,.2f} GB + KV cache {d['kv_cache_bytes'] / 1e9:,.2f} GB "
                  f"per step; {crit} (ridge {d['ridge']:.0f})",
                  "  throughput vs batch: " + ", ".join(f"B={c['batch']}: {c['tokens_per_s']:,.0f}/s"
                                                        for c in d["throughput"])]
    if "variants" in r:
        v = r["variants"]
        lines += [f"fusing element-wise ops: {_time(v['fused']['time_s'])}, saves {v['fusion_bytes_saved'] / 1e9:,.3f} GB",
                  f"FlashAttention: {_time(v['flash']['time_s'])}, removes {v['flash_bytes_saved'] / 1e9:,.3f} GB "
                  f"of T×T score traffic; both: {_time(v['flash+fused']['time_s'])}"]
    if "ttft_s" in r:
        lines.append(f"time to first token (prefill): {_time(r['ttft_s'])}")
    if "plot" in r:
        lines.append(f"roofline chart written to {r['plot']}")
    return "\n".join(lines)
