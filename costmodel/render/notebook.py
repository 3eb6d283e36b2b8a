"""Results in Jupyter, answer first: an estimate renders as the summary of the documents and a table of every
number with its name, its unit and its exact value; a sweep as a table of its rows (pandas: ``to_pandas``).

The summary reads only the estimate's own keys (the device from ``time.hardware``, the choices from
``conventions.*`` and ``memory.layout.*``), so a result renders without the options that made it.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from . import names, summary

#: Rows of a sweep shown in a notebook before "… more rows".
SWEEP_ROWS = 40


def facts_of(flat: Mapping[str, object]) -> dict[str, object]:
    """:func:`~costmodel.render.summary.facts`, read off an estimate's keys."""
    hardware = flat.get("time.hardware")
    capacity = None
    if hardware is not None:
        from ..devices.table import device  # the hardware table: read when an estimate has a device

        capacity = int(device(str(hardware)).memory_bytes)
    shards = " × ".join(
        f"{k} {flat[f'memory.layout.{k}']}"
        for k in ("dp", "tp", "pp", "sp", "ep")
        if flat.get(f"memory.layout.{k}", 1) > 1
    )
    zero = flat.get("memory.layout.zero", 0)
    return {
        "model": flat["model"],
        "family": flat["family"],
        "precision": flat.get("conventions.precision"),
        "optimizer": flat.get("conventions.optimizer"),
        "inference": "memory_bytes.kv_cache" in flat,
        "hardware": hardware,
        "capacity": capacity,
        "basis": flat.get("time.basis"),
        "layout": shards + (f", ZeRO-{zero}" if zero else ""),
    }


def _rows(rows) -> str:
    return "".join("<tr>" + "".join(f"<{t}>{c}</{t}>" for t, c in row) + "</tr>" for row in rows)


def estimate_html(flat: Mapping[str, object]) -> str:
    """The summary box, then every number: what it is, its key, the number in its unit, the exact value."""
    parts = summary.parts_from(flat, None, {}, 1)
    box = summary.summary(flat, facts_of(flat), parts)
    box = [row for row in box if row[1] != "-"]  # the binding resource of a step needs its ops: in report()
    head = _rows((("th", html.escape(k)), ("td", html.escape(v))) for k, v in box)
    body = _rows(
        (
            ("td", html.escape(names.label(k))),
            ("td", f"<code>{html.escape(k)}</code>"),
            ("td", html.escape(names.show(k, v))),
            ("td", html.escape(repr(v) if isinstance(v, float) else str(v))),
        )
        for k, v in flat.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    )
    return (
        f"<div class='costmodel'><table><caption>costmodel estimate: {html.escape(str(flat['model']))}</caption>"
        f"<tbody>{head}</tbody></table><table><thead><tr><th>quantity</th><th>key</th><th>value</th>"
        f"<th>exact</th></tr></thead><tbody>{body}</tbody></table></div>"
    )


def sweep_html(columns: Mapping[str, list], title: str) -> str:
    """The sweep's rows as a table (the first :data:`SWEEP_ROWS`, then how many more)."""
    keys = list(columns)
    n = len(columns[keys[0]]) if keys else 0
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(k, columns[k][i]))}</td>" for k in keys) + "</tr>"
        for i in range(min(n, SWEEP_ROWS))
    )
    more = f"<p>… {n - SWEEP_ROWS:,} more rows (to_pandas() or to_json() for all)</p>" if n > SWEEP_ROWS else ""
    return (
        f"<table><caption>{html.escape(title)}: {n:,} configs</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>{more}"
    )


def _cell(key: str, v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str) or v is None:
        return "-" if v is None else v
    return names.show(key, v) if "." in key else f"{v:,}" if isinstance(v, int) else f"{v:.4g}"
