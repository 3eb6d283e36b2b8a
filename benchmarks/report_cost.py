"""What a report costs against the estimate it shows (issue 30, "Slow": a report should cost at most twice the
estimate plus rendering), and ``costmodel models``, each a fresh CLI process with the formula cache off.

    python benchmarks/report_cost.py              # a few minutes
    python benchmarks/report_cost.py --repeat 3   # each command's least CPU of three runs (a shared machine)

Prints the wall and CPU seconds of each command and the report's ratio to its estimate's CPU (CPU time, not
wall: other processes on the machine slow the wall clock, not the CPU seconds a process spends); the issue's
bound is 2× (plus rendering).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

DEEPSEEK = (
    "deepseek-v3 --hardware h100-sxm --devices 2048 --batch 4096 --seq 4096 --tp 8 --dp 256 --ep 8 --zero 3 --flash"
)
#: The runs of issue 30: its llama2-7b and llama3-8b report commands, and DeepSeek-V3 on 2,048 GPUs.
RUNS = (
    "llama2-7b --hardware h100-sxm --devices 8",
    "llama3-8b --batch 8 --flash --hardware h100-sxm --devices 8 --dp 8 --zero 3",
    DEEPSEEK,
)
FORMATS = ("--html", "--markdown", "--latex")
BOUND = 2.0


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of ``python -m costmodel ARGS``."""
    env = {**os.environ, "COSTMODEL_CACHE_DIR": "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "costmodel", *args], check=True, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def least(args: list[str], repeat: int) -> tuple[float, float]:
    """The run of ``args`` with the least CPU seconds of ``repeat`` (wall, CPU)."""
    return min((timed(args) for _ in range(repeat)), key=lambda t: t[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command; the least CPU is kept")
    repeat = ap.parse_args().repeat
    wall, cpu = least(["models"], repeat)
    print(f"models: {wall:.2f} s wall, {cpu:.2f} s CPU")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            est = least(["estimate", *run.split()], repeat)
            print(f"{run}\n  estimate: {est[0]:.2f} s wall, {est[1]:.2f} s CPU")
            for fmt in FORMATS:
                rep = least(["report", *run.split(), fmt, os.path.join(tmp, "r" + fmt.replace("--", "."))], repeat)
                ratio = rep[1] / est[1]
                worst = max(worst, ratio)
                print(f"  report {fmt}: {rep[0]:.2f} s wall, {rep[1]:.2f} s CPU: {ratio:.2f}x the estimate's CPU")
    print(f"largest ratio {worst:.2f}x ({'within' if worst <= BOUND else 'over'} the {BOUND:g}x bound)")


if __name__ == "__main__":
    main()
