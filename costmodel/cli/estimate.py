"""``costmodel estimate MODEL``: exact counts for one model and config."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import textwrap
from collections.abc import Mapping

import costmodel
from costmodel import units

from ._common import (
    add_counting_args,
    add_flag,
    add_hardware_args,
    add_memory_args,
    add_model_args,
    add_precision_args,
    add_step_args,
    nbytes,
    options,
    output_file,
    sci,
    settings,
)
from .hardware import time_text


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="FLOPs, parameters and memory of a model, as exact numbers",
        description="FLOPs, parameters and memory of one training step of a model.",
    )
    add_options(p)
    p.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    p.add_argument(
        "--plot-memory",
        metavar="FILE",
        type=output_file,
        help="bar chart of the memory breakdown (.png/.svg; matplotlib)",
    )
    p.set_defaults(run=run)


def add_options(p: argparse.ArgumentParser) -> None:
    """The model and step options, shared with the commands built on an estimate (``report``)."""
    add_model_args(p)
    add_step_args(p)
    add_flag(p, "tokens")
    add_precision_args(p)
    add_counting_args(p)
    add_memory_args(p, precision=False)
    add_hardware_args(p)


def run(args: argparse.Namespace) -> int:
    r = costmodel.estimate(args.model, settings=settings(args), options=options(args))
    if args.plot_memory:
        capacity = int(costmodel.hardware(args.hardware).memory_bytes) if args.hardware else None
        r.plot_memory(args.plot_memory, capacity=capacity)
        print(f"wrote the memory chart to {args.plot_memory}", file=sys.stderr)
    chosen = {"B": "default" if args.batch is None else None, "T": "the config's context" if args.seq is None else None}
    print(r.to_json() if args.json else text(r, defaults=chosen, fit_command=fit_command(args)))
    return 0


def fit_command(args: argparse.Namespace) -> str | None:
    """The ``costmodel fit`` command a DOES-NOT-FIT hint prints: this command's model and every flag it was given
    that ``fit`` takes too (``--inference``, ``--context``, the layout...), as typed; ``None`` without the command
    line (``args.argv`` and ``args.parser``, set by :func:`costmodel.cli.main`) or a device."""
    argv, top = getattr(args, "argv", None), getattr(args, "parser", None)
    if argv is None or top is None or not getattr(args, "hardware", None):
        return None
    subs = next(a.choices for a in top._actions if isinstance(getattr(a, "choices", None), dict))
    ours, theirs = subs[args.command]._option_string_actions, subs["fit"]._option_string_actions
    words = list(argv)
    if args.command in words:  # the words after the command (global options come before it)
        words = words[words.index(args.command) + 1 :]
    kept: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, _ = word.partition("=")
        action = ours.get(flag) if word.startswith("--") else None
        takes = 0 if action is None or eq or action.nargs == 0 else 1
        if action is not None and flag in theirs and flag != "--hardware":
            kept += words[i : i + 1 + takes]
        i += 1 + takes
    return shlex.join(["costmodel", "fit", args.model, "--hardware", args.hardware, *kept])


#: Columns of the text report: every line fits.
WIDTH = 100


def wrap(head: str, text: str, width: int = WIDTH) -> list[str]:
    """``head`` then ``text``, the text wrapped at ``width`` columns under its own first column."""
    lines = textwrap.wrap(text, width - len(head)) or [""]
    return [head + lines[0], *(" " * len(head) + line for line in lines[1:])]


def wrap_items(head: str, items: list[str], width: int = WIDTH) -> list[str]:
    """``head`` then ``items`` joined by commas, a line broken only between items."""
    lines = [head]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > width and lines[-1].strip():
            lines.append(" " * len(head))
        lines[-1] += ("" if lines[-1].endswith(" ") or not lines[-1].strip() else " ") + piece
    return lines


def _config_lines(r, defaults: Mapping[str, str | None]) -> list[str]:
    cfg = r["config"]
    step = [f"{k}={v:,}" + (f" ({defaults[k]})" if defaults.get(k) else "") for k, v in cfg.items() if k in ("B", "T")]
    layout = r.get("memory", {}).get("layout", {})
    if "micro_batch" in layout:
        step.append(
            f"micro-batch {layout['micro_batch']:,}"
            + (f" x {layout['micro_batches']:,}" if layout.get("micro_batches", 1) > 1 else "")
        )
    rest = " ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("B", "T"))
    notes = [line for note in r.get("notes", ()) for line in wrap("  note: ", note)]
    if r.get("source") == "traced":
        notes = [*wrap("  source: ", "traced (torch.export of the transformers model built from the config)"), *notes]
    return wrap(f"{r['model']} ({r['family']})  ", ", ".join(step)) + (wrap("  config: ", rest) if rest else []) + notes


def text(r, defaults: Mapping[str, str | None] | None = None, fit_command: str | None = None) -> str:
    """The text report; ``defaults``: why a value of B or T was chosen (``"default"``), where the user left it;
    ``fit_command``: the ``costmodel fit`` command a step that does not fit names (:func:`fit_command`)."""
    p, f = r["params"], r["flops"]
    conv = r["conventions"]
    inference = "kv_cache" in r.get("memory_bytes", {})
    lines = [
        *_config_lines(r, defaults or {}),
        *wrap(
            "  conventions: ",
            f"{conv['flop']}; causal attention counted {conv['causal']}"
            + ("" if inference else f"; {conv['precision']} + {conv['optimizer']}")
            + f"; attention {conv.get('attention', 'unfused')}"
            + (
                " (the inference default: serving engines run fused attention; --attention unfused keeps T×T)"
                if inference and conv.get("attention_default")
                else ""
            ),
        ),
        f"parameters      {p['total']:,}  (non-embedding {p['non_embedding']:,}, embedding {p['embedding']:,})"
        + (
            f"\n  active/token  {p['active']:,}  (non-embedding {p['active_non_embedding']:,})"
            if p["active"] != p["total"]
            else ""
        ),
    ]
    if inference:  # a forward pass over the prompt (prefill); decode costs come with --hardware
        batch = r["config"].get("B", 1)
        lines.append(
            f"FLOPs of a prefill of {batch:,} × {r['tokens']['prompt']:,} prompt tokens  "
            f"{sci(f['prefill'])}  (matmul only {sci(f['matmul']['prefill'])}; "
            f"{'last position' if r['conventions'].get('logits', 'last') == 'last' else 'every position'}"
            "'s logits)"
        )
        lines.extend(memory_lines(r, fit_command))
        if "time" in r:
            lines.extend(time_text(r))
        return "\n".join(fit_width(lines))
    lines += [
        f"FLOPs per step  forward {sci(f['forward'])}  backward {sci(f['backward'])}  training {sci(f['training'])}",
        f"  matmul only   forward {sci(f['matmul']['forward'])}  backward {sci(f['matmul']['backward'])}"
        f"  training {sci(f['matmul']['training'])}",
    ]
    tokens = r["tokens"]
    if "training_total" in f:
        lines.append(f"training on D = {sci(tokens['total'])} tokens: {sci(f['training_total'])} FLOPs")
    else:
        lines.append(f"one step = {units.plural(tokens['per_step'], 'token')} (use --tokens D for a whole run)")
    lines += wrap(
        "  ",
        f"6ND = {sci(f['six_nd'])} covers {100 * f['six_nd_share']:.1f}% of it (the rest: attention "
        "scores, the unembedding of tied/embedding weights, element-wise ops)",
    )
    lines.extend(memory_lines(r, fit_command))
    if "time" in r:
        lines.extend(time_text(r))
    return "\n".join(fit_width(lines))


def fit_width(lines: list[str], width: int = WIDTH) -> list[str]:
    """Every line within ``width`` columns: a longer one is wrapped under its own indent (plus two)."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        first, *rest = textwrap.wrap(line.strip(), width - len(indent) - 2) or [""]
        out += [indent + first, *(indent + "  " + r for r in rest)]
    return out


def _gb3(n: int | float) -> str:
    """Bytes in GB to three significant digits, never in exponent form (``2.04e+03 GB`` was 2,040 GB)."""
    x = n / 1e9
    digits = max(0, 2 - int(math.floor(math.log10(abs(x))))) if x else 0
    return f"{x:,.{digits}f} GB"


def fit_line(r, command: str | None = None) -> str:
    """Whether the step fits one device's memory, and if not by how much and what would hold it; ``command``:
    the ``costmodel fit`` command to name (else one made of the model, the device and ``--inference``)."""
    mem, hw = r["memory"], r.get("time", {}).get("hardware", "the device")
    by = mem["fits_by"]
    need = r["memory_bytes"][by]
    if mem["fits"]:
        return (
            f"  fits one {hw}: {by} {need / 1e9:,.2f} GB of {mem['capacity_bytes'] / 1e9:,.2f} GB "
            f"({need / mem['capacity_bytes']:.0%})"
        )
    line = (
        f"  DOES NOT FIT one {hw}: {by} {need / 1e9:,.2f} GB of {mem['capacity_bytes'] / 1e9:,.2f} GB, "
        f"{mem['shortfall_bytes'] / 1e9:,.2f} GB short"
    )
    n = mem.get("zero3_devices_to_fit")
    if n:
        line += f"; ZeRO-3 over {units.devices(n)} would hold the states beside this micro-batch's activations"
    elif n == 0:
        line += "; the activations of this micro-batch alone overflow a device (recompute, TP/SP or a smaller batch)"
    if command is None:
        inference = " --inference" if "kv_cache" in r["memory_bytes"] else ""
        command = shlex.join(["costmodel", "fit", r["model"], "--hardware", hw]) + inference
    return line + f"; '{command}' names the smallest change that fits"


def memory_lines(r, fit_command: str | None = None) -> list[str]:
    """The memory part of the text report: one line per component, each naming its convention (wrapped);
    ``fit_command``: what a step that does not fit names (:func:`fit_line`)."""
    m, conv = r["memory_bytes"], r["memory"]["conventions"]
    inference = "kv_cache" in m
    title = "inference memory" if inference else "training memory"
    lines = [f"{title}, per device (decimal GB and binary GiB)"]
    keys = (
        ("params", "kv_cache", *(("state_cache",) if "state_cache" in m else ()), "activations", "total")
        if inference
        else ("params", "grads", "optimizer", "activations", "total")
    )
    for key in keys:
        lines += wrap(f"  {key:<12} {nbytes(m[key]):<26} ", conv.get(key, ""))
    if m.get("peak") is not None:
        lines += wrap(f"  {'peak':<12} {nbytes(m['peak']):<26} ", f"{conv['peak']}; at {r['memory']['peak_at']}")
    parts = m.get("parts", {})
    if parts:
        lines += wrap_items("  parts: ", [f"{k} {_gb3(v)}" for k, v in parts.items()])
    devices = r.get("time", {}).get("devices", 1)
    if devices > r["memory"].get("layout", {}).get("devices", 1) == 1:
        lines += wrap(
            "  note: ",
            f"this is one device holding the whole model; --devices {devices} spreads only "
            "the time. Give --dp/--tp/--pp (and --zero) to shard memory across them",
        )
    mem = r["memory"]
    if "capacity_bytes" in mem:
        lines.append(fit_line(r, fit_command))
    if "serving" in mem:  # the one rule of how many sequences fit: fit --inference's and roofline --decode's
        sv, hw = mem["serving"], r.get("time", {}).get("hardware", "the device")
        b = r["config"]["B"]
        lines += wrap(
            "  serving: ",
            f"a serving engine ({sv['inference_memory'].removeprefix('engine: ')}: the weights, one chunk's prefill and a reserve, the "
            f"rest of {sv['engine']['utilization'] if sv['engine'] else 0.9:g} × the memory in KV blocks) holds "
            f"{sv['sequences']:,} sequences of {sv['context']:,} tokens on one {hw}: B = {b} "
            + ("fits" if sv["fits"] else "does not fit")
            + " (as fit --inference and roofline --decode count; the lines above prefill all B prompts at once)",
        )
    comm = r.get("communication_bytes")
    if comm and comm["total"]:
        lines += wrap_items(
            "communication per step per device (ring collectives): ",
            [f"{k} {_gb3(v)}" for k, v in comm.items()],
        )
    return lines
