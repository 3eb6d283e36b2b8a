"""Plots are valid images and draw the ops they are given."""

import matplotlib  # noqa: F401  (in the test extra: a missing one fails, never skips)
import pytest

from costmodel import CostModelError, load
from costmodel.devices.decode import decode_graph, prefill_graph
from costmodel.devices.plot import memory_chart, roofline_chart
from costmodel.devices.roofline import roofline
from costmodel.devices.table import device
from costmodel.symbols import B, C

H100 = device("h100-sxm")


@pytest.fixture(scope="module")
def rows():
    m = load("gpt2-small")
    return roofline(prefill_graph(m.graph), {**m.values, B: 1}, H100)


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_roofline_png(tmp_path, rows):
    out = tmp_path / "r.png"
    fig = roofline_chart(rows, H100, out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    drawn = "\n".join(_texts(fig))
    for r in rows:
        if r.flops and r.bytes:  # ops without FLOPs have no place on a log axis
            assert r.name in drawn
    assert "memory-bound" in drawn and "compute-bound" in drawn and "ridge I* = 295" in drawn
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


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
    fig = memory_chart({"params": 14 * 10**9, "grads": 14 * 10**9, "optimizer": 84 * 10**9}, out,
                       capacity=80 * 10**9)
    assert out.read_bytes()[:4] == b"\x89PNG"
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["params", "grads", "optimizer"]
    assert "84.0" in _texts(fig)


def test_bad_plot_name(tmp_path, rows):
    with pytest.raises(CostModelError, match="expected a name ending in .png, .svg, .pdf"):
        roofline_chart(rows, H100, tmp_path / "r.jpg")
