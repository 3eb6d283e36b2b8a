"""Serving predictions against measured runs (:mod:`costmodel.serving.measured`): the fit of an engine's factors on
one slice and the errors on the slices held out. ``python -m costmodel.serving.validation`` writes
docs/serving-validation.md (``--fit`` fits first and writes the factors into ``data/engines.json``; ``--solver des``
adds the errors of the simulated closed loop, the source's protocol replayed by :func:`replay`).

**What is predicted.** Each run is a closed loop of ``C`` users with fixed prompt and output lengths (the source's
experiment, :func:`~costmodel.serving.measured.sources`), answered by the analytic solver
(:meth:`~costmodel.serving.analytic.Solver.closed_loop`) over the step that ``costmodel serve`` builds: the model
at the run's weight format and tp, the KV blocks the engine allocates, the engine profile's overheads and factors.
Compared: mean TTFT, mean TPOT (after the first token), E2E = TTFT + (O − 1)·TPOT, and per setting (model, device,
engine, weights, tp, lengths) the largest output tokens/s over the concurrencies measured (C·O / E2E, Little's law).

**What is fitted** (per engine, on the fit slice only, :data:`FIT_SLICE`): the factors a step's derived time
cannot know — each kernel's compute and memory time scaled against the device table's attained rates, the TP
collectives' time scaled, a fixed time per step (scheduler, sampler), per layer on a step launched eagerly, per
request (API server, tokenizer, first chunk of the stream: one per engine *version*, :data:`OVERHEAD`), and the
share of the other users' prompts a new request waits behind (:meth:`~costmodel.serving.analytic.Solver.closed_loop`'s ``queue_share``). The fit is a deterministic
Levenberg–Marquardt on the log-ratios of predicted to measured TTFT and TPOT (robust: :func:`soft_l1`), with box
bounds (:data:`PARAMS`), from the profile's documented defaults; a step's time is linear in the scales and
overheads when what binds each kernel does not change, which the fit takes as its model (the page's numbers are
from the real step, refitted nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from ..options import Options
from ..sections.run import prepare
from ..symbols import B, C, T
from . import error_slices
from .analytic import Shape, Solver
from .batch import Request
from .measured import Run, runs
from .measured import sources as sources_
from .memory import kv_pool
from .predictor import replica_step
from .profiles import Profile, profile
from .simulate import simulate
from .workload import Workload

#: The slice the factors are fitted on, and those held out (each reported on its own).
FIT_SLICE = ("hardware", "h100-sxm")
HELD_OUT = (("hardware", "h200"), ("hardware", "b200"))
#: The fitted factors: (profile field, lower bound, upper bound). A collective runs no faster than the device
#: table's attained bus bandwidth (what NCCL reaches on the link; an engine's small-message all-reduce is its own
#: ``allreduce_latency_s``): the scale's lower bound is 1. Below it the fit traded collectives for compute on the
#: tp > 1 prompts (vLLM's fitted 0.33 with a compute scale of 1.57), which held-out tp 1 runs pay for.
PARAMS = (
    ("compute_time_scale", 0.5, 3.0),
    ("memory_time_scale", 0.5, 3.0),
    ("communication_time_scale", 1.0, 5.0),
    ("step_overhead_s", 0.0, 0.02),
    ("layer_overhead_s", 0.0, 0.0005),
    ("prefill_queue_share", 0.0, 0.5),
)
#: The per-request overhead (API server, tokenizer, the stream's first chunk) is fitted per engine *version*
#: (``Profile.request_overhead_by_version``): it is the front end's, which the versions and deployments of the
#: source's collections do not share (TensorRT-LLM 1.0.0rc3's runs on H100 pay about 0.1 s a request, its
#: collection on H200 and B200, of no stated version, measures 58-176 ms TTFT in all at 4 users, 1024
#: prompt and 8192 output tokens). A version with no fit-slice run pays the profile's documented default.
OVERHEAD = ("request_overhead_s", 0.0, 0.3)
TARGETS = {"ttft": 15.0, "tpot": 10.0, "e2e": 7.0, "throughput": 10.0}


#: The KV cache's format for a run's weight format: the FP8 checkpoints these runs served (NVIDIA's ModelOpt and
#: Qwen's FP8 releases) quantize the KV cache too, and the engines then keep it in fp8 (an assumption: the source
#: does not say; the runs' TTFT at concurrencies a bf16 cache could not hold say so).
KV_DTYPE = {"fp8": "fp8"}


def _options(r: Run) -> Options:
    opts = Options.make().replace(
        hardware=r.hardware,
        inference=True,
        attention="flash",
        weights_dtype=r.weights_dtype,
        kv_dtype=KV_DTYPE.get(r.weights_dtype),
    )
    return opts.replace(layout=dataclasses.replace(opts.layout, tp=r.tp))


_REPLICAS: dict[tuple[tuple, str], tuple] = {}


def _replica(setting: tuple, prof: Profile):
    """(step, limits) of one setting under ``prof``: what ``costmodel serve`` builds for it (kept per setting and
    profile: a profile holds a dict, so its text is the key)."""
    key = (setting, repr(prof))
    if key not in _REPLICAS:
        _REPLICAS[key] = _build(setting, prof)
    return _REPLICAS[key]


def _build(setting: tuple, prof: Profile):
    model, hardware, _engine, weights, tp = setting
    r = Run("", 1, model, hardware, prof.name, "", weights, tp, 1, 2, 1, 1.0, 1.0)
    opts = _options(r)
    run = prepare(model, None, opts)
    m, dev = run.model, run.device
    values = {k: v for k, v in m.values.items() if k not in (B, T, C)}
    pool = kv_pool(m.graph, values, dev, prof, tp=tp, weights_dtype=weights, kv_dtype=opts.kv_dtype, name=m.name)
    limits = prof.limits(pool.num_blocks)
    step = replica_step(m, dev, opts, prof, graph_sizes=limits.cuda_graph_sizes)
    return step, limits


def _metrics(r: Run, a: dict) -> dict[str, float]:
    return {"ttft": float(a["ttft_s"]), "tpot": float(a["tpot_s"]), "e2e": float(a["e2e_s"])}


def _limits(limits, prof: Profile, r: Run):
    """``limits`` with the per-request overhead of ``r``'s engine version."""
    return dataclasses.replace(limits, request_overhead_s=float(prof.request_overhead_for(r.engine_version)))


def predict(r: Run, prof: Profile | None = None) -> dict[str, float]:
    """The predicted means of run ``r`` (seconds) under ``prof`` (default: the built-in profile of its engine)."""
    prof = prof or profile(r.engine)
    step, limits = _replica(r.setting, prof)
    limits = _limits(limits, prof, r)
    solver = Solver(step, limits, Shape(r.input_tokens, r.output_tokens), points=(r.concurrency,))
    return _metrics(r, solver.closed_loop(r.concurrency, float(prof.prefill_queue_share)))


def predict_all(rows: Sequence[Run], prof_for=None) -> list[dict[str, float]]:
    """:func:`predict` of each row, a solver per setting and shape (the concurrencies share its grid)."""
    profs = {r.engine: prof_for(r.engine) if prof_for else profile(r.engine) for r in rows}
    points: dict[tuple, set[int]] = defaultdict(set)
    for r in rows:
        points[(r.setting, r.engine_version, r.input_tokens, r.output_tokens)].add(r.concurrency)
    solvers: dict[tuple, Solver] = {}
    out = []
    for r in rows:
        prof = profs[r.engine]
        key = (r.setting, r.engine_version, r.input_tokens, r.output_tokens)
        if key not in solvers:
            step, limits = _replica(r.setting, prof)
            limits = _limits(limits, prof, r)
            shape = Shape(r.input_tokens, r.output_tokens)
            solvers[key] = Solver(step, limits, shape, points=sorted(points[key]))
        out.append(_metrics(r, solvers[key].closed_loop(r.concurrency, float(prof.prefill_queue_share))))
    return out


# -- the simulated closed loop ------------------------------------------------------------------------------------

#: The source's rounds: aiperf sends rounds × C requests after the warm-up (AIConfigurator's MULTI_ROUND, 20).
ROUNDS = 20


def protocol(r: Run, rounds: int = ROUNDS) -> Workload:
    """The source's experiment as the simulator replays it: ``rounds × C`` requests of the run's fixed lengths in a
    closed loop of ``C`` users. aiperf waits for every warm-up response before its profiling phase starts
    (ai-dynamo/aiperf docs/tutorials/warmup.md, "Grace Period": "waits indefinitely for all warmup responses"), so
    the warm-up leaves an idle engine and the ``C`` users send their first measured request together (t = 0)."""
    req = Request(0.0, r.input_tokens, r.output_tokens)
    return Workload((req,) * (rounds * r.concurrency), r.concurrency)


def simulated(r: Run, prof: Profile | None = None, *, rounds: int = ROUNDS, simulated_rounds: int | None = None):
    """:func:`replay` of run ``r`` on the step and limits that ``costmodel serve`` builds for it under ``prof``
    (default: its engine's built-in profile). ``prefill_queue_share`` is not used: the wait it stands for is
    simulated."""
    prof = prof or profile(r.engine)
    step, limits = _replica(r.setting, prof)
    return replay(r, step, _limits(limits, prof, r), rounds=rounds, simulated_rounds=simulated_rounds)


def replay(r: Run, step, limits, *, rounds: int = ROUNDS, simulated_rounds: int | None = None):
    """The means of run ``r`` (seconds: ``ttft``, ``tpot``, ``e2e``) by the discrete-event simulator replaying
    :func:`protocol` with ``step`` and ``limits``, and the mean TTFT and E2E of each round simulated (requests in
    the order issued, ``C`` a round). ``simulated_rounds``: the rounds simulated (default all); those past them are
    taken to repeat the last one simulated (a closed loop of fixed lengths settles after its first, synchronised
    round)."""
    k = min(rounds, simulated_rounds or rounds)
    sim = simulate(protocol(r, k), step, limits)
    C, over = r.concurrency, limits.request_overhead_s
    ttft = (sim.first_token_s - sim.arrival_s).reshape(k, C).mean(axis=1) + over
    e2e = (sim.finish_s - sim.arrival_s).reshape(k, C).mean(axis=1) + over
    weights = np.ones(k)
    weights[-1] += rounds - k  # the rounds not simulated repeat the last
    t, e = float(ttft @ weights / rounds), float(e2e @ weights / rounds)
    return {"ttft": t, "tpot": (e - t) / (r.output_tokens - 1), "e2e": e}, {"ttft": ttft, "e2e": e2e}


# -- the fit ------------------------------------------------------------------------------------------------------


class _Basis:
    """A setting's and shape's steps as parts linear in the factors: per batch (compute, memory, communication,
    kernels' fixed time, 1, layers if eager), from the step with no fixed overheads and unit scales."""

    def __init__(self, r: Run, base: Profile, points: Sequence[int]):
        step, limits = _replica(r.setting, base)
        self.limits, self.shape, self.points = limits, Shape(r.input_tokens, r.output_tokens), tuple(points)
        grid = Solver(lambda b: 1.0, limits, self.shape, points=self.points)
        layers = float(step.layer_overhead)
        mats = [[], [], []]
        for three in grid.batches():
            for i, batch in enumerate(three):
                p = step.breakdown(batch)
                eager = float(step._args(batch)[-1])
                memory = p["weights"] + p["kv"] + p["activations"]
                mats[i].append((p["compute"], memory, p["communication"], p["overhead"], 1.0, layers * eager))
        self.mats = [np.array(m) for m in mats]

    def closed_loop(self, theta: np.ndarray, overhead: float, concurrency: int) -> dict:
        """The closed loop at ``concurrency`` for the shared factors ``theta`` (:data:`PARAMS`' order) and a
        per-request ``overhead``."""
        scale = np.array([theta[0], theta[1], theta[2], 1.0, theta[3], theta[4]])
        limits = dataclasses.replace(self.limits, request_overhead_s=float(overhead))
        solver = Solver(None, limits, self.shape, points=self.points, times=[m @ scale for m in self.mats])
        return solver.closed_loop(concurrency, float(theta[5]))


def _base(prof: Profile) -> Profile:
    """``prof`` with no fixed overheads and unit scales: the basis of the fit."""
    return dataclasses.replace(
        prof,
        step_overhead_s=Fraction(0),
        layer_overhead_s=Fraction(0),
        compute_time_scale=Fraction(1),
        memory_time_scale=Fraction(1),
        communication_time_scale=Fraction(1),
    )


#: The scale of the fit's robust loss, in log-ratio units (0.2: about 20 %): a residual well below it counts as
#: its square, one well above it about linearly (:func:`soft_l1`).
ROBUST_SCALE = 0.2


def soft_l1(r: np.ndarray, delta: float = ROBUST_SCALE) -> np.ndarray:
    """Residuals whose squares sum to the soft-L1 loss ``Σ 2δ²(√(1 + (r/δ)²) − 1)``: the least squares of these is
    the robust fit. The source's TTFT has heavy tails at equal settings (a 368 ms run among 78–191 ms ones at the
    same concurrency and prompt): with squares, such runs set the per-request overhead every other run pays.

    >>> [round(float(x), 4) for x in soft_l1(np.array([0.0, 0.01, -2.0]))]
    [0.0, 0.01, -0.8509]
    """
    return np.sign(r) * np.sqrt(2 * delta**2 * (np.sqrt(1 + (r / delta) ** 2) - 1))


def version(r: Run) -> str:
    """The engine version of run ``r`` as profiles key it (``"unstated"`` where the source names none)."""
    return r.engine_version or "unstated"


def _residuals(x, rows, bases, versions) -> np.ndarray:
    out = []
    theta = x[: len(PARAMS)]
    for r in rows:
        overhead = x[len(PARAMS) + versions.index(version(r))]
        a = bases[(r.setting, r.input_tokens, r.output_tokens)].closed_loop(theta, overhead, r.concurrency)
        out.append(math.log(max(a["ttft_s"], 1e-9) / r.ttft_s))
        out.append(math.log(max(a["tpot_s"], 1e-9) / r.tpot_s))
    return soft_l1(np.array(out))


def levenberg_marquardt(f, x0, lo, hi, iterations: int = 60) -> np.ndarray:
    """Minimise ``Σ f(x)²`` over the box ``[lo, hi]`` from ``x0``: Levenberg–Marquardt with forward differences
    (steps of 1e-4 of each bound's width), each trial point clipped to the box. Deterministic: no random start."""
    x, lo, hi = (np.asarray(v, dtype=float) for v in (x0, lo, hi))
    r = f(x)
    cost, lam = float(r @ r), 1e-2
    h = (hi - lo) * 1e-4
    for _ in range(iterations):
        J = np.empty((len(r), len(x)))
        for j in range(len(x)):
            e = np.zeros_like(x)
            e[j] = h[j] if x[j] + h[j] <= hi[j] else -h[j]
            J[:, j] = (f(x + e) - r) / e[j]
        g, A = J.T @ r, J.T @ J
        improved = False
        for _ in range(12):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            trial = np.clip(x + step, lo, hi)
            rt = f(trial)
            if float(rt @ rt) < cost:
                x, r, cost, lam, improved = trial, rt, float(rt @ rt), lam / 3, True
                break
            lam *= 4
        if not improved or np.all(np.abs(step) <= 1e-6 * (hi - lo)):
            break
    return x


def in_slice(r: Run, where: tuple[str, str]) -> bool:
    """Whether run ``r`` is in the slice ``where``, a (field, value) pair such as ``("hardware", "h200")``."""
    return str(getattr(r, where[0])) == where[1]


def fit(rows: Iterable[Run] | None = None) -> dict[str, dict]:
    """The factors of each engine (:data:`PARAMS`, and the per-request overhead of each of its versions under
    ``request_overhead_by_version``), fitted on its runs in :data:`FIT_SLICE`."""
    rows = [r for r in (runs() if rows is None else rows) if in_slice(r, FIT_SLICE)]
    out = {}
    for engine in sorted({r.engine for r in rows}):
        mine = [r for r in rows if r.engine == engine]
        base = _base(profile(engine))
        points: dict[tuple, set[int]] = defaultdict(set)
        for r in mine:
            points[(r.setting, r.input_tokens, r.output_tokens)].add(r.concurrency)
        bases = {}
        for r in mine:
            key = (r.setting, r.input_tokens, r.output_tokens)
            if key not in bases:
                bases[key] = _Basis(r, base, sorted(points[key]))
        prof = profile(engine)
        versions = sorted({version(r) for r in mine})
        x0 = [float(getattr(prof, name)) for name, _, _ in PARAMS]
        x0 += [float(prof.request_overhead_for(v)) for v in versions]
        lo = [p[1] for p in PARAMS] + [OVERHEAD[1]] * len(versions)
        hi = [p[2] for p in PARAMS] + [OVERHEAD[2]] * len(versions)
        x0 = np.clip(x0, lo, hi)
        f = functools.partial(_residuals, rows=mine, bases=bases, versions=versions)
        x = levenberg_marquardt(f, x0, lo, hi)
        out[engine] = {name: float(v) for (name, _, _), v in zip(PARAMS, x)}
        out[engine]["request_overhead_by_version"] = {v: float(x[len(PARAMS) + i]) for i, v in enumerate(versions)}
    return out


# -- errors -------------------------------------------------------------------------------------------------------


def errors(rows: Sequence[Run], preds: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """Per row, the signed error of each metric in percent, (predicted − measured) / measured · 100."""
    out = []
    for r, p in zip(rows, preds):
        measured = {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2e": r.e2e_s}
        out.append({k: (p[k] - measured[k]) / measured[k] * 100 for k in measured})
    return out


def throughput_errors(rows: Sequence[Run], preds: Sequence[dict[str, float]]) -> list[tuple[tuple, float, float]]:
    """Per setting and lengths measured at 3 or more concurrencies: (key, measured, predicted) largest output
    tokens/s over those concurrencies (C·O / E2E)."""
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r, p in zip(rows, preds):
        key = (*r.setting, r.input_tokens, r.output_tokens)
        groups[key].append((r.output_tokens_per_s, r.concurrency * r.output_tokens / p["e2e"]))
    return [(k, max(m for m, _ in v), max(q for _, q in v)) for k, v in sorted(groups.items()) if len(v) >= 3]


def summary(rows: Sequence[Run], preds: Sequence[dict[str, float]]) -> dict[str, object]:
    """n, mean absolute and median absolute % error of TTFT, TPOT, E2E and the largest throughput."""
    errs = errors(rows, preds)
    thr = [abs(q - m) / m * 100 for _, m, q in throughput_errors(rows, preds)]
    out: dict[str, object] = {"n": len(rows), "groups": len(thr)}
    for k in ("ttft", "tpot", "e2e"):
        v = np.abs([e[k] for e in errs])
        out[k] = (float(v.mean()), float(np.median(v))) if len(v) else (math.nan, math.nan)
    out["throughput"] = (float(np.mean(thr)), float(np.median(thr))) if thr else (math.nan, math.nan)
    return out


def write_factors(factors: dict[str, dict], path) -> None:
    """Write fitted ``factors`` into the engines file at ``path``, each engine's ``calibrated_for`` naming the
    engine versions of its fit-slice runs and the slice, and its ``sources.calibration`` the data."""
    data = json.loads(path.read_text(encoding="utf-8"))
    fit_rows = [r for r in runs() if in_slice(r, FIT_SLICE)]
    for engine, values in factors.items():
        entry = data["engines"][engine]
        for name, value in values.items():
            if isinstance(value, dict):
                entry[name] = {k: float(f"{x:.4g}") for k, x in value.items()}
            else:
                entry[name] = float(f"{value:.4g}")
        mine = [r for r in fit_rows if r.engine == engine]
        versions = sorted({r.engine_version or "unstated" for r in mine})
        entry["calibrated_for"] = versions
        entry["sources"]["calibration"] = (
            f"fitted by python -m costmodel.serving.validation --fit to {len(mine)} measured runs on "
            f"{FIT_SLICE[1]} ({FIT_SLICE[0]} slice; versions {', '.join(versions)}) of AIConfigurator's "
            "silicon_sample.csv (costmodel/serving/data/measured_serving.json); docs/serving-validation.md"
        )
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def excluded(rows: Sequence[Run]) -> set[int]:
    """The lines of the runs above their device's attainable rate (:func:`~costmodel.serving.error_slices.above_peak`)."""
    return {r.line for r in rows if error_slices.above_peak(r, _replica(r.setting, profile(r.engine))[0])}


SLICES = (("fit", FIT_SLICE), *((f"held out: {w[1]}", w) for w in HELD_OUT))


def slices(rows: Sequence[Run], preds: Sequence[dict[str, float]]) -> list[tuple[str, str, dict]]:
    """(slice, engine or "all", :func:`summary`) of the fit slice and each held-out slice, all engines and each."""
    out = []
    for name, where in SLICES:
        sub = [(r, p) for r, p in zip(rows, preds) if in_slice(r, where)]
        for engine in ("all", *sorted({r.engine for r, _ in sub})):
            mine = [(r, p) for r, p in sub if engine in ("all", r.engine)]
            out.append((name, engine, summary([r for r, _ in mine], [p for _, p in mine])))
    return out


def _pct(pair) -> str:
    mean, median = pair
    return "–" if math.isnan(mean) else f"{mean:.1f} ({median:.1f})"


def simulated_section(
    rows: Sequence[Run], preds: Sequence[dict[str, float]], des: Sequence[dict[str, float]], rounds: int
) -> list[str]:
    """The page's section on the simulated closed loop: per slice and engine, the analytic and the simulated
    errors side by side (``des``: :func:`simulated` of each row, ``rounds`` simulated; benchmarks/serving_des.py
    times them)."""
    lines = [
        "## Predicted by the simulated closed loop",
        "",
        "The same runs replayed by the discrete-event simulator as the source ran them "
        "(`costmodel.serving.validation.protocol`): aiperf waits for every warm-up response before it starts "
        "profiling, so the C users send their first measured request together to an idle engine, then each its "
        f"next when the last finishes, {ROUNDS} × C requests of the run's fixed lengths "
        f"({rounds} round{'s' if rounds > 1 else ''} simulated{', the rest taken to repeat the last' if rounds < ROUNDS else ''}; "
        "benchmarks/serving_des.py times it). Same profiles and factors (fitted with the analytic "
        "solver); `prefill_queue_share` is not used, the wait it stands for being simulated. Mean absolute error "
        "in percent (median), analytic / simulated:",
        "",
        "| slice | engine | runs | TTFT | TPOT | E2E | largest tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, engine, a), (_, _, d) in zip(slices(rows, preds), slices(rows, des)):
        cells = [f"{_pct(a[k])} / {_pct(d[k])}" for k in ("ttft", "tpot", "e2e", "throughput")]
        lines.append(f"| {name} | {engine} | {a['n']} | " + " | ".join(cells) + " |")
    return lines


def render(rows: Sequence[Run], preds: Sequence[dict[str, float]], simulated_part: Sequence[str] = ()) -> str:
    """docs/serving-validation.md: the sources, the fitted factors, the errors per slice, the worst rows; and
    ``simulated_part`` (:func:`simulated_section`'s lines) after the errors by slice where given."""
    src = sources_()["aic"]
    lines = [
        "# Serving validation: predicted against measured serving runs",
        "",
        "<!-- generated by python -m costmodel.serving.validation; do not edit (tests/serving/test_validation.py) -->",
        "",
        f"Every row of `costmodel/serving/data/measured_serving.json` ({len(rows)} runs) is a measured run from a public "
        f"source, with its line: [AIConfigurator's `silicon_sample.csv`]({src['url']}) at commit `{src['commit']}` "
        "(aggregated serving of Llama 3.1 8B and 70B and Qwen3 32B, in bf16 or fp8, on H100, H200 and B200 under vLLM, "
        "SGLang and TensorRT-LLM; benchmarks/extract_silicon_sample.py reads it). The experiment: "
        f"{src['experiment']}.",
        "",
        "Each run is predicted by the analytic closed loop of `costmodel.serve` (the step it derives, the KV blocks "
        "the engine allocates, the engine profile's factors; runs with fp8 weights keep an fp8 KV cache). The "
        f"factors of each engine were fitted on the **{FIT_SLICE[1]}** runs only (`python -m "
        "costmodel.serving.validation --fit`, a deterministic Levenberg–Marquardt on the log-ratios of TTFT and TPOT, "
        "robust (soft-L1), the collectives' time scale at least 1) "
        "and stored in `costmodel/serving/data/engines.json` with `calibrated_for`; the other devices are held out.",
        "",
        "## Fitted factors",
        "",
        "| engine | " + " | ".join(name for name, _, _ in PARAMS) + " | request_overhead_s by version |",
        "|---|" + "---|" * (len(PARAMS) + 1),
    ]
    for engine in sorted({r.engine for r in rows}):
        prof = profile(engine)
        by_version = ", ".join(f"{v}: {float(x):.4g}" for v, x in sorted(prof.request_overhead_by_version.items()))
        lines.append(
            f"| `{engine}` | "
            + " | ".join(f"{float(getattr(prof, n)):.4g}" for n, _, _ in PARAMS)
            + f" | {by_version}; other versions {float(prof.request_overhead_s):.4g} |"
        )
    lines += [
        "",
        "## Errors by slice",
        "",
        "Mean absolute error in percent (median in brackets); *largest tokens/s* is per setting and lengths measured "
        "at 3 or more concurrencies, the largest output tokens/s over them (C·O/E2E). Targets on held-out slices: "
        + ", ".join(f"{k.upper() if k != 'throughput' else 'largest tokens/s'} ≤ {v:g} %" for k, v in TARGETS.items())
        + ".",
        "",
        "| slice | engine | runs | TTFT | TPOT | E2E | settings | largest tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, engine, s in slices(rows, preds):
        cells = [_pct(s[k]) for k in ("ttft", "tpot", "e2e")]
        lines.append(
            f"| {name} | {engine} | {s['n']} | {' | '.join(cells)} | {s['groups']} | {_pct(s['throughput'])} |"
        )
    held = [s for name, engine, s in slices(rows, preds) if engine == "all" and name != "fit"]
    met = {k: all(s[k][0] <= v for s in held) for k, v in TARGETS.items()}
    out = excluded(rows)
    kept = [(r, p) for r, p in zip(rows, preds) if r.line not in out]
    cut = [s for name, engine, s in slices([r for r, _ in kept], [p for _, p in kept]) if engine == "all"]
    met_cut = {k: all(s[k][0] <= v for s in cut[1:]) for k, v in TARGETS.items()}
    lines += [
        "",
        "Targets met on every held-out slice: "
        + ", ".join(f"{k} {'yes' if ok else 'no'}" for k, ok in met.items())
        + ".",
        "",
        f"**Runs above the device's attainable rate** ({len(out)} of {len(rows)}: lines "
        f"{', '.join(str(x) for x in sorted(out)) or 'none'}): a run whose measured throughput needs its matmul "
        "FLOPs alone to run at a larger share of the dense peak than the device table's GEMM curve reaches at its "
        "best (its efficiency, the curve's asymptote: 0.875 on Hopper, bf16's curve at the fp8 peak; 0.90 for fp8 "
        "on B200) is one no step model can reach, whatever the engine overlaps "
        "(costmodel/serving/error_slices.py, `above_peak`). The slices with them left out (the tables above "
        "and below include them):",
        "",
        "| slice | runs | TTFT | TPOT | E2E | settings | largest tokens/s |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {name} | {s['n']} | {' | '.join(_pct(s[k]) for k in ('ttft', 'tpot', 'e2e'))} | {s['groups']} | "
            f"{_pct(s['throughput'])} |"
            for (name, _, s) in [t for t in slices([r for r, _ in kept], [p for _, p in kept]) if t[1] == "all"]
        ),
        "",
        "Targets met on every held-out slice without them: "
        + ", ".join(f"{k} {'yes' if ok else 'no'}" for k, ok in met_cut.items())
        + ".",
        "",
        *(list(simulated_part) + [""] if simulated_part else []),
        *error_slices.render(rows, errors(rows, preds), _replica, FIT_SLICE),
        "",
        "## The runs furthest off (held out, by TTFT error)",
        "",
        "| line | model | device | engine | weights | tp | ISL | OSL | C | TTFT ms measured / predicted | "
        "TPOT ms measured / predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs = errors(rows, preds)
    held_rows = [(r, p, e) for r, p, e in zip(rows, preds, errs) if not in_slice(r, FIT_SLICE)]
    held_rows.sort(key=lambda t: (-abs(t[2]["ttft"]), t[0].line))
    for r, p, _ in held_rows[:15]:
        lines.append(
            f"| {r.line} | {r.model} | {r.hardware} | {r.engine} {r.engine_version} | {r.weights_dtype} | {r.tp} | "
            f"{r.input_tokens} | {r.output_tokens} | {r.concurrency} | {r.ttft_s * 1e3:.0f} / {p['ttft'] * 1e3:.0f} | "
            f"{r.tpot_s * 1e3:.1f} / {p['tpot'] * 1e3:.1f} |"
        )
    lines += ["", LIMITS, ""]
    return "\n".join(lines)


LIMITS = """## What limits the prediction

Read off the tables above (the numbers move with the data; the reading is of this commit's page):

- **SGLang 0.5.6 on H200 spends about 20-35 ms a decode step whatever the tp** (1 to 8) and the concurrency (20
  to 512). Over one E2E the replica runs C prefills and O - 1 decode steps; taking every prompt at the step
  model's prefill time (one at a time, no overlap) leaves (E2E - C·T_prefill)/(O - 1) for each decode step: 18-36
  ms in the runs of 500-2000 output tokens, where the prompts are a small share, against 7-15 ms predicted, and
  no smaller at tp 8 than at tp 1 (1000/2000 tokens: 27 ms at tp 1, 31 ms at tp 8). That is a fixed cost per step
  of this collection's set-up, not a scheduler effect: SGLang's prompts in steps of their own (its scheduler's
  `get_next_batch_to_run` runs a new prefill batch before the decodes; mixed chunks are off by default), which
  the profile now says (`mixed_batches` false) and both solvers model, change when a prompt is computed, not how
  much decode time the replica has. On the fit slice (SGLang 0.5.1 and 0.5.8 on H100, Qwen3 32B) they took the
  errors from 15.0 / 17.3 / 10.7 / 11.6 % (TTFT / TPOT / E2E / largest tokens/s, with mixed steps) to 13.1 / 7.6 /
  4.8 / 5.4 %, and 0.5.1's fitted per-request overhead from 0.23 s to 0.11 s; the H200 runs' TPOT stays
  under-predicted by about half and their TTFT over-predicted.
- **vLLM 0.12.0's fp8 runs are twice as fast as the same version's bf16 runs** (Llama 3.1 8B FP8 on H200, held
  out; Qwen3 32B fp8 on H100, 3 runs of the fit slice): over-predicted by about +85 % in TPOT and +170 % in TTFT,
  while its bf16 runs are within about 12 %. Their measured throughput needs up to 0.91 of the H200's dense fp8
  peak in matmuls alone (one run, line 1712, above what any GEMM reaches on the device, is named above); their
  E2E is 0.9-2 s at 100 output tokens whatever the tp and prompt. Nothing in the source says what differs
  (the rows give no engine arguments). vLLM's 60 runs of Llama 3.1 70B on H200 are within about 17 % (TTFT) and
  8 % (TPOT, E2E); on B200 TTFT is under-predicted by about 25 % (the B200 fp8 GEMM curve is fast at a prefill's
  shapes; the per-request overhead of that collection, fitted on its H100 runs, is 16 ms).
- **The per-request overhead is the front end's**, fitted per engine version: TensorRT-LLM 1.0.0rc3 on H100
  pays about 0.11 s a request, its 70B collection on H200 and B200 (no version stated) measures 58-176 ms TTFT in
  all at 4 users, 1024 prompt and 8192 output tokens, so it gets the documented 5 ms default. **TensorRT-LLM's TTFT depends on
  the output length at equal prompt, concurrency and tp**, by up to 3x and in opposite directions in the two
  collections (1.0.0rc3: longer outputs, longer TTFT; the 70B collection: 1024 output tokens 2-4x the TTFT of
  8192). No step time reads the output length into a prefill, which is most of the remaining TensorRT-LLM TTFT
  error; its TPOT and E2E are within about 8-10 %.
- **TensorRT-LLM's KV cache** is 0.9 of the memory free after the weights and activations (its documented
  `free_gpu_memory_fraction`; the profile's `memory_share_of` "free"), not of the whole device as vLLM's: where
  the cache binds (70B at tp 1) that holds 8-12 % more tokens (held-out TTFT 33.5 -> 32.6 % on H200, 35.4 ->
  33.1 % on B200; the fit slice's 28.9 -> 29.5 %). Its `GUARANTEED_NO_EVICT` scheduler (a request admitted only
  with blocks for its whole prompt and output) was tried as the analytic limit and is not what these runs did:
  held-out TTFT went to 63 % on H200 and 75 % on B200.
- **B200's TPOT is over-predicted by about 8 %** for both engines (memory-bound decode): the device table's
  memory efficiency on B200 (0.76 of 8 TB/s, from the memory-bound shapes of XLA's GEMM table) against
  Hopper's 0.93; no streaming-bandwidth measurement of B200 was read to replace it.
- **TTFT at concurrency** includes the wait behind the other users' prompts; how synchronised the users are is
  not fixed by a fixed-length closed loop (a simulation locks into waves; the measured runs mostly do not). The
  fitted `prefill_queue_share` (about 0.07 of the other users' prompts for vLLM and TensorRT-LLM, 0.5 for SGLang)
  is one number per engine for what is a function of the load; an M/D/1 wait at the prefill's utilisation and an
  exact mean-value analysis of the closed loop (the arrival theorem's queue) were tried in its place and fitted
  the H100 runs worse (vLLM TTFT 36 % against 21 %). **The simulated closed loop** replaying the protocol
  (`python -m costmodel.serving.validation --solver des`; benchmarks/serving_des.py: all 20 rounds, 779 s of CPU
  for the 910 runs, as fewer rounds move a run's mean TTFT by up to 10 % at 10) predicts TTFT worse on every
  slice but SGLang's (47.6 / 103.7 / 59.8 % on the fit slice, H200, B200 against 23.9 / 65.6 / 29.3 %; TPOT and
  E2E within 1-3 points of the analytic's; refitting the per-request overheads for it on the fit slice, 43.6 /
  99.1 / 57.7 %): its deterministic steps keep users in lockstep, most at low concurrency (at 8 users and 1024
  prompt tokens all 8 prompts share one step in every round: vLLM's Qwen3 32B on H100 at tp 2, line 1494, 597 ms
  predicted against 154 ms measured and 166 ms by the analytic loop), where the measured runs show no wait.
- **The fit** is robust (soft-L1 on the log-ratios, scale 0.2: the source's TTFT has heavy tails at equal
  settings) and bounds the collectives' time scale below by 1 (no faster than the device table's attained bus
  bandwidth; unbounded, vLLM's went to 0.33 and traded collectives for compute on tp > 1 prompts).
- **fp8 GEMMs** run at the fp8 peak on the device table's fp8 curve where it has one (B200, measured by XLA),
  else on bf16's curve at the fp8 peak (Hopper: the table has no measured fp8 curve). **The KV cache's format and
  the engines' memory use** are not in the source; fp8 weights are taken to come with an fp8 KV cache (runs at
  concurrencies a bf16 cache could not hold measure no queue).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costmodel.serving.validation [--fit] [--check] [--write PATH] [--solver des [--rounds K]]``: fit
    the factors into data/engines.json (``--fit``), then write docs/serving-validation.md (or check it is what the
    code gives); ``--solver des`` adds the errors of the simulated closed loop (:func:`simulated_section`)."""
    import argparse  # only the command needs it
    from pathlib import Path  # only the command needs it

    p = argparse.ArgumentParser(prog="python -m costmodel.serving.validation")
    p.add_argument("--fit", action="store_true", help="fit the factors on the fit slice and store them")
    p.add_argument("--check", action="store_true", help="fail if the page differs from what the code gives")
    p.add_argument("--write", default=str(Path(__file__).resolve().parents[2] / "docs/serving-validation.md"))
    p.add_argument(
        "--solver",
        choices=("analytic", "des"),
        default="analytic",
        help="des: add the errors of the simulated closed loop (the source's protocol replayed; minutes of CPU)",
    )
    p.add_argument("--rounds", type=int, default=ROUNDS, help="with --solver des: the rounds simulated")
    a = p.parse_args(argv)
    if a.fit:
        write_factors(fit(), Path(__file__).resolve().parent / "data/engines.json")
        from . import profiles  # the built-in profiles are cached: read the new ones

        profiles.builtin.cache_clear()
        _REPLICAS.clear()
    rows = runs()
    part: list[str] = []
    if a.solver == "des":
        des = [simulated(r, simulated_rounds=a.rounds)[0] for r in rows]
        part = simulated_section(rows, predict_all(rows), des, min(a.rounds, ROUNDS))
    text = render(rows, predict_all(rows), part) + "\n"
    path = Path(a.write)
    if a.check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path}: out of date; run python -m costmodel.serving.validation", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
