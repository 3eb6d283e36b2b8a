"""Speed of the layout planner (issue 15): layouts evaluated per second on one core, and a whole search.

    python benchmarks/plan_bench.py        # about a minute

1. the compiled calibrated step of GPT-3 175B on A100s evaluated over 1e6 layouts (target: >= 1e5 layouts/s),
   and the whole search of about 1e6 layouts through the chunk engine (enumeration, both passes, reduction);
2. ``plan`` of GPT-3 175B on 1024 A100s, global batch 1536 (Narayanan et al. 2021's run), end to end
   (target: seconds), and the place of the published layout (TP 8, PP 8, interleaved): its rank, its step's
   rank among the distinct steps, and its place in that step's tie.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time


def evaluation_rate(n: int = 1_000_000) -> tuple[float, float]:
    """Layouts per second through the compiled step and memory screen (float64, one core): by the wall clock,
    and by the process's CPU time (what one unshared core would give when other work shares the machine)."""
    import numpy as np

    from costmodel.devices.table import device
    from costmodel.families import load
    from costmodel.options import Options
    from costmodel.sections.run import resolve
    from costmodel.verbs.plan.plan import derive, evaluate, layouts

    m = load("gpt3-175b")
    o = Options.make(batch=1536, seq=2048, flash=True)
    c = derive(m, device("a100-80gb"), resolve(m, o), o)
    lay = layouts(1024, 1536, c.layers, 2048, heads=96)
    reps = -(-n // len(lay["tp"]))
    big = {k: np.tile(v, reps)[:n] for k, v in lay.items()}
    t, cpu = time.perf_counter(), time.process_time()
    evaluate(c, big)
    return n / (time.perf_counter() - t), n / (time.process_time() - cpu)


def search_rate(copies: int = 50, chunk: int = 1 << 16) -> tuple[float, float, int]:
    """Layouts per second of the whole search through the chunk engine (both passes, one process): GPT-3
    175B's layouts on 1024 A100s, ``copies`` times over (a space of about 1e6 layouts in 16 chunks)."""
    from costmodel.devices.table import device
    from costmodel.families import load
    from costmodel.options import Options
    from costmodel.sections.run import resolve
    from costmodel.verbs.plan.plan import derive, evaluate, layout_space
    from costmodel.verbs.plan.search import Search, Space, search

    m = load("gpt3-175b")
    o = Options.make(batch=1536, seq=2048, flash=True)
    dev = device("a100-80gb")
    c = derive(m, dev, resolve(m, o), o)
    sp = layout_space(1024, 1536, c.layers, 2048, heads=96)
    big = Space(sp.groups * copies, sp.counts * copies, sp.rest)
    t, cpu = time.perf_counter(), time.process_time()
    search(Search(big, c, evaluate, float(dev.memory_bytes)), 10, chunk=chunk)
    return big.size / (time.perf_counter() - t), big.size / (time.process_time() - cpu), big.size


def search() -> tuple[float, dict, dict, dict, int]:
    """Seconds of a whole ``plan``, the placement of the published layout (any vpp, micro-batch, recompute and
    ZeRO stage: its best-placed variant), of the first TP 8 × PP 8 layout and of the published layout among
    Megatron-LM 2021's layouts (``plan_rank.MEGATRON_LM_2021``), and the layouts searched."""
    import costmodel
    from costmodel.verbs.plan.rank import MEGATRON_LM_2021
    from costmodel.verbs.plan.rank import PUBLISHED_GPT3_175B as PUBLISHED

    kw = dict(hardware="a100-80gb", devices=1024, batch=1536, seq=2048, top=10, progress=False)
    t = time.perf_counter()
    r = costmodel.plan("gpt3-175b", reference=PUBLISHED, **kw)
    elapsed = time.perf_counter() - t
    any_tp8pp8 = costmodel.plan("gpt3-175b", reference={"tp": 8, "pp": 8}, **kw)["reference"]
    then = costmodel.plan("gpt3-175b", reference=PUBLISHED, **kw, **MEGATRON_LM_2021)["reference"]
    return elapsed, r["reference"], any_tp8pp8, then, r["searched"]


def main() -> None:
    wall, cpu = evaluation_rate()
    print(
        f"planner evaluation: {wall:,.0f} layouts/s by the wall clock, {cpu:,.0f} by CPU time, one core "
        "(target >= 100,000)"
    )
    wall, cpu, n = search_rate()
    print(
        f"planner search through the chunk engine ({n:,} layouts, two passes): {wall:,.0f} layouts/s by the wall "
        f"clock, {cpu:,.0f} by CPU time, one core (target >= 100,000)"
    )
    elapsed, published, tp8pp8, then, searched = search()
    print(f"plan gpt3-175b on 1024 x a100-80gb: {elapsed:.1f} s for {searched:,} layouts")
    for what, r in (
        ("published layout (TP 8, PP 8, DP 16, interleaved)", published),
        ("first TP 8 x PP 8", tp8pp8),
        ("published layout among Megatron-LM 2021's full-recompute layouts", then),
    ):
        print(
            f"  {what}: place {r['rank']}, step {r['step_rank']} of the distinct steps "
            f"({r['tie_position']} of {r['tie_size']} with that step), {r['of_best']:.3f} x the best step"
        )


if __name__ == "__main__":
    main()
