"""The planner searches through the sweeps' chunk engine: the same plan for every chunk size, number of local
processes and a Dask cluster, and the same ranking, ties and Pareto front as ranking every layout at once
(:func:`~costmodel.verbs.plan.rank.rank` and :func:`~costmodel.verbs.plan.rank.pareto` over whole arrays)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from costmodel.verbs.plan.plan import layout_space, layouts, plan
from costmodel.verbs.plan.rank import TIE, matches, pareto, rank
from costmodel.verbs.plan.search import Search, search

TINY = {"L": 4, "d": 64, "h": 4, "V": 100, "T_max": 256}
SMALL = dict(settings=TINY, hardware="h100-sxm", devices=4, batch=8, seq=256, progress=False)


def _plan(**kw):
    r = plan("gpt", **SMALL, top=5, reference={"tp": 2, "schedule": "1f1b"}, **kw)
    r.pop("layouts_per_s")  # a speed, not a result
    return r


def test_same_plan_for_every_chunk_size_and_worker_count():
    whole = _plan(chunk=10**9)
    assert whole["searched"] > 100 and whole["pareto"] and whole["reference"]
    assert _plan(chunk=1) == whole
    assert _plan(chunk=7, workers=2) == whole


def test_only_searches_the_layouts_with_those_fields_in_every_chunking():
    only = {"zero": 0, "schedule": ("1f1b", "gpipe")}
    whole = _plan(chunk=10**9, only=only)
    every = _plan(chunk=10**9)
    assert whole["searched"] == int(matches(layouts(4, 8, 4, 256, heads=4), only).sum())
    assert 0 < whole["searched"] < every["searched"]
    assert all(r["zero"] == 0 and r["schedule"] in ("1f1b", "gpipe") for r in whole["layouts"] + whole["pareto"])
    assert _plan(chunk=3, only=only) == whole


def test_workers_receive_the_whole_compiled_step():
    # megatron_sp=False changes memory per device (tp > 1): a worker that lost it would rank with True
    kw = dict(only={"tp": 2}, megatron_sp=False)
    local = _plan(**kw)
    assert _plan(chunk=5, workers=2, **kw) == local
    assert local["layouts"][0]["memory_bytes"] > _plan(only={"tp": 2})["layouts"][0]["memory_bytes"]


def test_dask_local_cluster_gives_the_same_plan():
    pytest.importorskip("distributed", reason="--dask needs the dask extra (dask[distributed])")
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = _plan(chunk=50, dask=cluster.scheduler_address)
    assert remote == _plan()


# -- against ranking every layout at once, on steps with exact ties and chains of near ties --------------------


def _steps(compiled, lay):
    """A step with many exact ties (ZeRO 1 and 2, recompute none and selective) and chains of near ties (each
    ZeRO stage TIE/2 above the one below: one tie group through the chain), and a memory with ties."""
    base = 1.0 + (lay["tp"] * 3 + lay["pp"] * 5 + lay["b"] * 7 + (lay["recompute"] == 2)) % compiled
    t = base * (1 + (lay["zero"] % 3 != 0) * TIE / 2 * (lay["zero"] % 3))
    mem = (10.0 - lay["zero"] - lay["recompute"]) * 1e9 / lay["tp"]
    return t, mem


@pytest.mark.parametrize("period", [3, 11])
def test_ranking_ties_and_front_equal_whole_arrays(period):
    sp = layout_space(16, 32, 4, 256, heads=4)
    lay = layouts(16, 32, 4, 256, heads=4)
    t, mem = _steps(period, lay)
    cap = 9.5e9
    fits = np.flatnonzero(mem <= cap)
    order, step_rank = rank(t, mem, lay, fits)
    place = np.zeros(len(t), np.int64)
    place[order] = np.arange(1, len(order) + 1)
    front = fits[pareto(t[fits], mem[fits])]
    ref = {"tp": 2, "pp": 2}
    hit = np.flatnonzero(matches(lay, ref) & (place > 0))
    ref_best = hit[np.argmin(place[hit])]
    need = 40
    for chunk in (1, 7, 10**9):
        found = search(Search(sp, period, _steps, cap, ref), need, chunk=chunk)
        rows = found.rows
        assert (found.searched, found.fitting) == (len(t), len(fits))
        assert rows["index"][:need].tolist() == order[:need].tolist()
        assert rows["place"][:need].tolist() == list(range(1, need + 1))
        got = rows["index"][found.front]
        assert got.tolist() == front.tolist()
        assert rows["place"][found.front].tolist() == place[front].tolist()
        assert rows["step_rank"][found.front].tolist() == step_rank[front].tolist()
        sizes = np.bincount(step_rank[fits])
        assert rows["tie_size"][found.front].tolist() == sizes[step_rank[front]].tolist()
        assert rows["index"][found.reference] == ref_best and rows["place"][found.reference] == place[ref_best]
    assert step_rank.max() < len(np.unique(t[fits]))  # the chains made groups of distinct steps
    none = search(Search(sp, period, _steps, 0.0, ref), need, chunk=7)  # nothing fits
    assert (none.fitting, len(none.front), none.reference, len(none.rows["step_s"])) == (0, 0, None, 0)


def test_compiled_step_pickles_as_its_source():
    from costmodel.devices.table import device
    from costmodel.families import load
    from costmodel.options import Options
    from costmodel.sections.run import resolve
    from costmodel.verbs.plan.plan import derive, evaluate

    m = load("gpt", TINY)
    o = Options.make(batch=8, seq=256, flash=True)
    c = derive(m, device("h100-sxm"), resolve(m, o), o)
    back = pickle.loads(pickle.dumps(c))
    lay = layouts(4, 8, c.layers, 256, heads=4)
    for a, b in zip(evaluate(c, lay), evaluate(back, lay)):
        assert a.tolist() == b.tolist()


class _Numbered:
    """A space of layouts with their flat index as a column ``k`` (so a made-up step can tell copies apart)."""

    def __init__(self, space) -> None:
        self.space, self.size = space, space.size

    def spans(self, chunk):
        return self.space.spans(chunk)

    def columns(self, start, stop):
        return {**self.space.columns(start, stop), "k": np.arange(start, stop)}


def _numbered_steps(compiled, lay):
    """1e5 distinct steps (about 5 layouts each) and 97 memories."""
    return 1 + (lay["k"] * 7919 % 100_000) * 1e-5, 1e9 * (1 + lay["k"] % 97)


def test_memory_is_flat_in_the_layouts_searched():
    import tracemalloc

    from costmodel.verbs.plan.search import Space

    sp = layout_space(16, 32, 4, 256, heads=4)
    big = _Numbered(Space(sp.groups * 300, sp.counts * 300, sp.rest))  # 549,000 layouts
    tracemalloc.start()
    try:
        found = search(Search(big, None, _numbered_steps, 50e9), 10, chunk=1 << 14)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.searched == 300 * sp.size and found.fitting < found.searched
    top = found.rows["step_s"][:10].tolist()
    assert top == sorted(top) and top[0] == 1.0 and found.rows["place"][:10].tolist() == list(range(1, 11))
    # the distinct steps (16 B each) and one chunk: the 11 columns alone would be 549,000 × 11 × 8 B = 48 MB
    assert peak < 20e6  # measured: 12 MB at 549,000 layouts, 17 MB at 1.1 and 2.2 million (1e5 distinct steps)
