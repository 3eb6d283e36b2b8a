"""Plots (the optional ``plot`` extra: ``pip install costmodel[plot]``).

matplotlib is imported inside each function, never at module import, so the
rest of costmodel (and ``costmodel estimate``) starts without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import units
from ..devices.table import Device
from ..errors import CostModelError
from ..files import write_atomic
from ..timing.roofline import Bound
from .names import label, unit

FORMATS = (".png", ".svg", ".pdf")


def _pyplot():
    try:
        import matplotlib  # the optional plot extra: imported only when a chart is drawn
    except ModuleNotFoundError:
        raise CostModelError("plotting needs matplotlib: pip install 'costmodel[plot]'") from None
    matplotlib.use("Agg", force=True)  # files only, no display
    import matplotlib.pyplot as plt  # after choosing the Agg backend above

    return plt


def check_path(path: str | Path) -> Path:
    """A chart's file name, refused unless it ends in one of :data:`FORMATS`."""
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
    (0, 24, "center", "bottom"),
    (0, -24, "center", "top"),
    (14, 36, "left", "bottom"),
    (-14, -36, "right", "top"),
    (-14, 36, "right", "bottom"),
    (14, -36, "left", "top"),
    (0, 48, "center", "bottom"),
    (0, -48, "center", "top"),
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
    path = check_path(path)
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
    every = [(x, min(peak, x * bw)) for x in xs]  # no label over a point, its own or another's
    _place(fig, ax, [("\n".join(names), x, min(peak, x * bw)) for names, x in chosen], avoid=every, arrows=True)


def _place(fig, ax, labels: Sequence[tuple[str, float, float]], offsets=OFFSETS, *, avoid=(), arrows=False):
    """Annotate each (text, x, y) at the first of ``offsets`` where it stays inside the axes and overlaps no
    text drawn before (the axes' texts, the legend, the labels placed so far) nor a point of ``avoid`` (data
    coordinates); a label that fits nowhere is left out. ``arrows`` joins a label to its point. Returns the
    texts placed."""
    from matplotlib.text import Text  # matplotlib is present: fig is one of its figures
    from matplotlib.transforms import Bbox  # with the Text above

    renderer = fig.canvas.get_renderer()
    taken = [t.get_window_extent(renderer) for t in ax.texts]
    r = 4  # a marker's half-width in pixels, near enough
    dots = [Bbox.from_extents(px - r, py - r, px + r, py + r) for px, py in ax.transData.transform(list(avoid))]
    arrow = {"arrowstyle": "-", "color": "gray", "lw": 0.6, "shrinkA": 0, "shrinkB": 4} if arrows else None
    if ax.get_legend() is not None:
        taken.append(ax.get_legend().get_window_extent(renderer))
    frame = ax.get_window_extent(renderer)
    placed: list[str] = []
    arrows_drawn: list[tuple[float, float]] = []  # pixels along the arrows drawn so far
    for text, x, y in labels:
        for dx, dy, ha, va in offsets:
            near = math.hypot(dx, dy) < 15  # a label beside its point needs no arrow
            a = ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                fontsize=7,
                ha=ha,
                va=va,
                arrowprops=None if near else arrow,
            )
            a.update_positions(renderer)  # where the offset puts the text, before measuring it
            box = Text.get_window_extent(a, renderer)  # the text alone (an annotation's box spans its arrow)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            line = [] if near or arrow is None else _along(ax.transData.transform((x, y)), box)
            crossed = any(t.contains(px, py) for px, py in line for t in taken) or any(
                box.contains(px, py) for px, py in arrows_drawn
            )  # an arrow through a label, this one's or an earlier one's
            if inside and not crossed and not any(box.overlaps(t) for t in taken + dots):
                arrows_drawn += line
                taken.append(box)
                placed.append(text)
                break
            a.remove()
    return placed


def _along(point, box, start: float = 4) -> list[tuple[float, float]]:
    """Pixels along the arrow matplotlib draws from the middle of the label's ``box`` to ``point``, outside the
    box and past the first ``start`` pixels from the point (the marker): one every two pixels."""
    px, py = point
    ex, ey = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    length = math.hypot(ex - px, ey - py)
    steps = max(1, int(length / 2))
    along = [
        (px + (ex - px) * i / steps, py + (ey - py) * i / steps) for i in range(steps) if i * length / steps > start
    ]
    return [(x, y) for x, y in along if not box.contains(x, y)]


def memory_chart(parts: Mapping[str, int], path: str | Path, *, title: str = "memory", capacity: int | None = None):
    """Memory per device: a horizontal bar per component (decimal GB, each bar's value at its end) and the
    device's capacity as a dashed line, named in the legend; returns the Figure."""
    path = check_path(path)
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
    path = check_path(path)
    if not grid or len(grid) > 2:
        raise CostModelError(f"sweep chart: expected one or two grid axes, received {len(grid)} ({', '.join(grid)})")
    if metric not in columns:
        raise CostModelError(f"sweep chart: no column {metric!r}; expected one of {', '.join(columns)}")
    plt = _pyplot()
    x_name = grid[0]
    # bytes in decimal GB, as every report writes them (the axis read 1e11 of raw bytes); a time as the quantity
    # and its unit, "compute time of a step (s)", not the key's "time.compute_s" read as "compute s"
    scale, y_label = (
        (1e9, f"{metric} (GB, 1e9 bytes)")
        if unit(metric) == "bytes"
        else (1, f"{label(metric)} (s)")
        if unit(metric) == "seconds"
        else (1, metric)
    )
    valid = list(columns.get("valid", [True] * len(columns[x_name])))
    series: dict[object, list[tuple[float, float]]] = {}
    for i, ok in enumerate(valid):
        y = columns[metric][i]
        if not ok or y is None:
            continue
        key = columns[grid[1]][i] if len(grid) == 2 else None
        series.setdefault(key, []).append((float(columns[x_name][i]), float(y) / scale))
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
    ax.set_ylabel(y_label)
    ax.set_title(title or f"{metric} against {x_name}")
    if len(grid) == 2:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title=grid[1], title_fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def _layout_name(row: Mapping[str, object]) -> str:
    """One layout of ``costmodel plan`` in a line: ``tp 2 pp 4 dp 8 mb 1 m 16, ZeRO-1, 1f1b, recompute none``."""
    sizes = " ".join(f"{k} {row[k]}" for k in ("tp", "pp", "dp", "cp", "vpp") if k in ("tp", "pp", "dp") or row[k] > 1)
    return (
        f"{sizes} mb {row['micro_batch']} m {row['micro_batches']}, ZeRO-{row['zero']}, {row['schedule']}, "
        f"recompute {row['recompute']}"
    )


#: Where a plan chart's two-line labels may go around their point (points), an arrow joining them: above or
#: below it first (a short, upright arrow, whose box hides little), then beside it.
PLAN_OFFSETS = tuple(
    (0, dy, "center", "bottom" if dy > 0 else "top") for dy in (20, 44, 68, 92, 116, 140, -20, -44)
) + tuple(
    (dx, dy, "left" if dx > 0 else "right", "bottom" if dy > 0 else "top")
    for dy in (16, 40, 64, -16, -40, 88, 112)
    for dx in (12, -12)
)


def plan_chart(result: Mapping[str, object], path: str | Path, *, capacity: int | None = None):
    """Predicted step time against memory per device for the layouts of a ``costmodel plan`` result
    (``chart`` when the plan kept more for the chart, else ``layouts``, and the ``pareto`` front): the front
    joined and marked, the device's capacity dashed, and a few points named: the fastest layout, the one of
    least memory on the front, and the fastest within half the capacity, each with its step and memory.
    Returns the Figure."""
    path = check_path(path)
    rows = list(result.get("chart") or result["layouts"])
    front = sorted(result["pareto"], key=lambda r: r["memory_bytes"])
    if not rows and not front:
        raise CostModelError("plan chart: no layout fits, nothing to draw")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    gb = [r["memory_bytes"] / 1e9 for r in rows]
    ax.scatter(
        gb,
        [r["step_s"] for r in rows],
        s=14,
        color="tab:gray",
        alpha=0.6,
        zorder=2,
        label=f"{len(rows):,} fastest fitting layouts",
    )
    ax.plot(
        [r["memory_bytes"] / 1e9 for r in front],
        [r["step_s"] for r in front],
        color="tab:red",
        marker="o",
        ms=5,
        lw=1.5,
        zorder=3,
        drawstyle="steps-post",
        label=f"Pareto front ({units.plural(len(front), 'layout')})",
    )
    every = rows + front
    if capacity is not None:
        ax.axvline(capacity / 1e9, color="black", ls="--", lw=1, label=f"capacity {units.gb(capacity)}")
    if _log_helps([r["step_s"] for r in every]):
        ax.set_yscale("log")
    if _log_helps([r["memory_bytes"] for r in every] + ([capacity] if capacity is not None else [])):
        ax.set_xscale("log")  # a small model on a large device: its layouts would crowd into one column
    ax.set_xlabel("memory per device (GB, 1e9 bytes)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(
        f"{result['model']} on {units.devices(result['devices'])} × {result['hardware']}: step time against memory"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    named: list[tuple[str, Mapping[str, object]]] = [("fastest", min(every, key=lambda r: r["step_s"]))]
    if front:
        named.append(("least memory", front[0]))
    if capacity is not None:
        half = [r for r in every if r["memory_bytes"] <= capacity / 2]
        if half:
            named.append(("fastest in half the memory", min(half, key=lambda r: r["step_s"])))
    seen, labels = set(), []
    for what, r in named:
        key = _layout_name(r)
        if key in seen:
            continue
        seen.add(key)
        text = f"{what}: {units.duration(r['step_s'])}, {units.gb(r['memory_bytes'])}\n{key}"
        labels.append((text, r["memory_bytes"] / 1e9, r["step_s"]))
        ax.scatter([r["memory_bytes"] / 1e9], [r["step_s"]], s=60, facecolors="none", edgecolors="black", zorder=4)
    points = [(r["memory_bytes"] / 1e9, r["step_s"]) for r in every]
    _place(fig, ax, labels, PLAN_OFFSETS, avoid=points, arrows=True)
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def texts_overlap(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts of ``fig`` whose boxes overlap (titles, axis and tick labels, annotations, legend
    entries): what a legible chart has none of. Texts outside the figure (ticks matplotlib keeps beyond the
    limits) are not drawn and not counted. An annotation is measured by its text alone: the box matplotlib
    gives it spans its arrow too, which is a line, not text."""
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
        box = Text.get_window_extent(t, renderer)  # an Annotation's own extent includes its arrow (drawn above)
        if box.width and box.x1 > whole.x0 and box.x0 < whole.x1 and box.y1 > whole.y0 and box.y0 < whole.y1:
            boxes.append((t.get_text(), box))
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1 :] if ba.overlaps(bb)]


def texts_over_markers(fig) -> list[tuple[str, tuple[float, float]]]:
    """(text, point) for each drawn text of ``fig``'s axes (labels, annotations, notes) whose box overlaps the
    box of a scatter marker (its size from the collection, in display pixels): a label drawn over a point
    hides it. Measured with the renderer's extents, as :func:`texts_overlap`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib is present: fig is one of its figures
    from matplotlib.collections import PathCollection  # with the canvas above
    from matplotlib.text import Text  # with the canvas above
    from matplotlib.transforms import Bbox  # with the canvas above

    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: draw it again off screen
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        marks = []
        for c in ax.collections:
            if not isinstance(c, PathCollection) or not len(c.get_offsets()):
                continue
            sizes = c.get_sizes()  # marker areas in points²
            pixels = c.get_offset_transform().transform(c.get_offsets())
            for i, ((px, py), point) in enumerate(zip(pixels, c.get_offsets())):
                r = math.sqrt(sizes[i % len(sizes)] if len(sizes) else 36) / 2 * fig.dpi / 72
                marks.append((Bbox.from_extents(px - r, py - r, px + r, py + r), (float(point[0]), float(point[1]))))
        for t in ax.texts:
            if not (t.get_visible() and t.get_text().strip()):
                continue
            box = Text.get_window_extent(t, renderer)  # the text alone, not an annotation's arrow
            out += [(t.get_text(), point) for mark, point in marks if box.overlaps(mark)]
    return out


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
