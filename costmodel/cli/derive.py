"""``costmodel derive ARCH``: the symbolic formulas behind the numbers.

``costmodel derive --from-config-class transformers:Qwen3Config --sizes hidden_size,num_hidden_layers,...``
traces the class at a few small configs and recovers its formulas in those sizes (``costmodel.recover``;
needs torch and transformers).
"""

from __future__ import annotations

import argparse
import json

import costmodel

from ._common import add_counting_args, add_memory_args, add_model_args, options, settings


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "derive",
        help="symbolic formulas of an architecture",
        description="Symbolic formulas (parameters, FLOPs, bytes, memory) of an architecture: every "
        "number 'estimate' gives under the same options, as an expression.",
    )
    add_model_args(p, optional=True)
    p.add_argument("--format", default="text", choices=["text", "latex", "json", "markdown"])
    p.add_argument(
        "--standalone",
        action="store_true",
        help="with --format latex: a whole document pdflatex compiles (article, amsmath, amssymb, booktabs)",
    )
    v = p.add_argument_group("what to show (exact views of the formulas)")
    v.add_argument(
        "--keys", metavar="PATTERNS", help="only these expressions: comma-separated keys or patterns (flops.*)"
    )
    v.add_argument(
        "--leading",
        action="store_true",
        help="each expression's leading terms and the share they cover at the model's (or its family's first preset's) config",
    )
    v.add_argument("--per-token", action="store_true", help="every expression divided by the tokens of a step (B*T)")
    v.add_argument(
        "--per-layer", action="store_true", help="the part of each expression one layer adds (its coefficient of L)"
    )
    v.add_argument("--rename", metavar="OLD=NEW,...", help="symbols in a paper's notation: --rename d=h,T=s")
    v.add_argument(
        "--explain", action="store_true", help="each term with the ops that contribute it (parameters, FLOPs, bytes)"
    )
    g = p.add_argument_group("formulas of a transformers config class (traced; needs costmodel[torch])")
    g.add_argument(
        "--from-config-class",
        metavar="CLASS",
        help="e.g. transformers:Qwen3Config: trace the class at small configs and recover its formulas "
        "exactly in --sizes (no MODEL then)",
    )
    g.add_argument(
        "--sizes",
        metavar="FIELDS",
        help="config fields to keep symbolic, comma-separated (hidden_size,num_hidden_layers,...)",
    )
    g.add_argument("--samples", type=int, default=6, help="configs to fit at (default 6; 2 more check the fit)")
    add_counting_args(p)
    add_memory_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    model = args.model
    if args.from_config_class:
        if not args.sizes or args.model is not None:
            raise costmodel.CostModelError(
                "derive --from-config-class: expected no MODEL, and the config fields "
                "to recover with --sizes hidden_size,num_hidden_layers,..."
            )
        sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
        model = costmodel.recover(args.from_config_class, sizes, samples=args.samples).model
    elif args.sizes:
        raise costmodel.CostModelError("derive: --sizes goes with --from-config-class")
    elif model is None:
        raise costmodel.CostModelError(
            "derive: expected MODEL (a preset, a family, a config.json or file.py:builder), or --from-config-class"
        )
    if args.standalone and args.format != "latex":
        raise costmodel.CostModelError("derive: --standalone goes with --format latex")
    r = costmodel.derive(model, settings=settings(args), options=options(args))
    r = r.view(keys=args.keys, per_token=args.per_token, per_layer=args.per_layer, rename=args.rename)
    title = f"costmodel derive {args.from_config_class or args.model}"
    show(r, args.format, title, standalone=args.standalone, explain=args.explain, leading=args.leading)
    return 0


def show(r, fmt: str, title: str, *, standalone: bool = False, explain: bool = False, leading: bool = False) -> None:
    """Print a derivation as text (formulas, then per-op costs), LaTeX (a fragment, or a ``standalone``
    document) or JSON; ``explain``: each term's ops (JSON key ``explain``); ``leading``: each expression's
    leading terms and their share (JSON key ``leading``)."""
    if fmt == "json":
        out = r.to_dict()
        if explain:
            out["explain"] = r.explain()
        if leading:
            out["leading"] = r.leading()
        print(json.dumps(out, indent=2, allow_nan=False, default=str))  # default: a leading term's expression
    elif fmt == "latex":
        print(r.to_latex(title, standalone=standalone, leading=leading, explain=explain))
    elif fmt == "markdown":
        print(r.to_markdown(explain=explain), end="")
    elif leading:
        rows = r.leading()
        width = max(map(len, rows), default=0)
        print(f"{r['model']}: leading terms at {r.at[0] if r.at else '?'}")
        for k, row in rows.items():
            print(f"{k:<{width}} ≈ {row['expression']}   ({100 * row['share']:.1f}%)")
    else:
        shown = {k: v for k, v in r["expressions"].items() if len(str(v)) <= 2000}
        width = max(map(len, shown))
        print(f"{r['model']} ({r['family']}); symbols: " + ", ".join(r["symbols"]))
        for k, v in shown.items():
            print(f"{k:<{width}} = {v}")
        left = [k for k in r["expressions"] if k not in shown]
        if left:
            print(f"(too long to print here, see --format json: {', '.join(left)})")
        if explain:
            print("\n" + r.explain_text())
        print("\nper op (forward, one run; count = runs per step):")
        for name, row in r["ops"].items():
            print(f"  {name:<28} {row['kind']:<12} x{row['count']!s:<4} flops {row['flops']}")
