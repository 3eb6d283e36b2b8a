"""A serving run as text and as an HTML table: the answer first (latency percentiles, throughput, goodput, cost),
then what binds the step, then the engine's memory and the conventions.

Times are shown in the unit that reads best (``units.duration``); rates as rates. Nothing here computes: the verb
hands over ``{"model": ..., "serving": {...}}`` and this module only lays it out.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from .. import units

LATENCIES = (
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT (after the first token)"),
    ("tpot_incl_first_s", "TPOT (E2E / output tokens)"),
    ("itl_s", "ITL"),
    ("e2e_s", "E2E"),
)
STATS = ("mean", "p50", "p90", "p99")


def _t(x: object) -> str:
    if not isinstance(x, (int, float)) or x != x:
        return "-"
    return units.duration(float(x))


def _rate(x: object, unit: str) -> str:
    if not isinstance(x, (int, float)) or x != x:
        return "-"
    return f"{x:,.1f} {unit}" if x >= 10 else f"{x:.3g} {unit}"


def _usd(x: object) -> str:
    return "-" if not isinstance(x, (int, float)) else f"${x:,.3f}"


def lines(data: Mapping[str, object]) -> list[str]:
    """The text ``costmodel serve`` prints."""
    s = data["serving"]
    thr = s["throughput"]
    layout = s["layout"]
    dis = s.get("disaggregation")
    if dis:
        how = (
            f"{dis['prefill_instances']} prefill × tp {dis['prefill_tp']} + {dis['decode_instances']} decode × tp "
            f"{dis['decode_tp']}, disaggregated"
        )
    else:
        replicas = layout["replicas"]
        how = (
            f"tp {layout['tp']}{', ep ' + str(layout['ep']) if layout['ep'] > 1 else ''}"
            f"{', pp ' + str(layout['pp']) if layout.get('pp', 1) > 1 else ''}, "
            f"{replicas} replica{'s' if replicas > 1 else ''}"
        )
    out = [
        f"{data['model']} on {s['gpus']} × {s['hardware']} ({s['engine']} {s['engine_version']}, {how}): "
        f"{s['load']}, solver {s['solver']}",
    ]
    if s.get("saturated"):
        out.append(f"  SATURATED: {s.get('saturation') or 'the load is past what the replica sustains'}")
    width = max(len(label) for _, label in LATENCIES)
    out.append(f"  {'':{width}}  " + "  ".join(f"{h:>10}" for h in STATS))
    for key, label in LATENCIES:
        row = s.get(key) or {}
        out.append(f"  {label:{width}}  " + "  ".join(f"{_t(row.get(h)):>10}" for h in STATS))
    out.append(
        f"  throughput: {_rate(thr['output_tokens_per_s'], 'output tokens/s')} "
        f"({_rate(thr['output_tokens_per_s_per_gpu'], 'per GPU')}), "
        f"{_rate(thr['input_tokens_per_s'], 'input tokens/s')}, {_rate(thr['requests_per_s'], 'requests/s')}"
    )
    if "goodput" in s:
        g = s["goodput"]
        out.append(
            f"  goodput: {_rate(g['requests_per_s'], 'requests/s')} meet every SLO ({g['fraction']:.1%} of requests)"
        )
        for name, row in s.get("slo", {}).items():
            verdict = "met" if row["met"] else "MISSED"
            out.append(f"    {name}: {_t(row['value_s'])} against {_t(row['limit_s'])} ({verdict})")
    if s.get("max_rate_under_slo") is not None:
        out.append(f"  largest rate under the SLOs: {s['max_rate_under_slo']:.3g} requests/s")
    if s.get("cost_usd_per_million_output_tokens") is not None:
        out.append(
            f"  cost: {_usd(s['cost_usd_per_million_input_tokens'])} per M input tokens, "
            f"{_usd(s['cost_usd_per_million_output_tokens'])} per M output tokens ({s['price_source']})"
        )
    for phase, row in s["step_breakdown"].items():
        size = (
            f"batch {row['batch']} at context {row['context']:,}" if phase == "decode" else f"{row['tokens']:,} tokens"
        )
        parts = ", ".join(f"{k[:-2]} {_t(v)}" for k, v in row.items() if k.endswith("_s") and k != "step_s" and v)
        out.append(f"  {phase} step ({size}): {_t(row['step_s'])}, binds: {row['binds']} ({parts})")
    mem = s["memory"]
    out.append(
        f"  KV cache: {mem['num_blocks']:,} blocks of {mem['block_size']} tokens = {mem['kv_tokens']:,} tokens per "
        f"replica (weights {mem['weights_bytes'] / 1e9:.2f} GB, activations {mem['activation_bytes'] / 1e9:.2f} GB "
        f"per GPU at {mem['utilization']:g} utilisation)"
    )
    if dis:
        out.append(
            f"  KV transfer: {_t(dis['kv_transfer_s_mean_request'])} for the mean prompt over the {dis['link']}"
            f"{' (overlapped with the prefill)' if dis['kv_overlap'] else ''}; one prefill instance sustains "
            f"{dis['prefill_requests_per_s']:.3g} requests/s, one decode instance {dis['decode_requests_per_s']:.3g}: "
            f"balanced at {dis['decode_per_prefill']:.2f} decode per prefill"
        )
    a = s.get("analytic")
    if a:
        out.append(
            f"  analytic (means): TTFT {_t(a['ttft_s']['mean'])}, TPOT {_t(a['tpot_s']['mean'])}, "
            f"E2E {_t(a['e2e_s']['mean'])}, {_rate(a['throughput']['output_tokens_per_s'], 'output tokens/s')}"
            + (" (saturated)" if a.get("saturated") else "")
        )
    out.append(f"  calibration: {s['calibrated_for']}")
    for name, f in (s.get("formulas") or {}).items():
        out.append(f"  {name} = {f['expr']}")
    return out


def serving_html(data: Mapping[str, object]) -> str:
    """A table of a serving run for Jupyter."""
    rows = "".join(f"<tr><td><pre>{html.escape(line)}</pre></td></tr>" for line in lines(data))
    return f"<table><caption>costmodel serve: {html.escape(str(data['model']))}</caption>{rows}</table>"
