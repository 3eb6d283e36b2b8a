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
            f"{', pp ' + str(layout['pp']) if layout.get('pp', 1) > 1 else ''}"
            f"{', attention-dp ' + str(layout['attention_dp']) if layout.get('attention_dp', 1) > 1 else ''}, "
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


#: Pareto-front rows a serving plan's text shows at most.
FRONT_SHOWN = 16


def _layout(r: Mapping[str, object]) -> str:
    """A planner row's layout in a few words: ``tp 4 × 2`` or ``1×tp4 : 3×tp8``."""
    if r.get("disaggregated"):
        return f"{r['prefill_instances']}×tp{r['prefill_tp']} : {r['decode_instances']}×tp{r['decode_tp']}"
    return (
        f"tp {r['tp']}"
        + (f" pp {r['pp']}" if r.get("pp", 1) > 1 else "")
        + (f" dp {r['attention_dp']}" if r.get("attention_dp", 1) > 1 else "")
        + (f" ep {r['ep']}" if r.get("ep", 1) > 1 else "")
    )


def _plan_table(rows, hardware: bool = False) -> list[str]:
    """The rows as a table; ``hardware``: a column naming each row's device (a plan over several)."""
    width = max([len(str(r["hardware"])) for r in rows] + [8]) if hardware else 0
    column = "hardware".ljust(width) + " " if hardware else ""

    def dev(r) -> str:
        return f"{r['hardware']:<{width}} " if hardware else ""

    head = (
        f"{'#':>4} {column}{'layout':<16} {'devices':>7} {'seqs':>5} {'tokens':>6} {'goodput/s':>10} {'tok/s/GPU':>10} "
        f"{'tok/s/user':>10} {'TTFT':>9} {'TPOT':>9} {'$/M out':>8}"
    )
    out = [head]
    for r in rows:
        usd = r.get("usd_per_million_output_tokens")
        tokens = f"{r['max_num_batched_tokens']}{'+' if len(r.get('alike_engine_settings', ())) > 1 else ''}"
        out.append(
            f"{r['rank']:>4} {dev(r)}{_layout(r):<16} {r['devices']:>7} {r['max_num_seqs']:>5} {tokens:>6} "
            f"{r['goodput_requests_per_s']:>10.3g} {r['output_tokens_per_s_per_gpu']:>10,.1f} "
            f"{r['tokens_per_s_per_user']:>10,.1f} {_t(r['ttft_s']):>9} {_t(r['tpot_s']):>9} "
            f"{'-' if usd is None else f'${usd:,.3f}':>8}"
        )
    return out


def plan_lines(data: Mapping[str, object]) -> list[str]:
    """The text ``costmodel serve-plan`` prints: what was searched and left out, the ranked deployments, the
    Pareto front of output tokens/s per GPU against tokens/s per user."""
    s = data["serving_plan"]
    dev = s["devices"]
    span = f"{dev[0]}–{dev[-1]}" if len(dev) == 2 and dev[1] > dev[0] + 1 else ",".join(map(str, dev))
    slo = ", ".join(s["slo"]) or "none (capacity)"
    out = [
        f"{data['model']} on {span} × {', '.join(s['hardware'])} ({s['engine']}): {s['input_tokens']:,} prompt and "
        f"{s['output_tokens']:,} output tokens a request, SLOs {slo}",
        f"  {s['searched']:,} layouts searched, {s['fitting']:,} serve (goodput: the largest "
        f"rate whose analytic means meet the SLOs; ranked by {s['objective_label']})",
    ]
    for key, n in s["excluded"].items():
        out.append(f"  excluded {n:,}: {s['excluded_why'][key]}")
    several = len(s["hardware"]) > 1
    out += ["", *_plan_table(s["rows"], several)]
    if any(len(r.get("alike_engine_settings", ())) > 1 for r in s["rows"]):
        out.append(
            "  +: the same outcome at other max_num_seqs or max_num_batched_tokens searched, shown once "
            "(--json: alike_engine_settings)"
        )
    verified = [r for r in s["rows"] if r.get("verified")]
    if verified:
        out.append("  by the simulation at the goodput rate (percentiles):")
        for r in verified:
            v = r["verified"]
            out.append(
                f"  {r['rank']:>4} SLOs {'met' if v['slo_met'] else 'MISSED'}: TTFT p90 {_t(v['ttft_s']['p90'])}, "
                f"TPOT p99 {_t(v['tpot_s']['p99'])}, goodput {_rate(v['goodput_requests_per_s'], 'requests/s')}, "
                f"{_rate(v['output_tokens_per_s_per_gpu'], 'output tokens/s per GPU')}"
            )
    front = s["pareto"]
    shown = front
    if len(front) > FRONT_SHOWN:  # spread along the front; --json has every point
        shown = [
            front[i] for i in sorted({round(k * (len(front) - 1) / (FRONT_SHOWN - 1)) for k in range(FRONT_SHOWN)})
        ]
    note = f", {len(shown)} of them spread along it (--json has all)" if len(shown) < len(front) else ""
    out += ["", f"Pareto front (output tokens/s per GPU against tokens/s per user): {len(front)} layouts{note}"]
    out += _plan_table(shown, several)
    return out


def plan_html(data: Mapping[str, object]) -> str:
    """A serving plan's text as a table for Jupyter."""
    rows = "".join(f"<tr><td><pre>{html.escape(line)}</pre></td></tr>" for line in plan_lines(data))
    return f"<table><caption>costmodel serve-plan: {html.escape(str(data['model']))}</caption>{rows}</table>"


def serve_plan_chart(result: Mapping[str, object], path) -> object:
    """Output tokens/s per GPU against tokens/s per user of a ``costmodel serve-plan`` result's layouts
    (``chart`` when the plan kept them all, else ``rows``): replicas grey, disaggregated pools blue, the Pareto
    front joined in red, its two ends and the best-ranked layout named. Returns the Figure (``render.plot``'s
    conventions: matplotlib only inside, the file written atomically, SVG text kept as text)."""
    from .plot import PLAN_OFFSETS, _place, _pyplot, _save, check_path  # the charts' machinery (matplotlib inside)

    path = check_path(path)
    s = result["serving_plan"]
    rows = list(result.get("chart") or s["rows"])
    front = sorted(s["pareto"], key=lambda r: r["tokens_per_s_per_user"])
    if not rows:
        from ..errors import CostModelError  # only when there is nothing to draw

        raise CostModelError("serve-plan chart: no layout serves under the SLOs, nothing to draw")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    for disagg, colour, label in ((False, "tab:gray", "replicas"), (True, "tab:blue", "prefill:decode pools")):
        mine = [r for r in rows if bool(r.get("disaggregated")) == disagg]
        if mine:
            ax.scatter(
                [r["tokens_per_s_per_user"] for r in mine],
                [r["output_tokens_per_s_per_gpu"] for r in mine],
                s=14,
                color=colour,
                alpha=0.6,
                zorder=2,
                label=f"{len(mine):,} {label}",
            )
    ax.plot(
        [r["tokens_per_s_per_user"] for r in front],
        [r["output_tokens_per_s_per_gpu"] for r in front],
        color="tab:red",
        marker="o",
        ms=5,
        lw=1.5,
        zorder=3,
        drawstyle="steps-pre",
        label=f"Pareto front ({units.plural(len(front), 'layout')})",
    )
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU (at the goodput rate)")
    slo = ", ".join(s["slo"]) or "no SLO"
    ax.set_title(f"{result['model']} on {', '.join(s['hardware'])} ({s['engine']}, {slo})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    named = [("best ranked", s["rows"][0])] if s["rows"] else []
    if front:
        named += [
            ("most per GPU", max(front, key=lambda r: r["output_tokens_per_s_per_gpu"])),
            ("fastest per user", front[-1]),
        ]
    seen, labels = set(), []
    for what, r in named:
        key = f"{_layout(r)}, seqs {r['max_num_seqs']}, tokens {r['max_num_batched_tokens']}"
        if key in seen:
            continue
        seen.add(key)
        x, y = r["tokens_per_s_per_user"], r["output_tokens_per_s_per_gpu"]
        labels.append((f"{what}: {y:,.0f} tok/s/GPU, {x:,.1f} tok/s/user\n{key}", x, y))
        ax.scatter([x], [y], s=60, facecolors="none", edgecolors="black", zorder=4)
    points = [(r["tokens_per_s_per_user"], r["output_tokens_per_s_per_gpu"]) for r in front]  # the front kept clear
    _place(fig, ax, labels, PLAN_OFFSETS, avoid=points, arrows=True)
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig
