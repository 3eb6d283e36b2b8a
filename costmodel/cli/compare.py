"""``costmodel compare MODEL``: training FLOPs and memory under named conventions, side by side."""

from __future__ import annotations

import argparse

import costmodel

from ._common import add_finetune_args, add_flag, add_model_args, add_step_args, nbytes, options, sci, settings


def add(sub: argparse._SubParsersAction) -> None:
    names = ",".join(costmodel.conventions.CONVENTIONS)
    p = sub.add_parser(
        "compare",
        help="training FLOPs under named conventions (6ND, Kaplan, PaLM, ...)",
        description="One model's training FLOPs and memory under named counting conventions, "
        "each derived from the same graph, with exact symbolic differences.",
    )
    add_model_args(p)
    p.add_argument(
        "--conventions",
        default=names,
        metavar="A,B,...",
        help=f"conventions to compare, the first is the reference (default: {names})",
    )
    add_step_args(p)
    add_finetune_args(p)
    add_flag(p, "tokens", help="training tokens D: FLOPs for the whole run")
    p.add_argument("--json", action="store_true", help="one JSON object: exact integers and formulas")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    r = costmodel.compare(args.model, args.conventions, settings=settings(args), options=options(args))
    print(r.to_json() if args.json else text(r))
    return 0


def text(r) -> str:
    key = (
        "flops.training_total"
        if any("flops.training_total" in c for c in r["conventions"].values())
        else "flops.training"
    )
    ref = r["conventions"][r["reference"]][key]
    cfg = " ".join(f"{k}={v}" for k, v in r["config"].items())
    what = "training FLOPs for the run" if key.endswith("total") else "training FLOPs per step"
    w = max(len("convention"), *map(len, r["conventions"]))
    lines = [
        f"{r['model']}  {cfg}",
        f"{what} under each convention (reference: {r['reference']})",
        f"  {'convention':<{w}} {'FLOPs':>10} {'÷ ref':>7}  {'memory (states + activations)':<32} source",
    ]
    for name, c in r["conventions"].items():
        ratio = c[key] / ref if ref else float("nan")
        lines.append(
            f"  {name:<{w}} {sci(c[key]):>10} {ratio:>7.4f}  {nbytes(c['memory_bytes.total']):<32} {c['source']}"
        )
    lines.append(f"per token, minus {r['reference']} (exact; B = batch, T = sequence, L, d, h, V, ... as in 'derive'):")
    for name, c in r["conventions"].items():
        if name != r["reference"]:
            lines.append(f"  {name:<{w}} {c['flops.per_token_minus_reference']}")
    lines.append(f"per token under {r['reference']}: {r['conventions'][r['reference']]['flops.per_token']}")
    return "\n".join(lines)
