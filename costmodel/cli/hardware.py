"""``costmodel hardware``: the device table with ridge points (and the time lines of ``estimate``)."""

from __future__ import annotations

import argparse
import json

import costmodel
from costmodel import units

from ._common import sci

#: Columns of the table, in this order.
#: The dtypes the table shows within 100 columns (fp32 and fp6 in --json and 'costmodel hardware NAME').
SHOWN = ("bf16", "fp16", "fp8", "fp4", "tf32")


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hardware",
        help="list accelerators: peak FLOP/s, memory, bandwidth, ridge point",
        description="Accelerators with dense peak FLOP/s per dtype, memory, bandwidth (decimal "
        "units, interconnect per direction) and the ridge point peak/bandwidth.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="show one device with the source of each number")
    p.add_argument("--file", metavar="FILE", help="also read devices from a .toml/.json file (validated)")
    p.add_argument("--json", action="store_true", help="exact numbers and the source of each")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    table = costmodel.hardware(file=args.file)
    if args.name is not None:
        one = costmodel.hardware(args.name, file=args.file)
        table = {one.name: one}
        if not args.json:
            print(detail(one))
            return 0
    if args.json:
        out = {}
        for name, d in table.items():
            out[name] = {
                "about": d.about,
                "peak_flops": {k: int(v) for k, v in d.peak_flops.items()},
                "memory_bytes": int(d.memory_bytes),
                "memory_bandwidth": int(d.memory_bandwidth),
                "scale_up_bandwidth": None if d.scale_up_bandwidth is None else int(d.scale_up_bandwidth),
                "scale_out_bandwidth": None if d.scale_out_bandwidth is None else int(d.scale_out_bandwidth),
                "ridge": {k: float(d.ridge(k)) for k in d.peak_flops},
                "sources": dict(d.sources),
                # the calibrated step's share of the kernels' rates: the default, and per software stack (--stack)
                "sustained": {
                    "default": float(d.attained.sustained),
                    "stacks": {
                        st.name: {
                            "sustained": float(st.sustained),
                            "source": st.source,
                            "fitted_on": list(st.fitted_on),
                        }
                        for st in d.attained.stacks.values()
                    },
                },
            }
        print(
            json.dumps(
                {"conventions": "dense peaks; decimal bytes; interconnect per device per direction", "devices": out},
                indent=2,
                allow_nan=False,
            )
        )
        return 0
    print(
        "dense peak TFLOP/s per dtype; memory GB and TB/s (decimal); links GB/s per direction;\n"
        "ridge = peak/bandwidth (FLOPs/byte)"
    )
    w = max(11, *(len(n) + 1 for n in table))  # the longest name and a space
    print(
        f"{'name':<{w}}"
        + "".join(f"{dt:>8}" for dt in SHOWN)
        + f"{'mem GB':>8}{'TB/s':>7}{'up GB/s':>9}{'out GB/s':>9}{'ridge':>7}"
    )
    for name, d in table.items():
        peaks = "".join(
            f"{float(d.peak_flops[dt]) / 1e12:>8.1f}" if dt in d.peak_flops else f"{'-':>8}" for dt in SHOWN
        )
        links = "".join(
            f"{float(b) / 1e9:>9.1f}" if b is not None else f"{'-':>9}"
            for b in (d.scale_up_bandwidth, d.scale_out_bandwidth)
        )
        dt = d.default_dtype()
        ridge = f"{float(d.ridge(dt)):>7.0f}" + ("" if dt == "bf16" else f" ({dt})")
        print(
            f"{name:<{w}}{peaks}{float(d.memory_bytes) / 1e9:>8.0f}{float(d.memory_bandwidth) / 1e12:>7.2f}"
            f"{links}{ridge}"
        )
    return 0


def detail(d) -> str:
    """One device, every number with its source."""
    src = d.sources
    lines = [f"{d.name}: {d.about}"]
    for dt, v in d.peak_flops.items():
        lines.append(
            f"  peak {dt:<5} {float(v) / 1e12:>9,.1f} TFLOP/s dense   ridge {float(d.ridge(dt)):,.1f} FLOPs/byte"
        )
    lines.append(f"    source: {src.get('peak_flops', '-')}")
    lines.append(f"  memory      {float(d.memory_bytes) / 1e9:,.1f} GB at {float(d.memory_bandwidth) / 1e12:,.3f} TB/s")
    lines.append(f"    source: {src.get('memory', '-')}")
    for scope in ("scale_up", "scale_out"):
        bw = getattr(d, f"{scope}_bandwidth")
        shown = "-" if bw is None else f"{float(bw) / 1e9:,.1f} GB/s per direction"
        lines.append(f"  {scope:<11} {shown}")
        lines.append(f"    source: {src.get(scope, '-')}")
    stacks = d.attained.stacks
    if stacks:  # the calibrated step's sustained factor: the default, and one per software stack (--stack)
        lines.append(f"  sustained   {float(d.attained.sustained):g} by default; per software stack (--stack NAME):")
        for st in stacks.values():
            lines.append(f"    {st.name:<20} {float(st.sustained):g}, fitted on {len(st.fitted_on)} runs")
    return "\n".join(lines)


def time_text(r: dict) -> list[str]:
    """The time lines of ``costmodel estimate`` text output (durations in the unit a person says)."""
    t = r["time"]
    where = f"{units.devices(t['devices'])} × {t['hardware']}"
    caveat = (
        []
        if t.get("fits", True)
        else [
            f"  NOTE: these times are for a step that does not fit in {t['hardware']}'s memory (see above): it cannot "
            "run as given"
        ]
    )
    if "ttft_s" in t:  # an inference estimate
        return [
            f"time on {where} ({t['dtype']}), roofline bound, context {t['context']:,}",
            *caveat,
            f"  time to first token (prefill)  {units.duration(t['ttft_s'])}",
            f"  decode step ({t['decode_bound']}-bound)  {units.duration(t['decode_step_s'])}  "
            f"({t['decode_tokens_per_s']:,.0f} tokens/s)"
            + (
                f"; ${t['cost_per_million_tokens_usd']:,.2f} per million tokens"
                if "cost_per_million_tokens_usd" in t
                else ""
            ),
        ]
    basis = t["basis"]
    if basis == "achieved":
        how = f"at {t['achieved_flops'] / 1e12:,.0f} TFLOP/s achieved per device"
    elif basis == "mfu":
        how = f"at MFU {r['mfu']:.1%}"
    elif basis == "measured":
        how = f"at the measured {t['tokens_per_s']:,.0f} tokens/s"
    elif basis == "calibrated":
        stack = f"; the {t['stack']} stack's sustained factor" if "stack" in t else ""
        how = (
            f"predicted (calibrated: attained rates, network tiers, overlap, schedule; {t['efficiency_source']}{stack})"
        )
    else:
        how = "at the roofline bound (each op's max(FLOPs/peak, bytes/bandwidth), summed)"
    mfu_basis = {"engine": "the engine's FLOPs", "6n": "PaLM's 6N", "6n-attention": "PaLM's 6N + 12·L·H·Q·T"}
    lines = [
        f"time on {where} ({t['dtype']} peak {sci(t['peak_flops'])} FLOP/s)",
        f"  {how}",
        *caveat,
        f"  step          {units.duration(t['step_s'])}  ({t['tokens_per_s']:,.0f} tokens/s; "
        f"roofline bound {units.duration(t['roofline_step_s'])})"
        + (f"; ${t['step_cost_usd']:,.4g} a step" if "step_cost_usd" in t else ""),
        f"  utilisation   MFU {r['mfu']:.1%}  HFU {r['hfu']:.1%} (model FLOPs: "
        f"{mfu_basis.get(t.get('mfu_basis', 'engine'))})",
    ]
    if basis == "calibrated":
        b = t["breakdown"]
        lines.append(
            f"  parts         compute {units.duration(b['compute_s'])} + exposed communication "
            f"{units.duration(b['exposed_communication_s'])} + bubble {units.duration(b['bubble_s'])} + optimizer "
            f"{units.duration(b['optimizer_s'])}; hidden communication {units.duration(b['hidden_communication_s'])} "
            f"(overlapped: {t['overlap_comm']})"
        )
    elif t["comm_s"]:
        lines.append(
            f"  communication {units.duration(t['comm_s'])} ({'overlapped' if t['overlap'] else 'not overlapped'})"
        )
    if "price_source" in t:
        lines.append(f"  price         {t['price_source']}")
    if "training_s" in t:
        lines.append(
            f"  training      {units.duration(t['training_s'])}  ({t['training_s']:.3g} s; "
            f"{t['gpu_hours']:,.0f} device-hours"
            + (f", ${t['cost_usd']:,.0f}" if "cost_usd" in t else "")
            + ")"
            + ("" if t.get("fits", True) else " (does not fit: see above)")
        )
        if "six_nd_training_s" in t:
            lines.append(f"  6ND only      {units.duration(t['six_nd_training_s'])} (the back-of-envelope count)")
    return lines
