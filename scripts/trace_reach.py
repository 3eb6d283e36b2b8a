"""How many of transformers' causal-LM model types ``costmodel`` traces exactly (issue 27's bar: 170 of 196).

For each model type behind ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, in a child process of ``--per-process`` types
(a hang or a crash is one type's result, bounded by ``--timeout``): its config built small from its class
(:func:`costmodel.tracer.hf.small_config`: width 64, 2 layers, 4 heads, vocabulary 128, position tables 4096,
and the few fields of :data:`OVERRIDES` a class needs to build), the causal LM on meta, traced by
:func:`costmodel.tracer.hf.trace_causal_lm` (a symbolic B and T; where torch.export cannot keep T symbolic,
exported at several fixed T and T fitted exactly: :mod:`costmodel.tracer.over_t`), then counted at two sizes
the fit never saw (the graph's totals with the numbers put in, as ``estimate`` derives them) and compared with PyTorch: matmul FLOPs of one forward and of forward + backward by
``FlopCounterMode`` under a FakeTensorMode, and parameters by ``numel``. A type counts as *exact* when all three
agree at both sizes.

    python scripts/trace_reach.py --out /tmp/reach.jsonl            # every type, minutes to an hour
    python scripts/trace_reach.py --types llama,aria_text --out -   # some
    python scripts/trace_reach.py --summary /tmp/reach.jsonl --write-docs   # the reach section of docs/tracer.md

Each line of ``--out`` is one type's JSON record; the summary is printed at the end (and can be printed again
from the file with ``--summary FILE``). Needs ``costmodel[torch]`` (torch 2.13.0, transformers 5.24.0).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Fields a config class needs besides the small sizes to build (its own validation) or to export.
OVERRIDES: dict[str, dict] = {
    "mamba2": {"num_heads": 4, "head_dim": 32, "n_groups": 1},
    "bamba": {"mamba_n_heads": 8, "mamba_d_head": 16},
    "mistral": {"sliding_window": None},
    "mixtral": {"sliding_window": None},
    # each a field the class's own validation asks for beside the small sizes
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},  # one global and one local layer, as 2 layers
    "zaya": {"num_experts_per_tok": 1},  # "ZAYA currently supports num_experts_per_tok=1 only"
    "dots3_note_text": {"num_key_value_heads": 4},  # "num_key_value_heads must match num_attention_heads"
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [32, 32]},  # is_decoder for its LM head; the
    # axial position embeddings' widths sum to hidden_size
    "zamba": {"num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"]},  # its
    # shared transformer is tied across hybrid layers: two of them
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # None by default, indexed per layer
    # its last 15 layers share the caches of earlier ones (more than 2 layers have) and its per-layer inputs are
    # sized by a vocabulary of their own
    "gemma3n_text": {
        "num_kv_shared_layers": 0,
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 16,
        "laurel_rank": 8,
    },
    # its rotary embedding reads its parameters by layer type, which the class leaves empty
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
}


def one(model_type: str) -> dict:
    """Trace ``model_type`` and compare it with PyTorch (run in a child process)."""
    sys.path.insert(0, ROOT)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    import costmodel
    from costmodel.tracer.hf import causal_lm, chunk_of, small_config, trace_causal_lm
    from tests.trace.models import _conv_backward

    out: dict = {"type": model_type}
    t0 = time.perf_counter()
    try:
        config = small_config(model_type, max_position_embeddings=4096, **OVERRIDES.get(model_type, {}))
        model = causal_lm(config)
    except Exception as exc:  # a config or model transformers cannot build small on meta
        return {**out, "result": "not built", "why": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        m = trace_causal_lm(config)
    except costmodel.CostModelError as exc:
        text = str(exc)
        if "_TimeoutError" in text:  # the alarm went off inside torch.export, which reported it as its failure
            raise _TimeoutError from None
        last = text.rpartition("failed too: ")[2]  # the fixed-T exports' own reason, when they were tried
        stage = "torch.export" if "torch.export could not export" in last else "costmodel"
        why = text if len(text) <= 1200 else f"{text[:400]} … {text[-800:]}"  # torch's reason, and the fit's
        return {**out, "result": f"refused ({stage})", "why": why, "s": round(time.perf_counter() - t0, 1)}
    out["fixed_T"] = "fixed_T" in m.graph.graph["traced"]
    if out["fixed_T"]:
        fixed = m.graph.graph["traced"]["fixed_T"]
        out["fit"] = fixed.get("fit", "op by op")
        out["T"] = fixed["fitted"] + fixed["checked"]
    step = chunk_of(config)
    fixed = {torch.ops.aten.convolution_backward: _conv_backward}
    numel = sum(p.numel() for p in model.parameters())
    wrong = []
    for batch, seq in ((2, 10 * step), (3, 13 * step)):  # multiples of the chunk, never a fitted T
        ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                with FlopCounterMode(display=False, custom_mapping=fixed) as forward:
                    loss = model(input_ids=ids, labels=ids.clone()).loss
                with FlopCounterMode(display=False, custom_mapping=fixed) as backward:
                    loss.backward()
        except Exception as exc:
            return {**out, "result": "no reference", "why": f"{type(exc).__name__}: {exc}"[:300]}
        theirs = (forward.get_total_flops(), forward.get_total_flops() + backward.get_total_flops(), numel)
        try:
            ours = engine(m, batch, seq)
        except costmodel.CostModelError as exc:
            return {**out, "result": "estimate refused", "why": str(exc)[:300]}
        if ours != theirs:
            wrong.append({"B": batch, "T": seq, "costmodel": ours, "torch": theirs})
    out["s"] = round(time.perf_counter() - t0, 1)
    return {**out, "result": "wrong" if wrong else "exact", **({"wrong": wrong} if wrong else {})}


def engine(m, batch: int, seq: int) -> tuple[int, int, int]:
    """costmodel's matmul FLOPs (forward, forward + backward) and parameters of ``m`` at B, T: the graph's totals
    with the numbers put in (what ``estimate`` derives, without its memory and time sections)."""
    from costmodel.graph.analysis import as_int, check_values, evaluate, totals
    from costmodel.symbols import B, T

    values = {**m.values, B: batch, T: seq}
    check_values(m.graph, values)  # a fitted T must be one the graph allows (a multiple of a chunk)
    t = totals(m.graph)
    forward = as_int(evaluate(t.forward.matmul_flops, values), "forward")
    return (
        forward,
        forward + as_int(evaluate(t.backward.matmul_flops, values), "backward"),
        as_int(evaluate(t.params, values), "params"),
    )


def summary(records: list[dict]) -> str:
    total = len(records)
    exact = [r for r in records if r["result"] == "exact"]
    by = collections.Counter(r["result"] for r in records)
    lines = [
        f"{len(exact)} of {total} causal-LM model types traced with exact FLOPs (forward, training) and parameters"
        f" ({sum(1 for r in exact if not r.get('fixed_T'))} with T symbolic,"
        f" {sum(1 for r in exact if r.get('fixed_T'))} with T fitted from fixed-T exports,"
        f" {sum(1 for r in exact if r.get('fit') == 'collapsed')} of them with their ops summed by kind and shape)",
    ]
    for kind, n in sorted(by.items(), key=lambda kv: -kv[1]):
        if kind != "exact":
            lines.append(f"  {kind} ({n}): " + ", ".join(sorted(r["type"] for r in records if r["result"] == kind)))
    return "\n".join(lines)


#: Where ``--write-docs`` writes the measured reach (between these markers of docs/tracer.md).
DOCS = os.path.join(ROOT, "docs", "tracer.md")
BEGIN, END = "<!-- reach: generated by `python scripts/trace_reach.py --write-docs` -->", "<!-- end reach -->"


def label(record: dict) -> str:
    """A record's row of the docs' table: its result, and for an exact one how T was kept."""
    if record["result"] != "exact":
        return record["result"]
    if not record.get("fixed_T"):
        return "exact, T symbolic"
    if record.get("fit") == "collapsed":
        return "exact, T fitted from fixed-T exports, ops summed by kind and shape"
    if record.get("fit") is None:  # measured before the script recorded how the fit went
        return "exact, T fitted from fixed-T exports"
    return "exact, T fitted from fixed-T exports op by op"


def rows(records: list[dict]) -> list[tuple[str, list[str]]]:
    """(row label, types) of the docs' table, exact rows first."""
    by: dict[str, list[str]] = collections.defaultdict(list)
    for r in records:
        by[label(r)].append(r["type"])
    return sorted(((k, sorted(v)) for k, v in by.items()), key=lambda kv: (not kv[0].startswith("exact"), kv[0]))


def section(records: list[dict], total: int, when: str) -> str:
    """The docs' reach section for ``records`` (out of ``total`` causal-LM types), measured on ``when``."""
    import torch
    import transformers

    exact = sum(1 for r in records if r["result"] == "exact")
    scope = f"all {total}" if len(records) == total else f"{len(records)} (those listed below)"
    lines = [
        BEGIN,
        f"Measured {when} (torch {torch.__version__}, transformers {transformers.__version__}) over {scope} of "
        f"transformers' {total} causal-LM types, each from `small_config` and the script's `OVERRIDES`: **{exact} of {len(records)} exact** (forward and training matmul "
        "FLOPs equal to `FlopCounterMode` at two sizes no fit saw, parameters equal to `numel`).",
        "",
        "| result | types |",
        "| --- | --- |",
    ]
    for name, types in rows(records):
        lines.append(f"| {name} ({len(types)}) | {', '.join(f'`{t}`' for t in types)} |")
    lines.append(END)
    return "\n".join(lines)


def write_docs(records: list[dict], total: int, when: str, path: str = DOCS) -> None:
    """Replace the reach section of ``path`` (between :data:`BEGIN` and :data:`END`) with :func:`section`."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no reach section (the markers {BEGIN!r} and {END!r})")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + section(records, total, when) + tail)


def documented(path: str = DOCS) -> dict[str, str]:
    """Each type the docs' reach section lists → its row label (what :func:`label` gave when it was written)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read().split(BEGIN, 1)[1].split(END, 1)[0]
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| result", "| ---")):
            name, types = line.strip("| ").split(" | ")
            for t in types.split(", "):
                out[t.strip("`")] = name.rsplit(" (", 1)[0]
    return out


class _TimeoutError(Exception):
    pass


def child(types: list[str], timeout: int) -> None:
    """Run :func:`one` on each type in this process (torch imported once), each bounded by ``timeout`` seconds."""
    import signal

    def alarm(signum, frame):
        raise _TimeoutError

    signal.signal(signal.SIGALRM, alarm)
    for t in types:
        signal.alarm(timeout)
        try:
            rec = one(t)
        except _TimeoutError:
            rec = {"type": t, "result": "timed out", "why": f"over {timeout} s"}
        except Exception as exc:  # anything one() did not expect: that type's result
            rec = {"type": t, "result": "crashed", "why": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            signal.alarm(0)
        print(json.dumps(rec), flush=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--types", help="comma-separated model types (default: every causal LM type)")
    p.add_argument("--out", default="-", help="JSON lines, one per type (default: stdout)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per type (default 600)")
    p.add_argument("--per-process", type=int, default=16, help="types per child process (default 16)")
    p.add_argument("--summary", metavar="FILE", help="print the summary of a finished --out file")
    p.add_argument(
        "--write-docs",
        action="store_true",
        help="write the measured reach (this run's, or --summary FILE's) into docs/tracer.md's reach section",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)  # a child process: comma-separated types
    args = p.parse_args(argv)
    if args.child:
        child(args.child.split(","), args.timeout)
        return 0
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    when = time.strftime("%Y-%m-%d", time.gmtime())
    if args.summary:
        with open(args.summary, encoding="utf-8") as fh:
            records = {}
            for line in fh:  # a type measured twice: its last record
                if line.strip():
                    rec = json.loads(line)
                    records[rec["type"]] = rec
        print(summary(list(records.values())))
        if args.write_docs:
            write_docs(list(records.values()), len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), when)
        return 0

    todo = args.types.split(",") if args.types else sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    sink = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")
    records: list[dict] = []
    env = {**os.environ, "PYTHONPATH": ROOT, "COSTMODEL_CACHE_DIR": "off"}
    while todo:
        batch = todo[: args.per_process]
        cmd = [sys.executable, os.path.abspath(__file__), "--child", ",".join(batch), "--timeout", str(args.timeout)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        done = set()
        for line in proc.stdout:
            if line.startswith("{"):
                rec = json.loads(line)
                done.add(rec["type"])
                records.append(rec)
                print(json.dumps(rec), file=sink, flush=True)
                print(f"{rec['type']}: {rec['result']}", file=sys.stderr, flush=True)
        proc.wait()
        left = [t for t in batch if t not in done]
        if left:  # the child died on left[0] (a crash no exception caught): that type's result, then the rest
            rec = {"type": left[0], "result": "crashed", "why": f"the process exited with {proc.returncode}"}
            records.append(rec)
            print(json.dumps(rec), file=sink, flush=True)
            left = left[1:]
        todo = left + todo[len(batch) :]
    print(summary(records))
    if args.write_docs:
        write_docs(records, len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), when)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
