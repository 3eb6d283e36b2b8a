"""What a report costs against the estimate it shows (issue 30, "Slow": a report should cost at most twice the
estimate plus rendering), and ``costmodel models``, each a fresh CLI process with the formula cache off.

    python benchmarks/report_cost.py        # a few minutes

Prints the wall and CPU seconds of each command and the report's ratio to its estimate.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

DEEPSEEK = (
    "deepseek-v3 --hardware h100-sxm --devices 2048 --batch 4096 --seq 4096 --tp 8 --dp 256 --ep 8 --zero 3 --flash"
)
CASES = [
    ("llama2-7b --hardware h100-sxm --devices 8", "--html"),
    ("llama2-7b --hardware h100-sxm --devices 8", "--markdown"),
    (DEEPSEEK, "--markdown"),
    (DEEPSEEK, "--html"),
]


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of ``python -m costmodel ARGS``."""
    env = {**os.environ, "COSTMODEL_CACHE_DIR": "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "costmodel", *args], check=True, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    wall, cpu = timed(["models"])
    print(f"models: {wall:.2f} s wall, {cpu:.2f} s CPU")
    with tempfile.TemporaryDirectory() as tmp:
        for run, fmt in CASES:
            est = timed(["estimate", *run.split()])
            rep = timed(["report", *run.split(), fmt, os.path.join(tmp, "r" + fmt.replace("--", "."))])
            print(
                f"{run.split()[0]} {fmt}: estimate {est[0]:.2f} s ({est[1]:.2f} CPU), report {rep[0]:.2f} s "
                f"({rep[1]:.2f} CPU): {rep[1] / est[1]:.2f}x the estimate's CPU"
            )


if __name__ == "__main__":
    main()
