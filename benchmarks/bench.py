"""Speed of costmodel, printed as ratios against the baselines of issue 6.

    python benchmarks/bench.py            # about 30 s; needs torch and transformers (the test extra)

1. evaluating a derived formula over 1e6 configs on one core (target: >= 1e6 configs/s);
2. per config, a compiled formula vs tracing the same model with FlopCounterMode on `meta` (target: >= 1000x);
3. `costmodel estimate` as a whole process (target: well under a second), and its import time;
4. deriving a model with L = 10,000 vs L = 10 (target: the same time: the repeated block is never unrolled).

Numbers are wall-clock medians on this machine; the README quotes a run.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics
import subprocess
import sys
import time


def median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sweep_rate(n: int = 1_000_000) -> tuple[float, float]:
    """Configs per second evaluating flops.training of GPT-3 over n random configs (float64, one core)."""
    import numpy as np

    from costmodel.reports.sweep import compile_metrics

    compiled, base = compile_metrics("gpt3-175b", ["flops.training"])
    rng = np.random.default_rng(0)
    values = {"L": rng.integers(1, 200, n), "d": 128 * rng.integers(1, 200, n), "T": rng.integers(128, 32768, n)}
    args = [values.get(str(s), np.full(n, base[s])).astype(np.float64) for s in compiled.symbols]
    t = median_time(lambda: compiled(args))
    return n / t, t


def flopcounter_trace(L: int = 12, d: int = 768, h: int = 12, V: int = 50257, T: int = 1024) -> float:
    """Seconds to trace GPT-2 small (forward + backward) with FlopCounterMode on the meta device."""
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.GPT2Config(n_layer=L, n_embd=d, n_head=h, vocab_size=V, n_positions=T,
                                  attn_implementation="eager")

    def trace() -> int:
        with torch.device("meta"):
            model = transformers.GPT2LMHeadModel(cfg)
        ids = torch.zeros((1, T), dtype=torch.long, device="meta")
        with FlopCounterMode(display=False) as counter:
            model(ids, labels=ids).loss.backward()
        return counter.get_total_flops()

    trace()  # warm up
    return median_time(trace, 3)


def estimate_call() -> float:
    """Seconds for one uncompiled, exact estimate() (derivation included), GPT-2 small."""
    from costmodel.graph.registry import op_cost
    from costmodel.reports.estimate import estimate

    def run():
        op_cost.cache_clear()
        estimate("gpt2-small")
    return median_time(run, 5)


def process_time() -> tuple[float, float, float]:
    """Wall seconds of `costmodel estimate gpt3-175b`, of `python -c pass`, and of importing costmodel.cli."""
    cmd = [sys.executable, "-m", "costmodel", "estimate", "gpt3-175b"]
    whole = median_time(lambda: subprocess.run(cmd, check=True, capture_output=True), 5)
    bare = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 5)
    imp = median_time(lambda: subprocess.run([sys.executable, "-c", "import costmodel.cli"], check=True), 5)
    return whole, bare, imp


def derive_time(layers: int) -> float:
    """Seconds to build and derive (totals) GPT-3 with `layers` layers, caches cleared."""
    from costmodel.families import load
    from costmodel.graph.analysis import totals
    from costmodel.graph.registry import op_cost

    def run():
        op_cost.cache_clear()
        m = load("gpt3-175b", {"L": layers})
        totals(m.graph)
    return median_time(run, 5)


def main() -> None:
    rate, t = sweep_rate()
    print(f"1. sweep: {rate:,.0f} configs/s on one core (1e6 configs in {t * 1e3:.0f} ms); "
          f"{rate / 1e6:.1f}x the 1e6/s target")
    per_config = 1 / rate
    trace = flopcounter_trace()
    est = estimate_call()
    print(f"2. FlopCounterMode on meta, GPT-2 small fwd+bwd: {trace * 1e3:.0f} ms per config; "
          f"compiled formula: {per_config * 1e9:.0f} ns per config -> {trace / per_config:,.0f}x faster "
          f"(target 1000x); an uncompiled exact estimate() (sympy cache warm): {est * 1e3:.0f} ms -> {trace / est:.1f}x")
    whole, bare, imp = process_time()
    print(f"3. `python -m costmodel estimate gpt3-175b`: {whole:.2f} s wall (python itself {bare:.2f} s, "
          f"import costmodel.cli {imp:.2f} s)")
    t10, t10k = derive_time(10), derive_time(10_000)
    print(f"4. derive L = 10: {t10 * 1e3:.0f} ms, L = 10,000: {t10k * 1e3:.0f} ms -> ratio {t10k / t10:.2f}")


if __name__ == "__main__":
    main()
