"""Plots (the optional ``plot`` extra: ``pip install costmodel[plot]``).

matplotlib is imported inside each function, never at module import, so the
rest of costmodel (and ``costmodel estimate``) starts without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import CostModelError
from ..files import write_atomic
from .roofline import Bound
from .table import Device

FORMATS = (".png", ".svg", ".pdf")


def _pyplot():
    try:
        import matplotlib  # the optional plot extra: imported only when a chart is drawn
    except ModuleNotFoundError:
        raise CostModelError("plotting needs matplotlib: pip install 'costmodel[plot]'") from None
    matplotlib.use("Agg", force=True)  # files only, no display
    import matplotlib.pyplot as plt  # after choosing the Agg backend above

    return plt


def _check_path(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise CostModelError(
            f"plot file {str(path)!r}: expected a name ending in {', '.join(FORMATS)}, "
            f"received {p.suffix or 'no suffix'!r}"
        )
    return p


#: Ops labelled on a roofline with many ops: the ones with the largest time shares.
LABELLED = 8
#: Up to this many ops, every op is labelled (ops at one spot share a stacked label).
ALL_LABELLED = 16
#: Where a label may go around its point (points), tried in order; a label that fits nowhere is left out.
OFFSETS = (
    (6, -6, "left", "top"),
    (-6, 6, "right", "bottom"),
    (6, 6, "left", "bottom"),
    (-6, -6, "right", "top"),
    (10, -20, "left", "top"),
    (-10, 20, "right", "bottom"),
    (10, 20, "left", "bottom"),
    (-10, -20, "right", "top"),
)


def roofline_chart(rows: Sequence[Bound], dev: Device, path: str | Path, *, title: str = "", dtype: str | None = None):
    """Log-log roofline of ``rows`` on ``dev``: ops grouped by kind (a colour each, in the legend); returns the
    Figure.

    The roofs are min(peak, I × bandwidth); the region left of the ridge point (memory-bound) is shaded. A
    point sits at (intensity, attainable FLOP/s). With at most :data:`ALL_LABELLED` ops every op is labelled
    (ops at one spot share a stacked label); with more, only the :data:`LABELLED` with the largest time shares,
    so labels never smear. A label goes where it overlaps no other text (:data:`OFFSETS`), or is left out.
    Ops without FLOPs (gathers, copies) have no place on a log axis.
    """
    path = _check_path(path)
    plt = _pyplot()
    points = [r for r in rows if r.flops > 0 and r.bytes > 0]
    if not points:
        raise CostModelError("roofline chart: no op has both FLOPs and bytes to place")
    dtype = dtype or dev.default_dtype()
    peak, bw = float(dev.peak(dtype)), float(dev.memory_bandwidth)
    ridge = peak / bw
    xs = [float(r.intensity) for r in points]
    lo, hi = min(min(xs), ridge) / 4, max(max(xs), ridge) * 4
    fig, ax = plt.subplots(figsize=(11, 6.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([lo, ridge, hi], [lo * bw, peak, peak], color="black", lw=2, label=f"{dev.name} roof ({dtype})")
    ax.axvspan(lo, ridge, color="tab:blue", alpha=0.07)
    ax.axvspan(ridge, hi, color="tab:red", alpha=0.07)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.text(ridge * 1.08, lo * bw, f"ridge I* = {ridge:.0f} FLOP/B", rotation=90, va="bottom", fontsize=9)
    ax.text(lo * 1.3, peak * 2.2, "memory-bound", color="tab:blue", fontsize=10)
    ax.text(hi / 1.3, peak * 2.2, "compute-bound", color="tab:red", fontsize=10, ha="right")
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for r, x in zip(points, xs):
        by_kind.setdefault(r.kind, []).append((x, min(peak, x * bw)))
    colours = plt.get_cmap("tab10")
    for i, (kind, mine) in enumerate(by_kind.items()):
        ax.scatter(
            [x for x, _ in mine],
            [y for _, y in mine],
            color=colours(i % 10),
            s=30,
            zorder=3,
            label=kind.replace("_", " "),
        )
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo * bw / 2, peak * 4)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title or f"roofline on {dev.about}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="op kind", title_fontsize=8)
    fig.tight_layout()
    _labels(fig, ax, points, xs, peak, bw)
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def _labels(fig, ax, points: Sequence[Bound], xs: Sequence[float], peak: float, bw: float) -> None:
    """Label the ops that matter (see :func:`roofline_chart`), each where it overlaps no text drawn before."""
    if len(points) > ALL_LABELLED:
        ranked = sorted(range(len(points)), key=lambda i: -float(points[i].time_s))[:LABELLED]
        chosen = [([points[i].name], xs[i]) for i in ranked]
    else:
        spots: dict[float, list] = {}  # ops at one spot share a stacked label
        for r, x in zip(points, xs):
            spots.setdefault(round(math.log10(x), 2), []).append((r.name, x))
        chosen = [([n for n, _ in members], members[0][1]) for _, members in sorted(spots.items())]
    renderer = fig.canvas.get_renderer()
    taken = [t.get_window_extent(renderer) for t in ax.texts]
    taken.append(ax.get_legend().get_window_extent(renderer))
    frame = ax.get_window_extent(renderer)
    for names, x in chosen:
        y = min(peak, x * bw)
        text = "\n".join(names)
        for dx, dy, ha, va in OFFSETS:
            a = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7, ha=ha, va=va)
            box = a.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(t) for t in taken):
                taken.append(box)
                break
            a.remove()


def memory_chart(parts: Mapping[str, int], path: str | Path, *, title: str = "memory", capacity: int | None = None):
    """Memory per device: a horizontal bar per component (decimal GB, each bar's value at its end) and the
    device's capacity as a dashed line, named in the legend; returns the Figure."""
    path = _check_path(path)
    plt = _pyplot()
    if not parts:
        raise CostModelError("memory chart: nothing to draw")
    names = list(parts)
    gb = [parts[n] / 1e9 for n in names]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(names)))
    ax.barh(names, gb, color="tab:blue")
    ax.invert_yaxis()  # the first component on top
    top = max(gb + ([capacity / 1e9] if capacity is not None else []))
    for i, v in enumerate(gb):
        ax.text(v + top * 0.01, i, f"{v:,.1f}", ha="left", va="center", fontsize=8)
    if capacity is not None:
        ax.axvline(capacity / 1e9, color="tab:red", ls="--", label=f"capacity {capacity / 1e9:,.0f} GB")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("GB per device (1e9 bytes)")
    ax.set_title(title)
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def _log_helps(values: Sequence[float], span: float = 100) -> bool:
    """A log scale where the values are all positive and the largest is more than ``span`` times the smallest."""
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return len(pos) == len([v for v in values if v is not None]) and len(pos) > 1 and max(pos) / min(pos) > span


def sweep_chart(
    columns: Mapping[str, Sequence], grid: Sequence[str], metric: str, path: str | Path, *, title: str = ""
):
    """``metric`` against the first grid axis, one line per value of the second (at most two axes; points a
    config makes invalid are left out); log scales where they help (x spanning more than a decade, y more
    than two). Returns the Figure."""
    path = _check_path(path)
    if not grid or len(grid) > 2:
        raise CostModelError(f"sweep chart: expected one or two grid axes, received {len(grid)} ({', '.join(grid)})")
    if metric not in columns:
        raise CostModelError(f"sweep chart: no column {metric!r}; expected one of {', '.join(columns)}")
    plt = _pyplot()
    x_name = grid[0]
    valid = list(columns.get("valid", [True] * len(columns[x_name])))
    series: dict[object, list[tuple[float, float]]] = {}
    for i, ok in enumerate(valid):
        y = columns[metric][i]
        if not ok or y is None:
            continue
        key = columns[grid[1]][i] if len(grid) == 2 else None
        series.setdefault(key, []).append((float(columns[x_name][i]), float(y)))
    if not series:
        raise CostModelError("sweep chart: no valid point to draw")
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, pts in series.items():
        pts.sort()
        ax.plot(
            [x for x, _ in pts],
            [y for _, y in pts],
            marker="o",
            ms=4,
            label=None if key is None else f"{grid[1]} = {key:,}" if isinstance(key, int) else f"{grid[1]} = {key}",
        )
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    if _log_helps(xs, 10):  # a grid of powers of two reads best on a base-2 axis
        ax.set_xscale("log", base=2)
    if _log_helps(ys):
        ax.set_yscale("log")
    ax.set_xlabel(x_name)
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} against {x_name}")
    if len(grid) == 2:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title=grid[1], title_fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def texts_overlap(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts of ``fig`` whose boxes overlap (titles, axis and tick labels, annotations, legend
    entries): what a legible chart has none of. Texts outside the figure (ticks matplotlib keeps beyond the
    limits) are not drawn and not counted."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib is present: fig is one of its figures
    from matplotlib.text import Text  # with the canvas above: matplotlib only when a chart is checked

    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: draw it again off screen
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    boxes = []
    for t in fig.findobj(Text):
        if not (t.get_visible() and t.get_text().strip()):
            continue
        box = t.get_window_extent(renderer)
        if box.width and box.x1 > whole.x0 and box.x0 < whole.x1 and box.y1 > whole.y0 and box.y0 < whole.y1:
            boxes.append((t.get_text(), box))
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1 :] if ba.overlaps(bb)]


def _save(fig, path) -> None:
    """Render the figure in memory, then write it atomically: a failed write (a full disk, a file-size limit)
    leaves an older chart at ``path`` whole. A path that cannot be written is a CostModelError."""
    import io  # only when a chart is drawn

    fmt = Path(path).suffix[1:].lower() or None
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt)
    except ValueError as exc:  # a format matplotlib does not write
        raise CostModelError(f"plot: cannot write {str(path)!r}: {exc}") from None
    try:
        write_atomic(path, buf.getvalue(), "plot")
    except CostModelError as exc:
        raise CostModelError(f"plot: {exc}") from None
