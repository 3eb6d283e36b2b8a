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
        raise CostModelError(f"plot file {str(path)!r}: expected a name ending in {', '.join(FORMATS)}, "
                             f"received {p.suffix or 'no suffix'!r}")
    return p


def roofline_chart(rows: Sequence[Bound], dev: Device, path: str | Path, *, title: str = "",
                   dtype: str | None = None):
    """Log-log roofline of ``rows`` on ``dev``, each op a labelled point; returns the Figure.

    The roofs are min(peak, I × bandwidth); the region left of the ridge point
    (memory-bound) is shaded. A point sits at (intensity, attainable FLOP/s)
    and is labelled with its op name (ops at the same spot share a stacked
    label). Ops without FLOPs (gathers, copies) have no place on a log axis.
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
    fig, ax = plt.subplots(figsize=(10, 6.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([lo, ridge, hi], [lo * bw, peak, peak], color="black", lw=2, label=f"{dev.name} roof ({dtype})")
    ax.axvspan(lo, ridge, color="tab:blue", alpha=0.07)
    ax.axvspan(ridge, hi, color="tab:red", alpha=0.07)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.text(ridge * 1.08, lo * bw, f"ridge I* = {ridge:.0f} FLOP/B", rotation=90, va="bottom", fontsize=9)
    ax.text(lo * 1.3, peak * 2.2, "memory-bound", color="tab:blue", fontsize=10)
    ax.text(hi / 1.3, peak * 2.2, "compute-bound", color="tab:red", fontsize=10, ha="right")
    groups: dict[tuple, list] = {}  # ops at the same spot share one stacked label
    for r, x in zip(points, xs):
        groups.setdefault((round(math.log10(x), 2), r.bound), []).append((r, x))
    for i, ((_, side), members) in enumerate(sorted(groups.items())):
        x = members[0][1]
        y = min(peak, x * bw)
        names = [r.name for r, _ in members]
        label = "\n".join(names[:16] + ([f"(+{len(names) - 16} more)"] if len(names) > 16 else []))
        color = "tab:red" if side == "compute" else "tab:blue"
        ax.scatter([x], [y], color=color, s=30, zorder=3)
        below = i % 2 == 0  # neighbours alternate sides of the roof so their labels do not collide
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, -6) if below else (-6, 6), fontsize=7,
                    va="top" if below else "bottom", ha="left" if below else "right")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo * bw / 2, peak * 4)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title or f"roofline on {dev.about}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


def memory_chart(parts: Mapping[str, int], path: str | Path, *, title: str = "memory", capacity: int | None = None):
    """A bar per memory component (bytes shown in decimal GB); ``capacity`` draws the device's line."""
    path = _check_path(path)
    plt = _pyplot()
    if not parts:
        raise CostModelError("memory chart: nothing to draw")
    fig, ax = plt.subplots(figsize=(8, 5))
    names = list(parts)
    gb = [parts[n] / 1e9 for n in names]
    ax.bar(names, gb, color="tab:blue")
    for i, v in enumerate(gb):
        ax.text(i, v, f"{v:,.1f}", ha="center", va="bottom", fontsize=8)
    if capacity is not None:
        ax.axhline(capacity / 1e9, color="tab:red", ls="--", label=f"capacity {capacity / 1e9:,.0f} GB")
        ax.legend()
    ax.set_ylabel("GB (1e9 bytes)")
    ax.set_title(title)
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, selectable
        _save(fig, path)
    plt.close(fig)
    return fig


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
