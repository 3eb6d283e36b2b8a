"""What a user reads off a simulation: latencies, throughput, SLOs and goodput (:func:`metrics`), and the largest
rate that meets SLOs (:func:`max_rate_under_slo`, by the simulation or the analytic solver).

**Per request** (seconds): TTFT = first token − arrival + ``request_overhead_s``; E2E = last token − arrival +
``request_overhead_s``; TPOT two ways, named: ``tpot_s`` = (E2E − TTFT) / (output − 1), the time per output token
after the first (requests of one output token have none and are left out), and ``tpot_incl_first_s`` = E2E /
output. ITL: every gap between consecutive tokens of a request, pooled over requests (``itl_s``). Each comes as
``mean``, ``p50``, ``p90``, ``p99``: numpy's default (linear interpolation between order statistics); NaN when no
request has one.

**The measured window.** With ``warmup = 0`` every finished request counts and the window runs from the first
arrival to the last finish. With ``warmup = w`` the first and the last ``floor(w·m)`` of the ``m`` finished
requests, in order of finish, are left out (the ramp up and the drain of a closed loop or a finite open loop), and
the window runs from the last finish left out at the start (the first arrival when none is) to the last finish
measured; latencies are those of the measured requests. Tokens/s are the measured requests' tokens over the window
(in a steady state, the tokens made inside it).

**SLOs** (:func:`parse_slos`): ``ttft_p90=2s,tpot_p99=50ms,e2e_mean=10s`` — a metric (``ttft``, ``tpot``,
``tpot_incl_first``, ``itl``, ``e2e``), a statistic (``mean`` or ``p`` and a percentile) and a limit with its unit
(``s`` or ``ms``; a bare number is an error). An SLO is **met** when the statistic of the population is within the
limit; its **attainment** is the fraction of requests whose own value is (for ``itl``, a request's largest gap).
An open loop whose middle 80 % of requests (by finish) were served at under ``LAG`` (0.9) of the rate they arrived
at is marked ``saturated`` too (a finite run past saturation that never hit the simulator's queue bound), and meets
no SLO.
The analytic solver's answer comes in the same keys through :func:`analytic_metrics` (means only).

**Goodput** is the requests/s, over the window, of the requests whose own values meet every SLO, and the fraction
of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import CostModelError, closest
from .analytic import Shape, Solver
from .batch import Limits, StepTime
from .simulate import Simulation, simulate
from .workload import Length, parse_length, workload

#: An open loop served at under this fraction of the rate it is offered is saturated (:func:`_lagging`).
LAG = 0.9
METRICS = ("ttft", "tpot", "tpot_incl_first", "itl", "e2e")
_SLO = re.compile(r"^(?P<metric>[a-z0-9_]+?)_(?P<stat>mean|p\d+(?:\.\d+)?)$")
_LIMIT = re.compile(r"^(?P<value>\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?\s*(?P<unit>ms|s)?$")


@dataclass(frozen=True)
class Slo:
    """``stat`` (``"mean"`` or ``"p90"``, ...) of ``metric`` within ``limit_s`` seconds."""

    metric: str
    stat: str
    limit_s: float

    def __str__(self) -> str:
        return f"{self.metric}_{self.stat}={self.limit_s:g}s"


def parse_slos(text: str) -> tuple[Slo, ...]:
    """SLOs from text like ``ttft_p90=2s,tpot_p99=50ms,e2e_mean=10s`` (units ``s`` and ``ms`` required)."""
    out = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, eq, limit = part.partition("=")
        name, limit = name.strip().lower(), limit.strip().lower()
        m = _SLO.match(name)
        if not eq or not m:
            raise CostModelError(f"slo {part!r}: expected METRIC_STAT=LIMIT such as ttft_p90=2s or tpot_mean=50ms")
        if m["metric"] not in METRICS:
            raise CostModelError(f"slo {part!r}: unknown metric {m['metric']!r}{closest(m['metric'], METRICS)}")
        if m["stat"] != "mean" and not 0 <= float(m["stat"][1:]) <= 100:
            raise CostModelError(f"slo {part!r}: a percentile is between p0 and p100, got {m['stat']}")
        v = _LIMIT.match(limit)
        if not v:
            raise CostModelError(f"slo {part!r}: expected a limit such as 2s or 50ms, got {limit!r}")
        if not v["unit"]:
            raise CostModelError(f"slo {part!r}: the limit {limit!r} has no unit; write it in s or ms")
        seconds = float(limit.removesuffix("ms").removesuffix("s")) / (1000 if v["unit"] == "ms" else 1)
        if not (seconds > 0 and math.isfinite(seconds)):
            raise CostModelError(f"slo {part!r}: the limit must be > 0, got {limit!r}")
        out.append(Slo(m["metric"], m["stat"], seconds))
    if not out:
        raise CostModelError(f"slo {text!r}: no SLO given; expected e.g. ttft_p90=2s,tpot_p99=50ms")
    return tuple(out)


def stat(values: np.ndarray, which: str) -> float:
    """``which`` (``mean``, ``p50``, ``p99.9``, ...) of ``values``; NaN when there are none."""
    if not len(values):
        return math.nan
    return float(np.mean(values)) if which == "mean" else float(np.percentile(values, float(which[1:])))


def summary(values: np.ndarray) -> dict[str, float]:
    """``mean``, ``p50``, ``p90``, ``p99`` of ``values`` (numpy's linear percentiles)."""
    return {which: stat(values, which) for which in ("mean", "p50", "p90", "p99")}


def _measured(sim: Simulation, warmup: float) -> tuple[np.ndarray, float, float]:
    """The indices of the measured requests and the window's start and end."""
    if not 0 <= warmup < 0.5:
        raise CostModelError(f"metrics: warmup is a fraction in [0, 0.5), got {warmup}")
    done = np.flatnonzero(sim.finished)
    if not len(done):
        return done, math.nan, math.nan
    order = done[np.argsort(sim.finish_s[done], kind="stable")]
    cut = math.floor(warmup * len(order))
    kept = order[cut : len(order) - cut]
    start = sim.finish_s[order[cut - 1]] if cut else float(np.min(sim.arrival_s[done]))
    return np.sort(kept), float(start), float(sim.finish_s[kept[-1]])


def _gaps(sim: Simulation, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every inter-token gap of the ``kept`` requests, pooled, and each request's largest gap (0 with none)."""
    segs = sim.segments[np.isin(sim.segments[:, 0], kept)]
    largest = np.zeros(len(sim.requests))
    if not len(segs):
        return np.empty(0), largest[kept]
    lengths = segs[:, 2] - segs[:, 1]
    starts = np.repeat(segs[:, 1] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    times = sim.step_end_s[starts + np.arange(int(lengths.sum()))]  # every token's time, request by request
    owner = np.repeat(segs[:, 0], lengths)
    same = owner[1:] == owner[:-1]
    gaps = np.diff(times)[same]
    np.maximum.at(largest, owner[1:][same], gaps)
    return gaps, largest[kept]


def per_request(sim: Simulation, kept: np.ndarray) -> dict[str, np.ndarray]:
    """Each measured request's TTFT, E2E, TPOT (NaN for one output token), TPOT with the first, largest ITL."""
    over = sim.limits.request_overhead_s
    out = sim.output_tokens[kept]
    ttft = sim.first_token_s[kept] - sim.arrival_s[kept] + over
    e2e = sim.finish_s[kept] - sim.arrival_s[kept] + over
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2e - ttft) / (out - 1), np.nan)
    return {"ttft": ttft, "e2e": e2e, "tpot": tpot, "tpot_incl_first": e2e / out}


def _lagging(sim: Simulation) -> str:
    """Why an open loop that never hit the simulator's queue bound is past saturation all the same ("" if not): its
    middle 80 % of requests by finish were served at under ``LAG`` of the rate they arrived at (the ramp up and the
    drain left out, so a short run below saturation is not mistaken for one past it)."""
    done = np.flatnonzero(sim.finished)
    if sim.closed or sim.reason or len(done) < 20:
        return ""
    order = done[np.argsort(sim.finish_s[done], kind="stable")]
    mid = order[len(order) // 10 : len(order) - len(order) // 10]
    arrived, finished = sim.arrival_s[mid], sim.finish_s[mid]
    if not (arrived.max() > arrived.min() and finished.max() > finished.min()):
        return ""
    offered = (len(mid) - 1) / float(arrived.max() - arrived.min())
    served = (len(mid) - 1) / float(finished.max() - finished.min())
    if served >= LAG * offered:
        return ""
    return f"rate past saturation: served {served:.4g} requests/s of {offered:.4g} offered"


def _slos(slos: tuple[Slo, ...], values: dict, gaps: np.ndarray, largest: np.ndarray) -> tuple[dict, np.ndarray]:
    """Each SLO's population value, whether it is met and its attainment; and which requests meet them all."""
    own = {**values, "itl": largest}
    pooled = {**values, "itl": gaps, "tpot": values["tpot"][~np.isnan(values["tpot"])]}
    ok = np.ones(len(values["ttft"]), dtype=bool)
    rows = {}
    for slo in slos:
        meets = ~(own[slo.metric] > slo.limit_s)  # a request with no TPOT (one output token) meets a TPOT SLO
        ok &= meets
        value = stat(pooled[slo.metric], slo.stat)
        rows[str(slo)] = {
            "value_s": value,
            "limit_s": slo.limit_s,
            "met": bool(value <= slo.limit_s),
            "attainment": float(meets.mean()) if len(ok) else math.nan,
        }
    return rows, ok


def metrics(sim: Simulation, *, slos: str | tuple[Slo, ...] | None = None, warmup: float = 0.0) -> dict:
    """The metrics of a simulation as a dict (keys in seconds, as ``serving.*`` in JSON): see the module."""
    kept, start, end = _measured(sim, warmup)
    values = per_request(sim, kept)
    gaps, largest = _gaps(sim, kept)
    window = end - start if len(kept) else math.nan

    def per_s(count: float) -> float:
        return count / window if len(kept) and window > 0 else math.nan

    lag = _lagging(sim)
    result = {
        "ttft_s": summary(values["ttft"]),
        "tpot_s": summary(values["tpot"][~np.isnan(values["tpot"])]),
        "tpot_incl_first_s": summary(values["tpot_incl_first"]),
        "itl_s": summary(gaps),
        "e2e_s": summary(values["e2e"]),
        "throughput": {
            "input_tokens_per_s": per_s(float(sim.input_tokens[kept].sum())),
            "output_tokens_per_s": per_s(float(sim.output_tokens[kept].sum())),
            "requests_per_s": per_s(float(len(kept))),
        },
        "window_s": window,
        "requests": int(len(kept)),
        "finished": int(sim.finished.sum()),
        "preemptions": int(sim.preemptions.sum()),
        "saturated": sim.saturated or bool(lag),
        "saturation": sim.reason if sim.saturated else lag,
        "stopped": sim.reason,
    }
    if slos is not None:
        rows, ok = _slos(parse_slos(slos) if isinstance(slos, str) else tuple(slos), values, gaps, largest)
        result["slo"] = rows
        result["slo_met"] = bool(rows) and all(r["met"] for r in rows.values()) and not sim.reason and not lag
        result["goodput"] = {
            "requests_per_s": per_s(float(ok.sum())),
            "fraction": float(ok.mean()) if len(ok) else math.nan,
        }
    return result


def analytic_metrics(result: dict, *, slos: str | tuple[Slo, ...] | None = None) -> dict:
    """The analytic solver's result for one rate or concurrency (numbers, not arrays) in :func:`metrics`' keys: the
    means, with NaN percentiles (the solver knows means only). An SLO is checked against the mean whatever its
    statistic (optimistic for a percentile); goodput is not known (NaN)."""
    if np.ndim(result["ttft_s"]):
        raise CostModelError("analytic_metrics: expected the result at one rate or concurrency, got arrays")
    nan = {"p50": math.nan, "p90": math.nan, "p99": math.nan}
    out = {
        key: {"mean": float(result[key]), **nan} for key in ("ttft_s", "tpot_s", "tpot_incl_first_s", "itl_s", "e2e_s")
    }
    out["throughput"] = {k: float(result[k]) for k in ("input_tokens_per_s", "output_tokens_per_s", "requests_per_s")}
    out["concurrency"] = float(result["concurrency"])
    out["saturated"] = bool(result["saturated"])
    out["saturation"] = "rate past saturation: past the analytic capacity" if out["saturated"] else ""
    if slos is not None:
        slos = parse_slos(slos) if isinstance(slos, str) else tuple(slos)
        rows = {}
        for slo in slos:
            value = out[f"{slo.metric}_s"]["mean"]
            rows[str(slo)] = {"value_s": value, "limit_s": slo.limit_s, "met": bool(value <= slo.limit_s)}
        out["slo"] = rows
        out["slo_met"] = all(r["met"] for r in rows.values()) and not out["saturated"]
        out["goodput"] = {"requests_per_s": math.nan, "fraction": math.nan}
    return out


def max_rate_under_slo(
    step_time: StepTime,
    limits: Limits,
    slos: str | tuple[Slo, ...],
    *,
    input_len: str | int | Length = 2048,
    output_len: str | int | Length = 256,
    prefix_tokens: int = 0,
    requests: int = 1000,
    burstiness: float = 1.0,
    seed: int = 0,
    warmup: float = 0.1,
    iterations: int = 12,
    hi: float | None = None,
    solver: str = "des",
) -> dict:
    """The largest Poisson (or gamma) rate, requests/s, that meets every SLO, by bisection between 0 and ``hi``
    (default: 1.05 × the analytic capacity, doubled while a rate still meets them).

    ``solver="des"``: each rate is a simulation of ``requests`` requests (the same seed at every rate), its first
    trial at the analytic answer, then ``iterations`` halvings. ``solver="analytic"``: the analytic solver with the
    lengths' means, SLOs checked against means (:func:`analytic_metrics`), to the precision of 40 halvings
    (:func:`_search`: 15 rates a round, solved at once). Returns ``rate`` (met; 0
    when none tried is), ``failed_at`` (the lowest rate seen to fail), ``metrics`` at ``rate`` (``None`` when none
    met) and ``runs`` (the evaluations made)."""
    if solver not in ("des", "analytic"):
        raise CostModelError(f"max_rate_under_slo: solver is 'des' or 'analytic', got {solver!r}")
    slos = parse_slos(slos) if isinstance(slos, str) else tuple(slos)
    ins, outs = parse_length(input_len), parse_length(output_len)
    shape = Shape(round(ins.mean), round(outs.mean), min(prefix_tokens, round(ins.mean)))
    model = Solver(step_time, limits, shape)

    def analytic(rate: float) -> dict:
        return analytic_metrics(model.open_loop(rate, burstiness), slos=slos)

    def des(rate: float) -> dict:
        w = workload(
            requests,
            rate=rate,
            burstiness=burstiness,
            input_len=ins,
            output_len=outs,
            prefix_tokens=prefix_tokens,
            seed=seed,
        )
        return metrics(simulate(w, step_time, limits), slos=slos, warmup=warmup)

    top = hi if hi is not None else 1.05 * model.capacity
    if not top > 0:
        raise CostModelError(f"max_rate_under_slo: the upper rate must be > 0, got {top}")
    found = _search(model, slos, burstiness, top)
    if solver == "analytic":
        found["metrics"] = analytic(found["rate"]) if found["rate"] > 0 else None
        return found
    return _bisect(des, top, iterations, found["rate"])


#: The analytic search: rates tried at once in each round (one vectorised solve), and rounds; 16^10 = 2^40, the
#: interval 40 halvings leave.
FAN, ROUNDS = 16, 10


def _search(model: Solver, slos: tuple[Slo, ...], burstiness: float, top: float) -> dict:
    """The largest rate whose analytic means meet ``slos``, below ``top`` (raised while it still meets): the
    bracket found as :func:`_bisect` finds it, then :data:`ROUNDS` rounds that each solve :data:`FAN` − 1 rates of
    the bracket in one call and keep the step where they turn from met to failed (the means grow with the rate)."""

    def met(rates: np.ndarray) -> np.ndarray:
        r = model.open_loop(rates, burstiness)
        ok = ~np.asarray(r["saturated"], dtype=bool)
        for slo in slos:
            ok &= np.asarray(r[f"{slo.metric}_s"], dtype=float) <= slo.limit_s
        return ok

    tops = top * 2.0 ** np.arange(8)
    ok, runs = met(tops), 1
    if ok.all():
        return {"rate": float(tops[-1]), "failed_at": math.nan, "runs": runs}
    first = int(np.argmin(ok))  # the first rate of the doubling that fails
    lo, hi = (float(tops[first - 1]) if first else 0.0), float(tops[first])
    for _ in range(ROUNDS):
        rates = lo + (hi - lo) * np.arange(1, FAN) / FAN
        ok, runs = met(rates), runs + 1
        fails = np.flatnonzero(~ok)
        j = int(fails[0]) if len(fails) else FAN - 1  # the first that fails (or hi)
        lo, hi = (float(rates[j - 1]) if j else lo), (float(rates[j]) if j < FAN - 1 else hi)
    return {"rate": lo, "failed_at": hi, "runs": runs}


def _bisect(run, top: float, iterations: int, guess: float | None = None) -> dict:
    """Bisection for the largest rate ``run`` says meets its SLOs, below ``top`` (raised while it still meets)."""
    best, at, runs = 0.0, None, 0
    for _ in range(8):  # a rate that fails bounds the search
        m, runs = run(top), runs + 1
        if not m["slo_met"]:
            break
        best, at, top = top, m, 2 * top
    else:
        return {"rate": best, "failed_at": math.nan, "metrics": at, "runs": runs}
    lo, hi = best, top
    for i in range(iterations):
        mid = guess if i == 0 and guess and lo < guess < hi else (lo + hi) / 2
        m, runs = run(mid), runs + 1
        if m["slo_met"]:
            lo, at = mid, m
        else:
            hi = mid
    return {"rate": lo, "failed_at": hi, "metrics": at, "runs": runs}
