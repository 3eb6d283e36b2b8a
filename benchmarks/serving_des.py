"""The measured serving runs predicted by the simulated closed loop against the analytic one (issue 32 item 12).

    python benchmarks/serving_des.py [--rounds K] [--out PATH]   # about 10 min of CPU for all 20 rounds

Every run of ``costmodel/serving/data/measured_serving.json`` is replayed by the discrete-event simulator as the
source ran it (:func:`costmodel.serving.validation.protocol`: C users sending together after aiperf's warm-up, each
its next request when the last finishes, 20 × C requests of the run's fixed lengths) under the same engine profiles
(the factors fitted with the analytic solver; ``prefill_queue_share`` unused), and by the analytic solver as
docs/serving-validation.md is. Printed: CPU seconds of the simulations, and per slice (the page's: fit, held out)
the mean absolute % error (median) of TTFT, TPOT and E2E of each solver. ``--rounds K`` simulates K rounds and
takes the rest to repeat the K-th (:func:`~costmodel.serving.validation.simulated`); the per-round means of the
full runs are written to ``--out`` (JSON) so that the error of any K can be read off them.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import time

from costmodel.serving import validation as v
from costmodel.serving.measured import runs


def table(rows, by_solver) -> list[str]:
    """Per slice and engine, each solver's mean (median) absolute % error of TTFT, TPOT, E2E."""
    out = ["| slice | engine | runs | " + " | ".join(f"{m} {s}" for m in ("TTFT", "TPOT", "E2E") for s in by_solver)]
    out.append("|---" * (3 + 3 * len(by_solver)) + "|")
    summaries = {s: v.slices(rows, p) for s, p in by_solver.items()}
    first = next(iter(summaries.values()))
    for i, (name, engine, s0) in enumerate(first):
        cells = [v._pct(summaries[s][i][2][m]) for m in ("ttft", "tpot", "e2e") for s in by_solver]
        out.append(f"| {name} | {engine} | {s0['n']} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=v.ROUNDS, help="rounds simulated (the rest repeat the last)")
    p.add_argument("--out", default="", help="write the per-round means of each run here (JSON)")
    a = p.parse_args()
    rows = runs()
    analytic = v.predict_all(rows)
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
