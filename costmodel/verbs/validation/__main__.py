"""``python -m costmodel.verbs.validation [--write PATH] [--group G]``: print or write docs/validation.md."""

from __future__ import annotations

import argparse
import sys

from ...files import write_atomic
from . import stacks as stacks_
from .validation import leave_one_out, percent, predict, render, runs


def main(argv: list[str] | None = None) -> int:
    """``python -m costmodel.verbs.validation [--write PATH] [--group G]``: print or write the document."""
    p = argparse.ArgumentParser(prog="python -m costmodel.verbs.validation")
    p.add_argument("--write", metavar="PATH")
    p.add_argument("--group", action="append", help="only these groups")
    a = p.parse_args(argv)
    chosen = [r for r in runs() if not a.group or r["group"] in a.group]
    rows = []
    for i, run in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {run['id']}", file=sys.stderr, flush=True)
        rows.append(predict(run))
    loo, stacks, by_stack = [], [], []
    if not a.group:  # the whole document: the leave-one-out and stack sections too
        print("leave one out, and one source out...", file=sys.stderr, flush=True)
        loo = leave_one_out(rows)
        fits, loso, oos = stacks_.stack_view(rows, loo)
        stacks = [r for r in loso if r.row.run["stack"] == "megatron-deepspeed"]
        by_stack = stacks_.render(rows, fits, oos, percent)
    text = render(rows, loo, stacks, by_stack)
    if a.write:
        write_atomic(a.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
