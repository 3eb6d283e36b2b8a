"""Where the serving validation's error comes from: the errors of :mod:`costmodel.serving.validation` grouped by
what a run was (its collection: device, engine and version, model, weights), by concurrency and by output length,
and the throughput each collection's runs imply against the device's dense peak.

**Implied share of the peak.** A run of concurrency C and mean end-to-end latency E2E serves C/E2E requests a
second (Little's law); a request's matmul FLOPs on one device, ``F``, are the step model's (its prompt as one
chunk, then O decodes at the middle context, :meth:`~costmodel.serving.step.StepModel.step_flops` with
``matmul=True``: exact, a multiply-add 2 FLOPs). ``(C/E2E)·F / peak`` is the share of the device's dense peak in
the run's weight format that the measured throughput needs, whatever the engine overlaps: a share near or above
the GEMM curve's efficiency (0.875 of the peak on Hopper in the device table) is a run no step model with one
engine's kernel speed for the fit slice can reach.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from ..devices.table import device
from .measured import Run
from .profiles import profile

#: Concurrency buckets of the by-concurrency table (a run's C in [lo, hi)).
CONCURRENCY = ((1, 16), (16, 64), (64, 128), (128, 256), (256, 4096))


def implied_peak_share(r: Run, step) -> float:
    """The share of ``r``'s device's dense peak its measured throughput needs (see the module notes)."""
    P, O = r.input_tokens, r.output_tokens
    flops = step.step_flops([(P, 0)], matmul=True) + O * step.step_flops([(1, P + O // 2)], matmul=True)
    peak = float(device(r.hardware).peak("fp8" if r.weights_dtype == "fp8" else "bf16"))
    return r.concurrency / r.e2e_s * flops / peak


def attainable_share(r: Run) -> float:
    """The largest share of the dense peak a GEMM reaches on ``r``'s device in its weight format: the
    efficiency (the asymptote) of the device table's attained-rate curve for it (fp8's where the table has one,
    else bf16's, as the step uses)."""
    dtype = "fp8" if r.weights_dtype == "fp8" else "bf16"
    return float(device(r.hardware).attained.curve(dtype).efficiency)


def above_peak(r: Run, step) -> bool:
    """Whether ``r``'s measured throughput needs its matmuls to run faster than any GEMM on its device does
    (:func:`implied_peak_share` above :func:`attainable_share`): a run no step model can reach, whatever the
    engine overlaps, since its matmul FLOPs alone would take longer than the time measured."""
    return implied_peak_share(r, step) > attainable_share(r)


def collection(r: Run) -> tuple:
    """A run's collection: device, engine and version, model and weights (runs taken together by the source)."""
    return (r.hardware, f"{r.engine} {r.engine_version}".strip(), r.model, r.weights_dtype)


def _bucket(c: int) -> int:
    """The lower end of the concurrency bucket holding ``c``."""
    return next(lo for lo, hi in CONCURRENCY if lo <= c < hi)


def _shown_bucket(lo: int) -> str:
    hi = dict(CONCURRENCY)[lo]
    return f"{lo}–{hi - 1}"


def grouped(rows: Sequence[Run], errs: Sequence[dict], key: Callable[[Run], tuple]) -> list[tuple[tuple, dict]]:
    """Per value of ``key``: runs, and per metric the mean absolute and the mean signed % error."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r, e in zip(rows, errs):
        groups[key(r)].append(e)
    out = []
    for k in sorted(groups, key=lambda k: tuple((0, x, "") if isinstance(x, int) else (1, 0, str(x)) for x in k)):
        es = groups[k]
        stats = {"n": len(es)}
        for m in ("ttft", "tpot", "e2e"):
            v = np.array([e[m] for e in es])
            stats[m] = (float(np.abs(v).mean()), float(v.mean()))
        out.append((k, stats))
    return out


def _cells(stats: dict) -> str:
    return " | ".join(f"{a:.1f} ({s:+.1f})" for a, s in (stats[m] for m in ("ttft", "tpot", "e2e")))


def render(rows: Sequence[Run], errs: Sequence[dict], replica, fit_slice: tuple[str, str]) -> list[str]:
    """The page's section: by collection (with the implied peak shares), and the held-out runs by concurrency and
    by output length. ``replica(setting, profile)`` gives a setting's (step, limits)."""
    shares: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        step, _ = replica(r.setting, profile(r.engine))
        shares[collection(r)].append(implied_peak_share(r, step))
    lines = [
        "## Where the error comes from",
        "",
        "Mean absolute % error per group, the mean signed error in brackets (+: predicted too high); *peak share*: "
        "the median and largest share of the device's dense peak (in the run's weight format) that each run's "
        "measured throughput needs, (C/E2E)·F/peak, F a request's matmul FLOPs on one device "
        "(costmodel/serving/error_slices.py).",
        "",
        "| slice | device | engine | model | weights | runs | TTFT | TPOT | E2E | peak share (median, max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    fit_field, fit_value = fit_slice
    for k, stats in grouped(rows, errs, collection):
        s = sorted(shares[k])
        where = "fit" if (fit_field == "hardware" and k[0] == fit_value) else "held out"
        lines.append(
            f"| {where} | {' | '.join(k)} | {stats['n']} | {_cells(stats)} | {s[len(s) // 2]:.2f}, {s[-1]:.2f} |"
        )
    held = [(r, e) for r, e in zip(rows, errs) if str(getattr(r, fit_field)) != fit_value]
    for title, key, show in (
        ("concurrency", lambda r: (r.hardware, r.engine, _bucket(r.concurrency)), _shown_bucket),
        ("output tokens", lambda r: (r.hardware, r.engine, r.output_tokens), str),
    ):
        lines += [
            "",
            f"Held-out runs by {title}:",
            "",
            f"| device | engine | {title} | runs | TTFT | TPOT | E2E |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, stats in grouped([r for r, _ in held], [e for _, e in held], key):
            lines.append(f"| {k[0]} | {k[1]} | {show(k[2])} | {stats['n']} | {_cells(stats)} |")
    return lines
