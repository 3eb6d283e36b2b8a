"""``costmodel plan MODEL --hardware H --devices N --batch GBS --seq T``: the best layouts, ranked."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import textwrap

import costmodel
from costmodel import units

from ._common import (
    add_chunk_args,
    add_finetune_args,
    add_flag,
    add_model_args,
    chunking,
    duration,
    finetune_options,
    settings,
    typed,
)

COLUMNS = (
    "tp",
    "pp",
    "vpp",
    "dp",
    "cp",
    "micro_batch",
    "micro_batches",
    "recompute",
    "zero",
    "schedule",
    "step_s",
    "tokens_per_s",
    "memory_bytes",
    "rank",
    "step_rank",
    "tie_position",
    "tie_size",
    "ep",  # columns are only ever appended: scripts may read them by position
)


def sizes(text: str) -> tuple[int, ...]:
    """``--ep 1,2,4,8``: positive whole numbers."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected positive whole numbers separated by commas, received {text!r}")
    return tuple(int(p) for p in parts)


def reference(text: str) -> dict[str, object]:
    """``--reference tp=8,pp=8,schedule=interleaved``: fields of a layout (whole numbers, or names)."""
    out: dict[str, object] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(
                f"expected FIELD=VALUE pairs separated by commas (tp=8,pp=8), received {part!r}"
            )
        value = value.strip()
        out[key.strip()] = int(value) if value.isdigit() else value
    return out


def choices(text: str) -> dict[str, object]:
    """``--only zero=0,schedule=1f1b|interleaved``: fields of a layout, each one value or alternatives."""
    out = reference(text)
    for key, value in out.items():
        if isinstance(value, str) and "|" in value:
            parts = [p.strip() for p in value.split("|")]
            if not all(parts):
                raise argparse.ArgumentTypeError(f"expected VALUE|VALUE alternatives, received {key}={value!r}")
            out[key] = tuple(int(p) if p.isdigit() else p for p in parts)
    return out


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="rank every valid parallel layout by predicted step time",
        description="Enumerate TP x PP x VPP x DP x CP x EP x micro-batch x recompute x ZeRO x schedule, "
        "drop layouts that do not divide or do not fit in memory, rank the rest by the "
        "calibrated step time, and give the Pareto front of time against memory.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME", help="a device of the table or a hardware file")
    p.add_argument("--devices", required=True, type=typed("devices", "--devices"), help="devices in all")
    p.add_argument("--batch", required=True, type=typed("batch", "--batch"), help="global batch (sequences)")
    p.add_argument("--seq", required=True, type=typed("seq", "--seq"), help="sequence length (8k = 8192)")
    add_flag(p, "tokens", help="training tokens: adds the training days")
    p.add_argument("--top", type=int, default=10, metavar="K", help="layouts to show (default 10)")
    p.add_argument("--precision", default="bf16-mixed", choices=costmodel.Options.choices("precision"))
    add_flag(p, "implementation")
    p.add_argument("--no-flash", action="store_true", help="attention scores materialised (default: FlashAttention)")
    p.add_argument(
        "--verify", action="store_true", help="re-run the full estimate on the shown layouts (exact memory and step)"
    )
    p.add_argument(
        "--reference",
        type=reference,
        metavar="FIELDS",
        help="a layout to place in the ranking, e.g. a published one: tp=8,pp=8,dp=16,schedule=interleaved",
    )
    p.add_argument(
        "--ep",
        type=sizes,
        metavar="N,N...",
        help="expert-parallel sizes to search (MoE models; default: the powers of two that divide the experts)",
    )
    p.add_argument(
        "--only",
        type=choices,
        metavar="FIELDS",
        help="search only layouts with these fields, alternatives with |: e.g. a software stack's features, "
        "zero=0,cp=1,schedule=1f1b|interleaved (Megatron-LM 2021)",
    )
    p.add_argument(
        "--overlap-comm",
        metavar="KINDS",
        help="communication hidden behind compute, comma-separated of dp,tp,pp,sp,ep, or 'none' "
        "(default: estimate's: dp and sp; DualPipe also ep)",
    )
    p.add_argument(
        "--stack",
        metavar="NAME",
        help="the software stack whose sustained factor the step uses (the device's efficiency.stacks; "
        "default: the device's own factor; see docs/hardware.md)",
    )
    p.add_argument(
        "--no-megatron-sp",
        action="store_true",
        help="no Megatron sequence parallelism (default: on wherever tp > 1)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="chart of step time against memory per device, the Pareto front marked (.png, .svg or .pdf; "
        "needs matplotlib)",
    )
    add_finetune_args(p)
    add_chunk_args(p, "layouts", 65536)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true", help="the ranked layouts as CSV")
    p.set_defaults(run=run)


def _overlap(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return () if text.strip() in ("none", "") else tuple(k.strip() for k in text.split(",") if k.strip())


def _differ(rows: list[dict]) -> str:
    """How the layouts folded into the distinct rows differ from their rows: ``recompute selective|full``."""
    diff: dict[str, list] = {}
    for row in rows:
        for other in row["same_as"]:
            for k, v in other.items():
                diff.setdefault(k, []).append(v)
    return ", ".join(f"{k} {'|'.join(str(v) for v in dict.fromkeys(vs))}" for k, vs in diff.items())


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise costmodel.CostModelError(f"--top: expected a positive number of layouts, received {args.top}")
    r = costmodel.plan(
        args.model,
        settings=settings(args),
        hardware=args.hardware,
        devices=args.devices,
        batch=args.batch,
        seq=args.seq,
        tokens=args.tokens,
        top=args.top,
        verify=args.verify,
        options=costmodel.Options.make(
            flash=not args.no_flash,
            precision=args.precision,
            implementation=args.implementation or "fused",
            **finetune_options(args),
        ),
        reference=args.reference,
        ep=args.ep,
        plot=args.plot,
        only=args.only,
        overlap_comm=_overlap(args.overlap_comm),
        megatron_sp=not args.no_megatron_sp,
        stack=args.stack,
        **chunking(args),
    )
    if args.plot:
        print(f"wrote the plan chart to {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(r, indent=2, allow_nan=False))
        return 0
    if args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(COLUMNS)
        for row in r["layouts"]:
            w.writerow([row[c] for c in COLUMNS])
        return 0
    print(
        f"{r['model']} on {units.devices(r['devices'])} × {r['hardware']}"
        + (f" ({r['stack']}'s sustained factor)" if "stack" in r else "")
        + f", global batch {r['batch']} x {r['seq']} tokens\n  "
        f"{units.plural(r['searched'], 'layout')} searched, {r['fitting']:,} fit ({r['layouts_per_s']:,.0f} layouts/s)"
    )
    days = args.tokens is not None
    print(
        f"{'#':>4} {'tp':>3} {'pp':>3} {'vpp':>3} {'dp':>5} {'cp':>3} {'ep':>3} {'mb':>3} {'m':>4} {'recompute':>9} "
        f"{'zero':>4} {'schedule':>11} {'step':>9}" + (f" {'days':>7}" if days else "") + f" {'memory/dev':>10} same"
    )
    for row in r["distinct"]:
        print(
            f"{row['rank']:>4} {row['tp']:>3} {row['pp']:>3} {row['vpp']:>3} {row['dp']:>5} {row['cp']:>3} "
            f"{row['ep']:>3} {row['micro_batch']:>3} {row['micro_batches']:>4} {row['recompute']:>9} {row['zero']:>4} "
            f"{row['schedule']:>11} {duration(row['step_s']):>9}"
            + (f" {row['training_days']:>7,.1f}" if days else "")
            + f" {units.gb(int(row['memory_bytes'])):>10} {'+' + str(row['same']) if row['same'] else ''}"
        )
    folded = sum(row["same"] for row in r["distinct"])
    note = (
        f"#: the place in the ranking. Each row is a distinct (step, memory per device) pair: "
        f"{units.plural(folded, 'layout')} with a row's step and memory {'is' if folded == 1 else 'are'} folded "
        "into it (the row is the first of them in the ranking: "
        "least recompute, lowest ZeRO, simplest schedule; 'same' counts the others"
        + (f", which differ in {_differ(r['distinct'])}" if folded else "")
        + "; --json 'layouts' is the ranking unfolded)"
        + ("; days: training days for --tokens at that step" if days else "")
    )
    print("\n".join(textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="  ")))
    print(f"Pareto front (time against memory): {units.plural(len(r['pareto']), 'layout')}")
    if args.reference:
        ref = r["reference"]
        print(
            "reference layout: no fitting layout has those fields"
            + (f" ({r['reference_reason']})" if r.get("reference_reason") else "")
            if ref is None
            else f"reference layout: place {ref['rank']:,}, step {ref['step_rank']:,} of the distinct steps "
            f"({ref['tie_position']} of {ref['tie_size']} layouts with that step), {ref['of_best']:.3f}x the best step"
        )
    return 0
