"""Memory and layout flags shared by ``estimate`` and ``fit``."""

from __future__ import annotations

import argparse

from ..cost import DTYPE_BYTES
from ..errors import CostModelError
from ..memory import RECOMPUTE, WEIGHT_FORMATS
from ..parallel import Layout
from ..training import OPTIMIZERS, PRECISIONS
from ._common import positive_int


def add_memory_args(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """--precision/--optimizer (unless the caller has them), recompute, flash, layout, inference."""
    if precision:
        p.add_argument("--precision", default="bf16-mixed", choices=sorted(PRECISIONS), help="precision policy")
        p.add_argument("--optimizer", default="adamw", choices=sorted(OPTIMIZERS))
    g = p.add_argument_group("memory and parallel layout (every memory_bytes.* number is per device)")
    g.add_argument("--recompute", default="none", choices=RECOMPUTE,
                   help="activation recompute: none, selective (attention core) or full (layer inputs only)")
    g.add_argument("--flash", action=argparse.BooleanOptionalAction, default=False,
                   help="FlashAttention: no T×T scores kept (default: scores materialised, as eager PyTorch)")
    g.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3],
                   help="ZeRO stage over dp (3 = FSDP full shard)")
    for name, what in (("dp", "data"), ("tp", "tensor (Megatron)"), ("pp", "pipeline (1F1B)"),
                       ("sp", "sequence/context"), ("ep", "expert")):
        g.add_argument(f"--{name}", type=positive_int(f"--{name}"), default=1, help=f"{what} parallel degree")
    g.add_argument("--megatron-sp", action="store_true",
                   help="Megatron sequence parallelism in the TP group (replicated activations divided by tp)")
    g.add_argument("--micro-batch", type=positive_int("--micro-batch"),
                   help="sequences per micro-batch on one device (default: batch / dp)")
    g.add_argument("--inference", action="store_true", help="inference memory: weights, KV cache, working set")
    g.add_argument("--context", type=positive_int("--context"), help="KV-cache context in tokens (inference)")
    g.add_argument("--weights-dtype", default="bf16", choices=sorted(WEIGHT_FORMATS),
                   help="inference weight format (int4/int8/fp8 carry their group scales)")
    g.add_argument("--kv-dtype", choices=sorted(DTYPE_BYTES),
                   help="KV-cache element dtype for inference (default: the graph's activation dtype)")


def memory_options(args: argparse.Namespace) -> dict[str, object]:
    """The estimate options these flags set."""
    layout = Layout(dp=args.dp, tp=args.tp, pp=args.pp, sp=args.sp, ep=args.ep, zero=args.zero,
                    megatron_sp=args.megatron_sp)
    if args.zero and args.dp == 1:
        raise CostModelError(f"--zero {args.zero} shards over data-parallel devices; expected --dp > 1, received --dp 1")
    return {"recompute": args.recompute, "flash": args.flash, "layout": layout, "micro_batch": args.micro_batch,
            "inference": args.inference, "context": args.context, "weights_dtype": args.weights_dtype,
            "kv_dtype": args.kv_dtype}


def memory_lines(r: dict) -> list[str]:
    """The memory part of the text report: one line per component, each naming its convention."""
    from ._common import nbytes

    m, conv = r["memory_bytes"], r["memory"]["conventions"]
    inference = "kv_cache" in m
    title = "inference memory" if inference else "training memory"
    lines = [f"{title}, per device (decimal GB and binary GiB)"]
    keys = ("params", "kv_cache", "activations", "total") if inference else \
        ("params", "grads", "optimizer", "activations", "total")
    for key in keys:
        lines.append(f"  {key:<12} {nbytes(m[key]):<30} {conv.get(key, '')}")
    if m.get("peak") is not None:
        lines.append(f"  {'peak':<12} {nbytes(m['peak']):<30} {conv['peak']}; at {r['memory']['peak_at']}")
    parts = m.get("parts", {})
    if parts:
        lines.append("  parts: " + ", ".join(f"{k} {v / 1e9:,.3g} GB" for k, v in parts.items()))
    devices = r.get("time", {}).get("devices", 1)
    if devices > r["memory"].get("layout", {}).get("devices", 1) == 1:
        lines.append(f"  note: this is one device holding the whole model; --devices {devices} spreads only the "
                     "time. Give --dp/--tp/--pp (and --zero) to shard memory across them")
    comm = r.get("communication_bytes")
    if comm and comm["total"]:
        lines.append("communication per step per device (ring collectives): "
                     + ", ".join(f"{k} {v / 1e9:,.3g} GB" for k, v in comm.items()))
    return lines
