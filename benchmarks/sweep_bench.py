"""Sweep throughput and memory: 1e6 and 1e7 configs, two metrics, to CSV and to npy, each a whole process.

Issue 16's target: a 1e7-point sweep with two metrics to CSV in ≤ 6 s and ≤ 400 MB peak on one core; with
npy in ≤ 2 s. Each case runs ``costmodel sweep`` in a fresh subprocess (``--workers 1``) writing to a file in
a temporary folder, with its formulas cached (a warm-up run per grid, as a user's second sweep). Peak memory is
the costmodel process's maxrss from ``resource.getrusage(RUSAGE_CHILDREN)``, read in a small ``python -c``
wrapper around each case, so each number is one process's.

Two grids: ``whole`` (metrics that stay whole numbers under 2^53: written by the integer path) and ``large``
(FLOP counts above 2^53 and 2^63: written exactly, in full, from int64 limbs: :mod:`costmodel.formulas.wide`).

Run: ``python benchmarks/sweep_bench.py [--points 1e6,1e7] [--formats csv,npy] [--grids whole,large]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: name → (model, grid of 1e6 points, grid of 1e7 points, metrics)
GRIDS = {
    "whole": (
        "gpt2-small",
        ["--grid", "d=64:64000:64", "--grid", "L=1:1000"],
        ["--grid", "d=64:640000:64", "--grid", "L=1:1000"],
        ["params.total", "params.non_embedding"],
    ),
    "large": (
        "gpt2-small",
        ["--grid", "d=64:64000:64", "--grid", "L=1:1000"],
        ["--grid", "d=64:640000:64", "--grid", "L=1:1000"],
        ["flops.training", "params.total"],
    ),
}

_CHILD = """
import resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
print(rc, wall, peak)
"""


def run_case(model: str, grid: list[str], metrics: list[str], fmt: str, out: str, env: dict) -> dict:
    """One whole ``costmodel sweep`` process: seconds, peak RSS in MB (1e6 bytes) and the output's size."""
    cmd = [
        sys.executable,
        "-m",
        "costmodel",
        "sweep",
        model,
        *grid,
        *[a for m in metrics for a in ("--metric", m)],
        "--format",
        fmt,
        "--output",
        out,
        "--workers",
        "1",
    ]
    res = subprocess.run([sys.executable, "-c", _CHILD, *cmd], capture_output=True, text=True, env=env, check=True)
    rc, wall, peak = res.stdout.split()
    if rc != "0":
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}")
    return {"seconds": round(float(wall), 2), "peak_mb": round(int(peak) * 1024 / 1e6), "bytes": os.path.getsize(out)}


def startup(env: dict) -> float:
    """Seconds of a sweep of one point, cache warm: imports and loading the cached formulas, the fixed cost of
    every case."""
    cmd = [sys.executable, "-m", "costmodel", "sweep", "gpt2-small", "--grid", "d=768", "--csv"]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, check=True)  # derives and caches
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - t


def cases(points: list[str], grids: list[str], formats: list[str], *, echo: bool = True) -> list[dict]:
    """Each (points, grid, format) case as a whole ``costmodel sweep`` process, formulas cached (see the module
    notes): seconds, peak MB and bytes written, with what was run."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "COSTMODEL_CACHE_DIR": os.path.join(tmp, "cache"),
        }
        base = startup(env)
        if echo:
            print(f"start-up (a 1-point sweep, whole process): {base:.2f} s", flush=True)
        for n in points:
            for name in grids:
                model, small, big, metrics = GRIDS[name]
                grid = small if float(n) <= 1e6 else big
                warm = [
                    sys.executable,
                    "-m",
                    "costmodel",
                    "sweep",
                    model,
                    "--grid",
                    "d=768",
                    "--csv",
                    *[a for m in metrics for a in ("--metric", m)],
                ]
                subprocess.run(warm, stdout=subprocess.DEVNULL, env=env, check=True)  # formulas cached: as a user's
                for fmt in formats:
                    r = run_case(model, grid, metrics, fmt, os.path.join(tmp, f"out.{fmt}"), env)
                    r.update(points=n, grid=name, format=fmt, metrics=metrics)
                    rows.append(r)
                    if echo:
                        print(
                            f"{n:>5} points  {name:<6} {fmt:<4} {r['seconds']:6.2f} s  {r['peak_mb']:5d} MB  "
                            f"{r['bytes'] / 1e6:8.1f} MB out  ({', '.join(metrics)})",
                            flush=True,
                        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1e6,1e7")
    ap.add_argument("--formats", default="csv,npy")
    ap.add_argument("--grids", default="whole,large")
    args = ap.parse_args(argv)
    rows = cases(args.points.split(","), args.grids.split(","), args.formats.split(","))
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
