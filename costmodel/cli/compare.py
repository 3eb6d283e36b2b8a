"""``costmodel compare MODEL``: training FLOPs and memory under named conventions, side by side."""

from __future__ import annotations

import argparse

from ..analysis import as_int, evaluate
from ..conventions import CONVENTIONS, compare
from ..report import resolve
from ..symbols import B, T
from ._common import add_model_args, dump_json, nbytes, positive_int, sci, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="training FLOPs under named conventions (6ND, Kaplan, PaLM, ...)",
                       description="One model's training FLOPs and memory under named counting conventions, "
                                   "each derived from the same graph, with exact symbolic differences.")
    add_model_args(p)
    p.add_argument("--conventions", default=",".join(CONVENTIONS), metavar="A,B,...",
                   help=f"conventions to compare, the first is the reference (default: {','.join(CONVENTIONS)})")
    p.add_argument("--batch", type=positive_int("--batch"), help="sequences per step, B (default 1)")
    p.add_argument("--seq", type=positive_int("--seq"), help="tokens per sequence, T (default: the model's context)")
    p.add_argument("--tokens", type=positive_int("--tokens"), help="training tokens D: FLOPs for the whole run")
    p.add_argument("--json", action="store_true", help="one JSON object: exact integers and formulas")
    p.set_defaults(run=run)


def table(model: str, names: list[str], batch: int | None = None, seq: int | None = None,
          config: dict | None = None, tokens: int | None = None) -> dict:
    """Exact numbers and formulas per convention (the ``--json`` shape)."""
    m, values = resolve(model, batch=batch, seq=seq, settings=config)
    rows = compare(m.graph, names)
    step_tokens = values[B] * values[T]
    out = {"model": m.name, "config": {str(k): v for k, v in sorted(values.items(), key=lambda kv: str(kv[0]))},
           "reference": names[0], "conventions": {}}
    for name, q in rows.items():
        c = CONVENTIONS[name]
        number = {k: as_int(evaluate(q[k], values, f"{name}: {k}"), k) for k in
                  ("flops.training", "memory_bytes.model_states", "memory_bytes.activations", "memory_bytes.total")}
        if tokens is not None:  # every term of a step's FLOPs carries B*T, so per token × D is exact
            number["flops.training_total"] = number["flops.training"] * tokens // step_tokens
        out["conventions"][name] = {
            "about": c.about, "source": c.source, **number,
            "flops.per_token": str(q["flops.per_token"]),
            "flops.per_token_minus_reference": str(q["per_token_minus_first"]),
        }
    return out


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.conventions.split(",") if n.strip()]
    r = table(args.model, names, args.batch, args.seq, settings(args), args.tokens)
    print(dump_json(r) if args.json else text(r))
    return 0


def text(r: dict) -> str:
    key = "flops.training_total" if any("flops.training_total" in c for c in r["conventions"].values()) \
        else "flops.training"
    ref = r["conventions"][r["reference"]][key]
    cfg = " ".join(f"{k}={v}" for k, v in r["config"].items())
    what = "training FLOPs for the run" if key.endswith("total") else "training FLOPs per step"
    w = max(len("convention"), *map(len, r["conventions"]))
    lines = [f"{r['model']}  {cfg}", f"{what} under each convention (reference: {r['reference']})",
             f"  {'convention':<{w}} {'FLOPs':>10} {'÷ ref':>7}  {'memory (states + activations)':<32} source"]
    for name, c in r["conventions"].items():
        ratio = c[key] / ref if ref else float("nan")
        lines.append(f"  {name:<{w}} {sci(c[key]):>10} {ratio:>7.4f}  {nbytes(c['memory_bytes.total']):<32} "
                     f"{c['source']}")
    lines.append(f"per token, minus {r['reference']} (exact; B = batch, T = sequence, L, d, h, V, ... as in 'derive'):")
    for name, c in r["conventions"].items():
        if name != r["reference"]:
            lines.append(f"  {name:<{w}} {c['flops.per_token_minus_reference']}")
    lines.append(f"per token under {r['reference']}: {r['conventions'][r['reference']]['flops.per_token']}")
    return "\n".join(lines)
