"""``costmodel models``: the families and presets, with their parameter counts."""

from __future__ import annotations

import argparse

from ..analysis import as_int, evaluate, totals
from ..models import families, load
from ._common import dump_json


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list architecture families and presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = []
    for fam in families().values():
        for preset in fam.presets:
            m = load(preset.name)
            t = totals(m.graph)
            n = as_int(evaluate(t.params, m.values), "params")
            active = n if t.params_active is None else as_int(evaluate(t.params_active, m.values), "active params")
            rows.append({"name": preset.name, "family": fam.name, "params": n, "active_params": active,
                         "about": preset.about, "source": preset.source})
    if args.json:
        print(dump_json({"families": {f.name: f.about for f in families().values()}, "presets": rows}))
        return 0
    print("families: " + ", ".join(f"{f.name} ({f.about})" for f in families().values()))
    for r in rows:
        active = f"  ({r['active_params']:,} active)" if r["active_params"] != r["params"] else ""
        print(f"  {r['name']:<18} {r['family']:<12} {r['params']:>18,}  {r['about']}{active}")
    return 0
