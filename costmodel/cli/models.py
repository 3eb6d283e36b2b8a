"""``costmodel models``: the families and presets, with their parameter counts."""

from __future__ import annotations

import argparse
import json

import costmodel


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list architecture families and presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cat = costmodel.models()
    if args.json:
        print(
            json.dumps(
                {"families": cat["families"], "presets": cat["presets"], "model_types": cat["model_types"]}, indent=2
            )
        )
        return 0
    print("families: " + ", ".join(f"{name} ({about})" for name, about in cat["families"].items()))
    # the columns as wide as their longest entry (vit-base-patch16-224-in21k pushed the counts right)
    name = max((len(r["name"]) for r in cat["presets"]), default=0)
    family = max((len(r["family"]) for r in cat["presets"]), default=0)
    for r in cat["presets"]:
        active = f"  ({r['active_params']:,} active)" if r["active_params"] != r["params"] else ""
        print(f"  {r['name']:<{name}} {r['family']:<{family}} {r['params']:>18,}  {r['about']}{active}")
    return 0
