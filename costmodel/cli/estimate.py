"""``costmodel estimate MODEL``: exact counts for one model and config."""

from __future__ import annotations

import argparse

from ..ops import Conventions
from ..report import estimate
from ..training import OPTIMIZERS, PRECISIONS
from ._common import add_hardware_args, add_model_args, dump_json, hardware_options, positive_int, sci, settings
from ._memory import add_memory_args, memory_lines, memory_options
from .hardware import time_text


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="FLOPs, parameters and memory of a model, as exact numbers",
                       description="FLOPs, parameters and memory of one training step of a model.")
    add_options(p)
    p.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    p.add_argument("--plot-memory", metavar="FILE", help="bar chart of the memory breakdown (.png/.svg; matplotlib)")
    p.set_defaults(run=run)


def add_options(p: argparse.ArgumentParser) -> None:
    """The model and step options, shared with the commands built on an estimate (``report``)."""
    add_model_args(p)
    p.add_argument("--batch", type=positive_int("--batch"), help="sequences per step, B (default 1)")
    p.add_argument("--seq", type=positive_int("--seq"), help="tokens per sequence, T (default: the model's context)")
    p.add_argument("--tokens", type=positive_int("--tokens"), help="training tokens D, e.g. 3e11")
    p.add_argument("--precision", default="bf16-mixed", choices=sorted(PRECISIONS), help="precision policy")
    p.add_argument("--optimizer", default="adamw", choices=sorted(OPTIMIZERS))
    p.add_argument("--causal", default="full", choices=["full", "half"],
                   help="count causal attention over the full T×T square (default) or half of it")
    add_memory_args(p, precision=False)
    add_hardware_args(p)


def options(args: argparse.Namespace) -> dict:
    """Keyword arguments of :func:`costmodel.report.estimate` from parsed options."""
    return dict(batch=args.batch, seq=args.seq, settings=settings(args), tokens=args.tokens,
                policy=args.precision, optimizer=args.optimizer, conventions=Conventions(causal=args.causal),
                **memory_options(args), **hardware_options(args))


def run(args: argparse.Namespace) -> int:
    r = estimate(args.model, **options(args))
    if args.plot_memory:
        from ..hardware import device
        from ..plot import memory_chart

        parts = {k: v for k, v in r["memory_bytes"].items() if k not in ("total", "peak") and isinstance(v, int)}
        memory_chart(parts, args.plot_memory, title=f"{r['model']} training memory",
                     capacity=int(device(args.hardware).memory_bytes) if args.hardware else None)
    if args.json:
        print(dump_json(r))
        return 0
    print(text(r))
    return 0


def text(r: dict) -> str:
    p, f = r["params"], r["flops"]
    cfg = " ".join(f"{k}={v}" for k, v in r["config"].items())
    conv = r["conventions"]
    inference = "kv_cache" in r.get("memory_bytes", {})
    lines = [
        f"{r['model']} ({r['family']})  {cfg}",
        f"  conventions: {conv['flop']}; causal attention counted {conv['causal']}"
        + ("" if inference else f"; {conv['precision']} + {conv['optimizer']}"),
        f"parameters      {p['total']:,}  (non-embedding {p['non_embedding']:,}, embedding {p['embedding']:,})"
        + (f"\n  active/token  {p['active']:,}  (non-embedding {p['active_non_embedding']:,})"
           if p["active"] != p["total"] else ""),
    ]
    if inference:  # a forward pass over the prompt (prefill); decode costs come with --hardware
        lines.append(f"FLOPs of a prefill of {r['tokens']['per_step']:,} tokens  {sci(f['forward'])}"
                     f"  (matmul only {sci(f['matmul']['forward'])})")
        lines.extend(memory_lines(r))
        if "time" in r:
            lines.extend(time_text(r))
        return "\n".join(lines)
    lines += [
        f"FLOPs per step  forward {sci(f['forward'])}  backward {sci(f['backward'])}  training {sci(f['training'])}",
        f"  matmul only   forward {sci(f['matmul']['forward'])}  backward {sci(f['matmul']['backward'])}"
        f"  training {sci(f['matmul']['training'])}",
    ]
    tokens = r["tokens"]
    if "training_total" in f:
        lines.append(f"training on D = {sci(tokens['total'])} tokens: {sci(f['training_total'])} FLOPs")
    else:
        lines.append(f"one step = {tokens['per_step']:,} tokens (use --tokens D for a whole run)")
    lines.append(f"  6ND = {sci(f['six_nd'])} covers {100 * f['six_nd_share']:.1f}% of it "
                 "(the rest: attention scores, the unembedding of tied/embedding weights, element-wise ops)")
    lines.extend(memory_lines(r))
    if "time" in r:
        lines.extend(time_text(r))
    return "\n".join(lines)
