"""``costmodel fit MODEL --memory SIZE``: the largest batch (or sequence/context) that fits one device."""

from __future__ import annotations

import argparse

import costmodel
from costmodel import units

from ._common import add_memory_args, add_model_args, add_step_args, nbytes, options, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        help="largest batch or context that fits a device's memory",
        description="Largest micro-batch per device (or sequence / inference context) that fits a "
        "memory size, or which component overflows.",
    )
    add_model_args(p)
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--memory", metavar="SIZE", help="device memory: 80GB, 80GiB or bytes")
    size.add_argument("--hardware", metavar="NAME", help="a device of the hardware table (its memory size)")
    p.add_argument(
        "--solve",
        default="batch",
        choices=["batch", "seq"],
        help="what to maximise: the micro-batch per device, or the sequence (context with --inference)",
    )
    p.add_argument(
        "--by",
        default="peak",
        choices=["peak", "total"],
        help="compare the liveness peak (default, where modelled) or the sum of components",
    )
    p.add_argument(
        "--inference-memory",
        default="engine",
        choices=["engine", "prefill"],
        help="with --inference: the sequences a serving engine's KV pool holds (default: vLLM v1's 0.9 utilisation, "
        "one chunk of activations, KV blocks), or prefill: every prompt prefilled at once",
    )
    p.add_argument("--engine", default="vllm-v1", help="with --inference: the engine profile (see 'costmodel serve')")
    add_step_args(p, batch_default="dp")
    add_memory_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    r = costmodel.fit(
        args.model,
        args.memory,
        hardware=args.hardware,
        solve=args.solve,
        by=args.by,
        inference_memory=args.inference_memory,
        engine=args.engine,
        settings=settings(args),
        options=options(args, skip=("hardware", "micro_batch")),
    )
    if args.json:
        print(r.to_json())
        return 0
    what = "micro-batch per device" if args.solve == "batch" else ("context" if args.inference else "sequence")
    how = r["inference_memory"] if "inference_memory" in r else f"compared by {r['by']}"
    print(f"{r['model']} in {nbytes(r['memory'])} per device, {how}")
    if not r["fits"]:
        print(f"does not fit even at {what} 1: {r['overflow']} overflows")
        for k, v in r["at_one"].items():
            if v is not None:
                print(f"  {k:<12} {nbytes(v)}")
        change = r.get("to_fit")
        if change:
            devices, need = change["devices"], change["devices_for_states"]
            if need > devices:
                held = (
                    f"{units.devices(devices)} together ({devices * r['memory'] / 1e9:,.2f} GB)"
                    if devices > 1
                    else f"one device ({r['memory'] / 1e9:,.2f} GB)"
                )
                print(
                    f"the model states (params, grads, optimizer: {change['states_bytes'] / 1e9:,.2f} GB) exceed "
                    f"the memory of {held}:\n  no layout of {units.devices(devices)} holds them; it takes at "
                    f"least {units.devices(need)}"
                )
            tp_devices = change["tp_devices"]
            ways = [
                f"--recompute {change['recompute']}" if change["recompute"] else None,
                f"--zero 3 --dp {change['zero3_dp']} ({units.devices(change['zero3_devices'])})"
                if change["zero3_devices"]
                else None,
                f"--tp {change['tp']} --megatron-sp"
                + (f" ({units.devices(tp_devices)}: the layout's × tp {change['tp']})" if tp_devices != devices else "")
                if change["tp"]
                else None,
            ]
            ways = [w for w in ways if w]
            print(
                "smallest change that fits one sequence per device:\n  "
                + (
                    "\n  or ".join(ways)
                    if ways
                    else "none of --recompute, --zero 3 over more devices, --tp up to 8 alone"
                )
            )
        return 0
    print(
        f"largest {what}: {r['largest']:,}" + (f" (global batch {r['global_batch']:,})" if "global_batch" in r else "")
    )
    for k, v in r["at_largest"].items():
        if v is not None:
            print(f"  {k:<12} {nbytes(v)}")
    print(f"one more overflows at: {r['overflow_next']}")
    if "formula" in r:
        print(r["formula"])
    return 0
