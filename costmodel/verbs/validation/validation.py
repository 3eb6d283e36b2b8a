"""Predicted against measured: the runs of ``costmodel/devices/data/measured_runs.json`` through ``estimate``.

Each run names a model (a family with settings, or a preset), the options of :func:`~costmodel.sections.run.
estimate`, a device (a table name, or a base device with numbers overridden: a cluster's own network) and what
was measured: an iteration time, or a throughput per device with the FLOP formula its source used, which gives
the iteration time (:data:`FORMULAS`). :func:`validate` predicts each and returns the error,
``predicted / measured − 1``; ``docs/validation.md`` is generated from it.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources

from ...devices.table import builtin, parse_device
from ...errors import CostModelError
from ...families import load
from ...symbols import SYMBOLS
from ..estimate import estimate
from .why import why


def _megatron_eq3(run: Mapping) -> float:
    """Narayanan et al. 2021, Eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh) FLOPs per iteration (full recompute)."""
    s, o = run["model"]["settings"], run["options"]
    B, T, l, h, V = o["batch"], o["seq"], s["L"], s["d"], s["V"]
    return 96 * B * T * l * h**2 * (1 + T / (6 * h) + V / (16 * l * h))


def _palm(run: Mapping) -> float:
    """Chowdhery et al. 2022 (PaLM), App. B: (6N + 12·L·H·Q·T) FLOPs per token, N the stated parameters."""
    m = load(run["model"]["preset"], run["model"].get("settings") or None)
    L, d = (int(m.values[k]) for k in _symbols("L", "d"))
    T, B = run["options"]["seq"], run["options"]["batch"]
    return B * T * (6 * run["measured"]["params"] + 12 * L * d * T)


def _symbols(*names):
    return [SYMBOLS[n] for n in names]


#: FLOP formulas that turn a source's TFLOP/s per device into its iteration time.
FORMULAS = {"megatron-eq3": _megatron_eq3, "palm-6n": _palm}


def measured(part: str):
    """``runs``, ``skipped`` (runs not predicted, each with the reason) or ``stacks`` of measured_runs.json."""
    text = resources.files("costmodel").joinpath("devices/data/measured_runs.json").read_text(encoding="utf-8")
    return json.loads(text)[part]


def runs() -> list[dict]:
    """The measured runs, as stored."""
    return measured("runs")


def default_sustained(device: str) -> float:
    """The sustained factor of a built-in device's table entry (its default, without ``--stack``)."""
    return float(builtin()[device].attained.sustained)


def measured_step(run: Mapping) -> float:
    """The measured iteration time in seconds: given, from tokens/s per device (batch × seq tokens an iteration),
    or from a TFLOP/s per device through its source's FLOP formula."""
    m = run["measured"]
    if "step_s" in m:
        return float(m["step_s"])
    if "tokens_per_gpu_s" in m:
        o = run["options"]
        return o["batch"] * o["seq"] / (m["tokens_per_gpu_s"] * run["devices"])
    if m.get("flops_formula") not in FORMULAS:
        raise CostModelError(
            f"run {run['id']}: measured needs step_s, tokens_per_gpu_s, or tflops_per_gpu with a flops_formula of "
            f"{', '.join(FORMULAS)}"
        )
    return FORMULAS[m["flops_formula"]](run) / (m["tflops_per_gpu"] * 1e12 * run["devices"])


def hardware(run: Mapping):
    """The run's device: a table name, or ``{"base": name, <field>: <number>...}`` (a cluster's own numbers)."""
    hw = run["hardware"]
    if isinstance(hw, str):
        return hw
    base = dict(hw)
    name = base.pop("base")
    sustained = base.pop("sustained", None)  # a refitted factor (leave_one_out, leave_one_source_out): the table's
    text = resources.files("costmodel").joinpath("devices/data/hardware.json").read_text(encoding="utf-8")
    entry = copy.deepcopy(json.loads(text)["devices"][name])
    entry.update(base)
    if sustained is not None:
        entry["efficiency"]["sustained"] = sustained
    if name not in builtin():
        raise CostModelError(f"run {run['id']}: unknown base device {name!r}")
    return parse_device(f"{name} ({run['id']})", entry, "measured_runs.json")


def options(run: Mapping, time_model: str | None = None) -> dict[str, object]:
    """The estimate options of a run (``time_model="roofline"``: the bound instead of the calibrated step)."""
    out = dict(run["options"])
    if out.get("overlap_comm") == "none":
        out["overlap_comm"] = ()
    out.update(hardware=hardware(run), devices=run["devices"])
    if time_model is not None:
        out["time_model"] = time_model
    return out


def model(run: Mapping) -> tuple[str, dict]:
    """The preset (or family) name and the settings of a measured run."""
    spec = run["model"]
    return spec.get("preset") or spec["family"], dict(spec.get("settings") or {})


@dataclass(frozen=True)
class Row:
    """One run: predicted and measured iteration time, the error, the prediction's parts."""

    run: Mapping
    predicted: float
    measured: float
    mfu: float
    roofline: float
    breakdown: Mapping[str, float]

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def in_sample(self) -> bool:
        """Whether the run calibrated its device's sustained factor (:func:`fit_sustained`)."""
        return bool(self.run.get("calibrates"))


def predict(run: Mapping) -> Row:
    """The estimate's calibrated step of a measured run, beside the measured step."""
    name, settings = model(run)
    r = estimate(name, settings=settings, **options(run))
    t = r["time"]
    return Row(run, t["step_s"], measured_step(run), r["mfu"], t["roofline_step_s"], dict(t.get("breakdown", {})))


def validate(selected: Iterable[Mapping] | None = None) -> list[Row]:
    """Predict every run (or ``selected``)."""
    return [predict(run) for run in (runs() if selected is None else selected)]


def summary(rows: Iterable[Row]) -> dict[str, dict[str, float]]:
    """Per group: runs, mean |error| and max |error| (shares, not percent), whether it is in-sample."""
    out: dict[str, list[Row]] = {}
    for row in rows:
        out.setdefault(row.run["group"], []).append(row)
    return {
        g: {
            "runs": len(rs),
            "mean": sum(abs(r.error) for r in rs) / len(rs),
            "max": max(abs(r.error) for r in rs),
            "in_sample": all(r.in_sample for r in rs),
        }
        for g, rs in out.items()
    }


def fit_sustained(rows: Iterable[Row], current: float = 1.0) -> float:
    """The sustained factor that centres ``rows`` (predicted with ``current``): ``current`` × the geometric mean
    of predicted/measured. One pass is exact for a compute-bound step (time ∝ 1/sustained); communication,
    which the factor does not scale, leaves a residual well under a percent for the calibration runs."""
    rows = list(rows)
    if not rows:
        raise CostModelError("fit_sustained: expected at least one run, received none")
    return current * math.exp(sum(math.log(r.predicted / r.measured) for r in rows) / len(rows))


def device_name(run: Mapping) -> str:
    """The table name of a run's device (its base where the run overrides numbers)."""
    hw = run["hardware"]
    return hw if isinstance(hw, str) else hw["base"]


def with_sustained(run: Mapping, sustained: float) -> dict:
    """A copy of ``run`` whose device sustains ``sustained`` (written to four decimals, as the table's)."""
    out = copy.deepcopy(dict(run))
    hw = out["hardware"]
    out["hardware"] = {**({"base": hw} if isinstance(hw, str) else hw), "sustained": f"{sustained:.4f}"}
    return out


@dataclass(frozen=True)
class Refit:
    """A run predicted with a sustained factor fitted on other runs (``fitted_on`` says which)."""

    row: Row
    sustained: float
    fitted_on: str


def leave_one_out(rows: Iterable[Row]) -> list[Refit]:
    """Each in-sample run predicted with its device's sustained factor refitted on that device's *other*
    in-sample runs (:func:`fit_sustained`, one pass from the table's factor): the in-sample errors made honest."""
    by_device: dict[str, list[Row]] = {}
    for r in rows:
        if r.in_sample:
            by_device.setdefault(device_name(r.run), []).append(r)
    out = []
    for name, rs in by_device.items():
        current = default_sustained(name)
        for r in rs:
            s = fit_sustained([x for x in rs if x is not r], current)
            out.append(Refit(predict(with_sustained(r.run, s)), s, f"the other {len(rs) - 1} in-sample runs"))
    return out


#: Mean and max |error| per group when ``docs/validation.md`` was last generated (shares): a test fails when a
#: mean grows past its record (``tests/verbs/test_validation.py``).
RECORDED: dict[str, tuple[float, float]] = {
    "korthikanti22-table5": (0.0236, 0.0473),
    "korthikanti22-dp": (0.0711, 0.0711),
    "narayanan21-table1": (0.0568, 0.1018),
    "other-a100": (0.2486, 0.2823),
    "megascale-baseline": (0.0783, 0.1459),
    "dgxc-h100-bf16": (0.0436, 0.1089),
    "llama3-405b": (0.1546, 0.2406),
    "megatron-bridge-25.11": (0.4237, 0.5419),  # 46.92 % / 72.35 % before the experts' own dp group
    "megatron-bridge-25.11-fp8-dense": (0.1667, 0.2981),
    "megatron-bridge-25.11-fp8-moe": (0.6039, 0.7604),
}


#: Mean and max |error| pooled over the runs outside Korthikanti et al.'s Table 5 (:func:`pooled`), when
#: ``docs/validation.md`` was last generated.
RECORDED_POOLED: dict[str, tuple[float, float]] = {
    # with Megatron-Bridge 25.11's FP8 rows (8 dense: 16.7 % mean; 5 MoE: 60.4 %), predictable once fp8 matmuls
    # run at the fp8 peak; before them 11.19 % / 72.35 % over 49 runs, 15.33 % / 72.35 % over 30 (and before the
    # BF16 Megatron-Bridge rows 8.02 % / 28.23 % over 45, 10.48 % / 28.23 % over 26)
    "every run but Table 5": (0.1557, 0.7604),
    "held-out runs": (0.2040, 0.7604),
    # every run out of sample, with its stack's factor refitted without its source (stacks.POOLS)
    # (before the FP8 rows: 9.15 % / 72.35 % and 12.00 % / 72.35 %; before any Megatron-Bridge row 5.79 % / 24.06 %
    # and 6.62 % / 24.06 %)
    "every run but Table 5, by stack": (0.1396, 0.7604),
    "held-out runs, by stack": (0.1807, 0.7604),
}


def percent(x: float) -> str:
    """An error as the document prints it: ``+6.5%``."""
    return f"{100 * x:+.1f}%"


#: The group of the issue's first target (mean |error| <= 3.5 %); every other run has the second (<= 10 %).
TABLE5 = "korthikanti22-table5"


def pooled(rows: Iterable[Row], loo: Iterable[Refit] = ()) -> dict[str, dict[str, float]]:
    """Runs, mean and max |error| over every run outside :data:`TABLE5` (an in-sample run with its error left
    out of its own fit where ``loo`` has it, :func:`leave_one_out`) and over the held-out runs alone."""
    honest = {r.row.run["id"]: r.row.error for r in loo}
    other = [r for r in rows if r.run["group"] != TABLE5]
    sets = {
        "every run but Table 5": [honest.get(r.run["id"], r.error) for r in other],
        "held-out runs": [r.error for r in other if not r.in_sample],
    }
    return {
        k: {"runs": len(v), "mean": sum(map(abs, v)) / len(v), "max": max(map(abs, v))} for k, v in sets.items() if v
    }


#: Mean and max |error| per in-sample group with each run left out of its own fit (:func:`leave_one_out`).
RECORDED_LOO: dict[str, tuple[float, float]] = {
    "korthikanti22-table5": (0.0208, 0.0555),
    "dgxc-h100-bf16": (0.0465, 0.0958),
}


def render(
    rows: Iterable[Row], loo: Iterable[Refit] = (), stacks: Iterable[Refit] = (), by_stack: Iterable[str] = ()
) -> str:
    """``docs/validation.md``: every run predicted against measured, per-group mean and max error; with ``loo``
    (:func:`leave_one_out`), ``stacks`` (the DeepSpeed runs' leave-one-source-out refits) and ``by_stack`` (the
    lines of :func:`.stacks.render`), those sections too."""
    rows, loo, stacks = list(rows), list(loo), list(stacks)
    pct = percent
    out = [
        "# Validation: predicted against measured step times",
        "",
        "Generated by `python -m costmodel.verbs.validation --write docs/validation.md` from "
        "`costmodel/devices/data/measured_runs.json` (each run with its source, status and assumptions). "
        "The prediction is `costmodel estimate` on the calibrated basis (no rate given): attained GEMM and "
        "memory rates from each device's measured curves, collectives on their network tier, the pipeline "
        "schedule's bubble, the optimizer step. Error = predicted / measured − 1.",
        "",
        "**In-sample runs.** One number per device is fitted to measured steps: `sustained`, the share of "
        "the kernels' benchmark rates a training step sustains (`costmodel/devices/data/hardware.json`). "
        "Runs marked *in-sample* are the ones it was fitted to (A100: Korthikanti et al. 2022 Table 5; "
        "H100: NVIDIA's DGX Cloud recipes); every other run is held out. The tables up to 'Software stacks' "
        "use this default for every run; that section fits a factor per software stack and predicts every run "
        "out of sample.",
        "",
        "## Summary",
        "",
        "| group | runs | mean abs error | max abs error | in-sample |",
        "|---|---|---|---|---|",
    ]
    for g, s in summary(rows).items():
        out.append(
            f"| {g} | {s['runs']} | {100 * s['mean']:.2f}% | {100 * s['max']:.2f}% | "
            f"{'yes' if s['in_sample'] else 'no'} |"
        )
    if loo:
        out += [
            "",
            "**Every other run.** The second target (mean |error| <= 10 % over every run outside Korthikanti et "
            "al.'s Table 5), pooled: over all of them, each in-sample DGX Cloud run with its error left out of "
            "its own fit (below), and over the held-out runs alone.",
            "",
            "| runs | count | mean abs error | max abs error |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {k} | {p['runs']} | {100 * p['mean']:.2f}% | {100 * p['max']:.2f}% |"
            for k, p in pooled(rows, loo).items()
        ]
        out += [
            "",
            "## Leave one out: the in-sample errors made honest",
            "",
            "Each in-sample run predicted with its device's `sustained` refitted on that device's *other* "
            "in-sample runs (`leave_one_out`), so that no run is predicted with a factor it helped to fit.",
            "",
            "| group | runs | mean abs error | max abs error | in-sample (all runs) mean |",
            "|---|---|---|---|---|",
        ]
        full = summary(rows)
        for name in sorted({device_name(r.row.run) for r in loo}):
            fits = [r.sustained for r in loo if device_name(r.row.run) == name]
            out.insert(
                -3,
                f"{name}: the refitted factors lie in {min(fits):.4f}-{max(fits):.4f}; the table's `sustained` is "
                f"{default_sustained(name):g}, fitted before and not quite the geometric centre of "
                "its in-sample runs.",
            )
            out.insert(-3, "")
        for g, s in summary(r.row for r in loo).items():
            out.append(
                f"| {g} | {s['runs']} | {100 * s['mean']:.2f}% | {100 * s['max']:.2f}% | {100 * full[g]['mean']:.2f}% |"
            )
        out += ["", "| run | sustained refitted | predicted s | measured s | error |", "|---|---|---|---|---|"]
        out += [
            f"| {r.row.run['id']} | {r.sustained:.4f} | {r.row.predicted:.4g} | {r.row.measured:.4g} | "
            f"{pct(r.row.error)} |"
            for r in loo
        ]
    out += list(by_stack)
    out += why(rows, stacks, pct, lambda run: FORMULAS["megatron-eq3"](run))
    out += [
        "",
        "## Runs",
        "",
        "| run | devices | measured s | predicted s | error | roofline s | MFU predicted | Calculon s | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        calc = r.run.get("baselines", {}).get("calculon_s")
        out.append(
            f"| {r.run['id']}{' (in-sample)' if r.in_sample else ''} | {r.run['devices']} | "
            f"{r.measured:.4g} | {r.predicted:.4g} | {pct(r.error)} | {r.roofline:.4g} | {100 * r.mfu:.1f}% | "
            f"{'' if calc is None else calc} | {r.run['status']} |"
        )
    out += ["", "## Sources and FLOP conventions", ""]
    for r in rows:
        out.append(
            f"- **{r.run['id']}**: {r.run['source']}. FLOP convention: {r.run['flop_convention']}."
            + (f" Assumptions: {'; '.join(r.run.get('assumptions', []))}." if r.run.get("assumptions") else "")
        )
    out += ["", "## Collected, not predicted", ""]
    out += [f"- {s['what']}: {s['why']}." for s in measured("skipped")]
    return "\n".join(out) + "\n"
