"""Plots are valid images and draw the ops they are given."""

import json

import matplotlib  # noqa: F401  (in the test extra: a missing one fails, never skips)
import pytest

from costmodel import CostModelError, load, sweep, units
from costmodel.cli import main
from costmodel.devices.table import device
from costmodel.graph.decode import decode_graph, prefill_graph
from costmodel.render.plot import (
    ALL_LABELLED,
    LABELLED,
    memory_chart,
    plan_chart,
    roofline_chart,
    sweep_chart,
    texts_over_markers,
    texts_overlap,
)
from costmodel.symbols import B, C
from costmodel.timing.roofline import roofline

H100 = device("h100-sxm")


@pytest.fixture(scope="module")
def rows():
    m = load("gpt2-small")
    return roofline(prefill_graph(m.graph), {**m.values, B: 1}, H100)


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _labels(fig):
    return [
        t.get_text()
        for t in fig.axes[0].texts
        if t.get_text() not in ("memory-bound", "compute-bound") and not t.get_text().startswith("ridge")
    ]


def test_roofline_png(tmp_path, rows):
    out = tmp_path / "r.png"
    fig = roofline_chart(rows, H100, out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    drawn = "\n".join(_texts(fig))
    assert "memory-bound" in drawn and "compute-bound" in drawn and "ridge I* = 295" in drawn
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    placed = [r for r in rows if r.flops and r.bytes]
    assert len(placed) > ALL_LABELLED  # many ops: only those with the largest time shares are named
    labels = _labels(fig)
    top = sorted(placed, key=lambda r: -r.time_s)[:LABELLED]
    assert 4 <= len(labels) <= LABELLED and set(labels) <= {r.name for r in top}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {r.kind.replace("_", " ") for r in placed} <= set(legend)  # grouped by kind: a colour each
    assert texts_overlap(fig) == []


def test_roofline_of_a_large_model_stays_legible(tmp_path):
    # deepseek-v3's training step: 69 ops, whose labels once smeared into each other
    m = load("deepseek-v3")
    rows = roofline(m.graph, {**m.values, B: 1}, H100, phase="training")
    assert len(rows) >= 60
    fig = roofline_chart(rows, H100, tmp_path / "r.svg")
    assert texts_overlap(fig) == [] and 4 <= len(_labels(fig)) <= LABELLED
    assert "routed matmul" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_few_ops_are_all_named(tmp_path):
    m = load("gpt2-small")
    rows = [r for r in roofline(prefill_graph(m.graph), {**m.values, B: 1}, H100) if r.kind == "matmul"]
    fig = roofline_chart(rows, H100, tmp_path / "r.png")
    drawn = "\n".join(_labels(fig))
    assert all(r.name in drawn for r in rows) and texts_overlap(fig) == []


def test_overlap_check_sees_overlaps():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "one label")
    ax.text(0.52, 0.5, "another label")
    assert ("one label", "another label") in texts_overlap(fig)
    plt.close(fig)


@pytest.mark.parametrize("phase", ["decode", "prefill", "training"])
def test_roofline_labels_sit_off_the_points(tmp_path, phase):
    # issue 30 ("roofline labels over points"): gpt2-small's decode step put layers.attn.k over the norm's and
    # an elementwise op's markers, layers.mlp.proj over the softmax's; the renderer's extents of every label
    # against every marker's box (its size in points², at the figure's dpi)
    m = load("gpt2-small")
    graph = {"decode": decode_graph, "prefill": prefill_graph, "training": lambda g: g}[phase](m.graph)
    rows = roofline(graph, {**m.values, B: 1, C: 1024}, H100, phase="training" if phase == "training" else "forward")
    fig = roofline_chart(rows, H100, tmp_path / "r.png")
    assert texts_over_markers(fig) == [] and texts_overlap(fig) == []
    assert 4 <= len(_labels(fig)) <= LABELLED


def test_marker_check_sees_a_label_over_a_point():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.scatter([1, 2], [1, 2], s=30)
    ax.annotate("on the point", (1, 1), ha="center", va="center")
    ax.text(1.5, 1.0, "off")  # between the points, far from both
    assert texts_over_markers(fig) == [("on the point", (1.0, 1.0))]
    plt.close(fig)


def test_roofline_svg_names_ops(tmp_path):
    m = load("gpt2-small")
    rows = roofline(decode_graph(m.graph), {**m.values, B: 1, C: 1024}, H100)
    out = tmp_path / "r.svg"
    roofline_chart(rows, H100, out)
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "layers.mlp.fc" in svg and "lm_head" in svg  # labels are kept as text (svg.fonttype none)


def test_memory_chart(tmp_path):
    out = tmp_path / "m.png"
    fig = memory_chart({"params": 14 * 10**9, "grads": 14 * 10**9, "optimizer": 84 * 10**9}, out, capacity=80 * 10**9)
    assert out.read_bytes()[:4] == b"\x89PNG"
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["params", "grads", "optimizer"]
    assert "84.0" in _texts(fig)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["capacity 80 GB"]
    assert texts_overlap(fig) == []


def test_sweep_chart_and_cli(tmp_path, capsys):
    out = tmp_path / "s.svg"
    assert (
        main(
            [
                "sweep",
                "gpt2-small",
                "--grid",
                "B=1,2,4,8,16,32,64",
                "--grid",
                "T=256,512,1024",
                "--metric",
                "flops.training",
                "--plot",
                str(out),
            ]
        )
        == 0
    )
    assert f"wrote the sweep chart to {out}" in capsys.readouterr().err
    assert "flops.training" in out.read_text() and "T = 1,024" in out.read_text()
    r = sweep("gpt2-small", ["B=1,2,4,8,16,32,64", "T=256,512,1024"], ["flops.training"])
    fig = sweep_chart(
        {k: r.column(k) for k in ["B", "T", "flops.training", "valid"]},
        ["B", "T"],
        "flops.training",
        tmp_path / "s.png",
    )
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"  # 1..64 and 2e11..6e13: log helps
    assert ax.get_xlabel() == "B" and ax.get_ylabel() == "flops.training" and len(ax.get_lines()) == 3
    assert texts_overlap(fig) == []
    with pytest.raises(CostModelError, match="one or two grid axes"):
        sweep_chart({"a": [1]}, [], "a", tmp_path / "x.png")


def test_bad_plot_name(tmp_path, rows):
    with pytest.raises(CostModelError, match="expected a name ending in .png, .svg, .pdf"):
        roofline_chart(rows, H100, tmp_path / "r.jpg")


def _covers(b, a) -> bool:
    """``b`` is as fast as ``a`` and needs no more memory."""
    return b["step_s"] <= a["step_s"] and b["memory_bytes"] <= a["memory_bytes"]


def _dominated(a, b) -> bool:
    """``a`` is dominated by ``b``: ``b`` covers it and is better in one of the two."""
    return _covers(b, a) and (b["step_s"] < a["step_s"] or b["memory_bytes"] < a["memory_bytes"])


def test_plan_chart_marks_the_front_and_names_the_best(tmp_path, capsys):
    out = tmp_path / "plan.svg"
    argv = ["plan", "gpt2-small", "--hardware", "h100-sxm", "--devices", "8", "--batch", "8", "--seq", "256"]
    assert main([*argv, "--top", "40", "--json", "--plot", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"wrote the plan chart to {out}" in captured.err
    r = json.loads(captured.out)
    front, rows = r["pareto"], r["layouts"]
    # the front, checked by brute force over the layouts shown: nothing shown beats a front layout in both
    # time and memory, and a layout of the front is as fast as every layout shown and needs no more memory
    assert not any(_dominated(p, q) for p in front for q in rows + front)
    assert all(any(_covers(p, q) for p in front) for q in rows)
    best = min(rows, key=lambda x: x["step_s"])
    svg = out.read_text()
    assert f"fastest: {units.duration(best['step_s'])}, {units.gb(best['memory_bytes'])}" in svg
    assert "step time against memory" in svg and "capacity 80.00 GB" in svg
    fig = plan_chart(r, tmp_path / "plan.png", capacity=80 * 10**9)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "memory per device (GB, 1e9 bytes)" and ax.get_ylabel() == "predicted step time (s)"
    (line,) = ax.get_lines()[:1]
    assert len(line.get_xdata()) == len(front)  # the front, joined
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        f"{len(rows)} fastest fitting layouts",
        f"Pareto front ({units.plural(len(front), 'layout')})",
        "capacity 80.00 GB",
    ]
    named = [t.get_text() for t in ax.texts]
    assert any(t.startswith("fastest: ") for t in named) and any(t.startswith("least memory: ") for t in named)
    assert texts_overlap(fig) == []
    with pytest.raises(CostModelError, match="expected a name ending in .png, .svg, .pdf"):
        plan_chart(r, tmp_path / "p.jpg")


def test_sweep_chart_of_bytes_is_in_gb(tmp_path):
    """Issue 30 (cosmetic): a sweep of memory was drawn in raw bytes (1e11 on the axis)."""
    r = sweep("gpt2-small", ["B=1,2,4"], ["memory_bytes.total"])
    cols = {k: r.column(k) for k in ["B", "memory_bytes.total", "valid"]}
    ax = sweep_chart(cols, ["B"], "memory_bytes.total", tmp_path / "m.png").axes[0]
    assert ax.get_ylabel() == "memory_bytes.total (GB, 1e9 bytes)"
    assert list(ax.get_lines()[0].get_ydata()) == [v / 1e9 for v in cols["memory_bytes.total"]]


def test_sweep_chart_of_a_time_names_the_quantity_and_its_unit(tmp_path):
    # issue 30 ("compute s:" labels): a time key on an axis read as "time.compute_s"; the quantity and its unit
    cols = {"B": [1, 2, 4], "time.compute_s": [0.5, 1.0, 2.0], "time.step_s": [0.6, 1.1, 2.2]}
    for metric, want in (("time.compute_s", "compute time of a step (s)"), ("time.step_s", "step time (s)")):
        ax = sweep_chart(cols, ["B"], metric, tmp_path / "t.png").axes[0]
        assert ax.get_ylabel() == want and " s:" not in ax.get_title()
