"""The measured serving runs predicted by the simulated closed loop against the analytic one (issue 32 item 12).

    python benchmarks/serving_des.py [--rounds K] [--out PATH]   # 779 s of CPU for all 20 rounds
    python benchmarks/serving_des.py --from PATH                 # the tables again from --out's file, seconds

Every run of ``costmodel/serving/data/measured_serving.json`` is replayed by the discrete-event simulator as the
source ran it (:func:`costmodel.serving.validation.protocol`: C users sending together after aiperf's warm-up, each
its next request when the last finishes, 20 × C requests of the run's fixed lengths) under the same engine profiles
(the factors fitted with the analytic solver; ``prefill_queue_share`` unused), and by the analytic solver as
docs/serving-validation.md is. Printed: CPU seconds of the simulations, and per slice (the page's: fit, held out)
the mean absolute % error (median) of TTFT, TPOT and E2E of each solver. ``--rounds K`` simulates K rounds and
takes the rest to repeat the K-th (:func:`~costmodel.serving.validation.simulated`); the per-round means of the
full runs are written to ``--out`` (JSON); ``--from`` reads them back and prints, besides the table, how far
simulating K rounds moves each run's means, and the table with each engine version's per-request overhead refitted
for the DES on the fit slice (:func:`refit_overheads`; the other factors would need a simulation per trial).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import time

import numpy as np

from costmodel.serving import validation as v
from costmodel.serving.measured import runs


def table(rows, by_solver) -> list[str]:
    """Per slice and engine, each solver's mean (median) absolute % error of TTFT, TPOT, E2E."""
    out = [
        "| slice | engine | runs | " + " | ".join(f"{m} {s}" for m in ("TTFT", "TPOT", "E2E") for s in by_solver) + " |"
    ]
    out.append("|---" * (3 + 3 * len(by_solver)) + "|")
    summaries = {s: v.slices(rows, p) for s, p in by_solver.items()}
    first = next(iter(summaries.values()))
    for i, (name, engine, s0) in enumerate(first):
        cells = [v._pct(summaries[s][i][2][m]) for m in ("ttft", "tpot", "e2e") for s in by_solver]
        out.append(f"| {name} | {engine} | {s0['n']} | " + " | ".join(cells) + " |")
    return out


def from_rounds(r, rounds: dict, k: int) -> dict[str, float]:
    """The means of run ``r`` from its per-round means, ``k`` rounds simulated and the rest repeating the k-th
    (what ``simulated(r, simulated_rounds=k)`` gives, but for the k-th round's tail, which in a k-round run has no
    round after it)."""
    w = np.ones(k)
    w[-1] += v.ROUNDS - k
    t, e = float(np.array(rounds["ttft"][:k]) @ w / v.ROUNDS), float(np.array(rounds["e2e"][:k]) @ w / v.ROUNDS)
    return {"ttft": t, "tpot": (e - t) / (r.output_tokens - 1), "e2e": e}


def refit_overheads(rows, des) -> list[dict[str, float]]:
    """``des`` with each engine version's per-request overhead refitted on the fit slice (the one factor that needs
    no new simulation: it adds to TTFT and E2E): the overhead in [0, 0.3] s on a 1 ms grid that minimises the page's
    robust loss of the TTFT log-ratios (TPOT does not move). Versions with no fit-slice run keep theirs."""
    now = {
        r.line: float(
            v._limits(v._replica(r.setting, v.profile(r.engine))[1], v.profile(r.engine), r).request_overhead_s
        )
        for r in rows
    }
    grid = np.arange(0, 0.3005, 0.001)
    best = {}
    for key in sorted({(r.engine, v.version(r)) for r in rows if v.in_slice(r, v.FIT_SLICE)}):
        mine = [(r, p) for r, p in zip(rows, des) if v.in_slice(r, v.FIT_SLICE) and (r.engine, v.version(r)) == key]
        base = np.array([p["ttft"] - now[r.line] for r, p in mine])
        meas = np.array([r.ttft_s for r, _ in mine])
        loss = [float(np.sum(v.soft_l1(np.log(np.maximum(base + o, 1e-9) / meas)) ** 2)) for o in grid]
        best[key] = float(grid[int(np.argmin(loss))])
        print(f"  {key[0]} {key[1]}: request overhead {now[mine[0][0].line]:.4f} s -> {best[key]:.4f} s")
    out = []
    for r, p in zip(rows, des):
        shift = best.get((r.engine, v.version(r)), now[r.line]) - now[r.line]
        out.append({"ttft": p["ttft"] + shift, "tpot": p["tpot"], "e2e": p["e2e"] + shift})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=v.ROUNDS, help="rounds simulated (the rest repeat the last)")
    p.add_argument("--out", default="", help="write the per-round means of each run here (JSON)")
    p.add_argument("--from", dest="saved", default="", help="read the per-round means from here (no simulation)")
    a = p.parse_args()
    rows = runs()
    analytic = v.predict_all(rows)
    if a.saved:
        with open(a.saved, encoding="utf-8") as f:
            saved = json.load(f)
        print(f"per-round means of {saved['rounds']} rounds from {a.saved} ({saved['cpu_s']:.1f} s CPU when simulated)")
        per_round = saved["per_round"]
        full = [from_rounds(r, per_round[str(r.line)], saved["rounds"]) for r in rows]
        print("\n".join(table(rows, {"analytic": analytic, "DES": full})))
        for k in (2, 3, 5, 10):
            est = [from_rounds(r, per_round[str(r.line)], k) for r in rows]
            worst = {m: max(abs(e[m] / f[m] - 1) * 100 for e, f in zip(est, full)) for m in ("ttft", "tpot", "e2e")}
            print(
                f"{k} rounds simulated, the rest repeating the last: largest change of a run's mean "
                + ", ".join(f"{m} {x:.1f} %" for m, x in worst.items())
            )
        print("the per-request overheads refitted for the DES on the fit slice:")
        print("\n".join(table(rows, {"analytic": analytic, "DES refit": refit_overheads(rows, full)})))
        return
    des, per_round, cpu = [], {}, 0.0
    for r in rows:
        v._replica(r.setting, v.profile(r.engine))  # the step built outside the timing
        t = time.process_time()
        pred, rounds = v.simulated(r, simulated_rounds=a.rounds)
        cpu += time.process_time() - t
        des.append(pred)
        per_round[r.line] = {k: x.tolist() for k, x in rounds.items()}
    print(f"simulated {len(rows)} runs, {a.rounds} rounds each: {cpu:.1f} s CPU")
    print("\n".join(table(rows, {"analytic": analytic, "DES": des})))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"rounds": a.rounds, "cpu_s": cpu, "per_round": per_round}, f)


if __name__ == "__main__":
    main()
