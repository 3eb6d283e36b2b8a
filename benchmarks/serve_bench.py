"""Speed of the serving simulation (issue 32): requests simulated per second and simulated time over wall time; and
the serving planner as a whole process.

    python benchmarks/serve_bench.py        # about half a minute

The step is a roofline of a 70B model on four H100s (TP 4), written here by hand so the benchmark measures the
simulator, not a step-time derivation: per GPU, 35 GB of weights and 81,920 bytes of KV a past token read at
3.35 TB/s, against 2·70e9/4 FLOPs a new token at 60 % of 989 TFLOP/s, plus 3 ms of overhead a step. Workload:
10,000 requests of 2,048 prompt and 256 output tokens, Poisson at 70 % of the analytic capacity, and a closed loop at
concurrency 256 (vLLM v1's defaults: 256 sequences, 8,192 tokens a step, blocks of 16). Target: at least 200×
faster than real time, 10,000 requests in a few seconds on one core.

The planner (issue 32 item 9: a Pareto front for a 70B model on 8–64 GPUs in under 10 s): ``costmodel serve-plan
llama3-70b --hardware h100-sxm --devices 8-64 --slo ttft_p90=2s,tpot_p99=50ms`` as a whole process (imports, the
step derived for each tp, every layout's largest rate under the SLOs, the front), aggregated and with
``--disaggregate``, with an empty formula cache (the first run of a model) and a warm one; wall and CPU time, and the
ratio of the wall time to the 10 s target.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import subprocess
import sys
import tempfile
import time

WEIGHTS_S = 35e9 / 3.35e12  # weights read once a step
KV_S = 81_920 / 3.35e12  # a past token's KV read
TOKEN_S = 2 * 70e9 / 4 / (0.6 * 989e12)  # a new token's matmuls
OVERHEAD_S = 3e-3


def step(batch) -> float:
    """Seconds of one step of ``batch``: the roofline above."""
    new = past = 0
    for n, p in batch:
        new += n
        past += p
    return max(WEIGHTS_S + KV_S * (past + new), TOKEN_S * new) + OVERHEAD_S


def main() -> None:
    from costmodel.serving.analytic import Shape, Solver
    from costmodel.serving.batch import Limits
    from costmodel.serving.metrics import metrics
    from costmodel.serving.simulate import simulate
    from costmodel.serving.workload import workload

    limits = Limits(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=26_000)
    t = time.perf_counter()
    solver = Solver(step, limits, Shape(2048, 256))
    print(f"analytic solver: {1e3 * (time.perf_counter() - t):.1f} ms to prepare, capacity {solver.capacity:.2f} req/s")
    for name, w in [
        ("poisson at 0.7 capacity", workload(10_000, rate=0.7 * solver.capacity, input_len=2048, output_len=256)),
        ("closed loop at 256", workload(10_000, concurrency=256, input_len=2048, output_len=256)),
    ]:
        t, cpu = time.perf_counter(), time.process_time()
        sim = simulate(w, step, limits)
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        m = metrics(sim, warmup=0.1)
        simulated = float(sim.finish_s.max())
        print(
            f"{name}: {len(w):,} requests, {len(sim.step_end_s):,} steps of {sim.step_seqs.mean():.0f} requests on "
            f"average, in {wall:.2f} s ({cpu:.2f} s CPU): {len(w) / wall:,.0f} requests/s simulated, "
            f"{simulated:,.0f} s simulated = {simulated / wall:,.0f}x real time; "
            f"TTFT p90 {m['ttft_s']['p90']:.3f} s, TPOT p99 {1e3 * m['tpot_s']['p99']:.1f} ms, "
            f"{m['throughput']['output_tokens_per_s']:,.0f} output tokens/s"
        )


PLAN = ["serve-plan", "llama3-70b", "--hardware", "h100-sxm", "--devices", "8-64"]
PLAN += ["--slo", "ttft_p90=2s,tpot_p99=50ms", "--json"]
TARGET_S = 10.0


def plan(extra: list[str], cache: str) -> tuple[float, float, int, int]:
    """(wall s, CPU s of the child, Pareto-front layouts, layouts searched) of one ``costmodel serve-plan``."""
    import json
    import os as _os

    env = {**_os.environ, "COSTMODEL_CACHE_DIR": cache}
    before = _os.times()
    t = time.perf_counter()
    root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))  # this checkout's costmodel
    argv = [sys.executable, "-m", "costmodel", *PLAN, *extra]
    out = subprocess.run(argv, env=env, capture_output=True, check=True, cwd=root)
    wall = time.perf_counter() - t
    after = _os.times()
    cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    s = json.loads(out.stdout)["serving_plan"]
    return wall, cpu, len(s["pareto"]), s["searched"]


def planner() -> None:
    for name, extra in (("aggregated", []), ("with --disaggregate", ["--disaggregate"])):
        cache = tempfile.mkdtemp(prefix="costmodel-serve-bench-")
        for state in ("cold cache", "warm cache"):
            wall, cpu, front, searched = plan(extra, cache)
            print(
                f"costmodel serve-plan llama3-70b, 8-64 × h100-sxm, {name}, {state}: {wall:.2f} s wall "
                f"({cpu:.2f} s CPU), {searched:,} layouts, Pareto front of {front}: "
                f"{wall / TARGET_S:.2f}x the {TARGET_S:g} s target ({'met' if wall < TARGET_S else 'MISSED'})"
            )


if __name__ == "__main__":
    main()
    planner()
