"""Speed of the tracer (issue 13), printed as ratios.

    python benchmarks/trace_bench.py        # a few minutes; needs costmodel[torch]

1. tracing a 32-layer LLaMA-shaped model (torch.export with symbolic B and T, then the op table), and the
   same at 2 layers: export grows with depth, the folded graph does not;
2. deriving its formulas (``costmodel.derive``) at 32 and at 2 layers: the same graph, so the same time;
3. per config, evaluating the traced formula (compiled, as ``costmodel sweep`` does) against running
   ``FlopCounterMode`` over a forward and a backward on the meta device (the ratio is the speed-up).

Models are built from configs in code on ``meta``; nothing is downloaded. Times are CPU seconds of this
process (``time.process_time``, one thread), medians where repeated: other jobs on a shared machine slow the
wall clock, not these.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics
import time


def median_time(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def llama(layers: int):
    from costmodel.tracer.hf import causal_lm, small_config

    cfg = small_config(
        "llama",
        num_hidden_layers=layers,
        hidden_size=256,
        intermediate_size=688,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        vocab_size=1024,
    )
    return cfg, causal_lm(cfg)


def trace(layers: int):
    import costmodel
    from costmodel.tracer.hf import example_inputs

    cfg, model = llama(layers)
    inputs, dynamic, ranges = example_inputs(cfg)
    t = time.process_time()
    m = costmodel.trace(model, inputs, dynamic, ranges=ranges)
    return m, model, time.process_time() - t


def flopcounter(model, batch: int, seq: int) -> int:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids.clone()).loss.backward()
    return counter.get_total_flops()


def main() -> None:
    import costmodel
    from costmodel.verbs.sweep.derive import compile_metrics

    big, model, t_big = trace(32)
    small, _, t_small = trace(2)
    info = big.graph.graph["traced"]
    print(
        f"1. trace, 32 layers: {t_big:.1f} s (wall clock: export {info['export_s']:.1f} s, read {info['read_s']:.1f} s; "
        f"{info['aten_nodes']} ATen nodes -> {big.graph.number_of_nodes()} graph nodes, folded {info['folded']}); "
        f"2 layers: {t_small:.1f} s ({small.graph.number_of_nodes()} graph nodes); ratio {t_big / t_small:.1f}x"
    )
    d_big = median_time(lambda: costmodel.derive(big))
    d_small = median_time(lambda: costmodel.derive(small))
    print(
        f"2. derive, 32 layers: {d_big:.2f} s; 2 layers: {d_small:.2f} s; ratio {d_big / d_small:.2f} "
        "(1.0: derive time does not grow with depth)"
    )
    import numpy as np

    formulas = compile_metrics(big, ["flops.matmul.training"])
    n = 100_000
    rng = np.random.default_rng(0)
    grid = {"B": rng.integers(1, 64, n), "T": rng.integers(2, 512, n)}
    formula = median_time(lambda: formulas(grid), repeat=5) / n
    points = [(1, 64), (2, 128), (4, 256)]
    torch_s = median_time(lambda: [flopcounter(model, b, s) for b, s in points], repeat=1) / len(points)
    exact = costmodel.estimate(big, batch=2, seq=128)["flops"]["matmul"]["training"]
    assert exact == flopcounter(model, 2, 128), "the traced formula and FlopCounterMode disagree"
    print(
        f"3. per config: traced formula {formula * 1e9:.0f} ns (compiled, {n:,} configs in one call), "
        f"FlopCounterMode on meta {torch_s:.2f} s; ratio {torch_s / formula:,.0f}x "
        f"(and equal: {exact:,} FLOPs at B=2, T=128)"
    )


if __name__ == "__main__":
    main()
