"""Regenerate the engine-derived parts of docs/*.md: ``python docs/generate.py`` (``--check`` to verify).

Prose in docs/ is written by hand; every table and formula between

    <!-- begin generated: NAME -->  ...  <!-- end generated: NAME -->

is produced here by the engine, so a table cannot drift from the code that computes it
(tests/test_docs_generated.py fails when a committed file differs from what this script makes).
"""

from __future__ import annotations

import re
import sys
from fractions import Fraction
from pathlib import Path

import sympy

import costmodel
from costmodel import units
from costmodel.devices.table import device
from costmodel.dtypes import DTYPE_BYTES
from costmodel.families import load
from costmodel.graph.analysis import leading_term, op_nodes
from costmodel.graph.registry import op_cost
from costmodel.graph.rules import ELEMENTWISE
from costmodel.kit import GraphBuilder, totals
from costmodel.memory.activations import activations as kept_activations
from costmodel.memory.states import PRECISIONS, bytes_per_param
from costmodel.options import Counting
from costmodel.render.latex import latex
from costmodel.symbols import SYMBOLS, B, L, T, V, d, describe
from costmodel.verbs.compare import CONVENTIONS, training_flops
from costmodel.verbs.estimate import estimate

DOCS = Path(__file__).resolve().parent
MARKER = re.compile(
    r"(<!-- begin generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)", re.S
)

#: The lecture's own numbers (docs/lecture.md quotes the lecture; these are its inputs, not ours).
LECTURE = {
    "gpt3_params": 175 * 10**9,
    "gpt3_tokens": 3 * 10**11,
    "sustained_flops": 400 * 10**12,
    "peak_flops": 1000 * 10**12,
    "bandwidth": 3 * 10**12,
    "llama_params": 7 * 10**9,
}
#: The H100 of the lecture, from the hardware table (dense bf16 peak, HBM bandwidth, with their sources).
H100 = "h100-sxm"
YEAR = float(units.YEAR)  # seconds in a Julian year: costmodel.units, the one definition


def m(expr: sympy.Expr) -> str:
    """Inline GitHub math."""
    return f"${latex(expr)}$"


def sci(x) -> str:
    return f"{float(x):.4g}" if abs(float(x)) < 1e5 else f"{float(x):.4e}".replace("e+", "e")


def table(header: list[str], rows: list[list[object]]) -> str:
    return "\n".join(
        ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    )


# -- conventions.md --------------------------------------------------------------------------------


def symbols_table() -> str:
    return table(["symbol", "LaTeX", "meaning"], [[f"`{n}`", m(s), describe(n)] for n, s in SYMBOLS.items()])


def elementwise_table() -> str:
    rows = [
        [f"`{n}`", e.forward, e.backward, ", ".join(e.saves) or "nothing"]
        for n, e in ELEMENTWISE.items()
        if not n.startswith("torch.")
    ]  # the tracer's own functions are in docs/tracer.md
    sf = Counting().softmax_flops
    rows.append(["`softmax` (rule)", sf[0], sf[1], "output"])
    return table(["function", "FLOPs/element forward", "backward", "saved for backward"], rows)


def dtype_table() -> str:
    return table(["dtype", "bytes"], [[f"`{k}`", v] for k, v in DTYPE_BYTES.items()])


def precision_table() -> str:
    rows = []
    for name, p in PRECISIONS.items():
        parts = bytes_per_param(name, "adamw")
        rows.append([f"`{name}`", " + ".join(f"{v} ({k})" for k, v in parts.items()), sum(parts.values()), p.about])
    return table(["policy", "bytes per parameter with AdamW", "total", "what"], rows)


def conventions_table() -> str:
    G = load("gpt").graph
    rows = []
    for name, c in CONVENTIONS.items():
        per_token = sympy.expand(training_flops(G, c) / (B * T))
        choices = (
            f"{c.method}; causal {c.ops.causal}; embedding {c.ops.embedding}; element-wise {c.ops.elementwise}"
            + (f"; softmax {c.ops.softmax_flops}" if c.ops.softmax_flops != (5, 4) else "")
            + ("; recompute" if c.recompute else "")
            + ("" if c.attention else "; no attention term")
        )
        rows.append([f"`{name}`", c.source, choices, m(per_token)])
    return table(["convention", "source", "choices", "training FLOPs per token, GPT family"], rows)


# -- derivations.md --------------------------------------------------------------------------------


def six_nd() -> str:
    G = load("gpt").graph
    t = totals(G, Counting(elementwise="none"))
    rows = []
    for name, data in op_nodes(G):
        c = op_cost(data["op"], Counting(elementwise="none"))
        if c.forward.matmul_flops == 0:
            continue
        rows.append(
            [
                f"`{name}`",
                f"`{data['op'].pattern}`",
                m(data["count"]),
                m(c.params),
                m(sympy.expand(c.forward.matmul_flops / (B * T))),
                m(sympy.expand(c.backward.matmul_flops / c.forward.matmul_flops)),
            ]
        )
    N = t.params_non_embedding
    rest = sympy.expand(t.training.matmul_flops - 6 * N * B * T)
    lines = [
        table(["op", "pattern", "count", "params", "forward FLOPs per token", "backward ÷ forward"], rows),
        "",
        f"- non-embedding parameters N = {m(N)}",
        f"- training matmul FLOPs per step = {m(t.training.matmul_flops)}",
        f"- minus 6·N·B·T: {m(rest)} (the attention scores and context, {m(12 * L * T * d)} per token, "
        f"and the tied unembedding, {m(6 * V * d)} per token; the bias and norm parameters in N do no matmul)",
        f"- backward ÷ forward = {m(sympy.cancel(t.backward.matmul_flops / t.forward.matmul_flops))}",
    ]
    r = estimate("gpt3-175b")
    lines.append(
        f"- GPT-3 175B at T = 2048: 6ND is {100 * r['flops']['six_nd_share']:.2f}% of the engine's "
        f"training FLOPs (all ops)"
    )
    return "\n".join(lines)


def sixteen() -> str:
    parts = bytes_per_param("bf16-mixed", "adamw")
    rows = [[k, v] for k, v in parts.items()] + [["**total**", f"**{sum(parts.values())}**"]]
    return table(["component (bf16-mixed, AdamW)", "bytes per parameter"], rows)


def _matmul_graph():
    b = GraphBuilder("matmul", b=B, d=d)
    x = b.input("x", "b d", dtype="bf16")
    b.matmul("w", x, "b d, d e -> b e", e=d)
    return b.graph


def intensity() -> str:
    G = _matmul_graph()
    f = totals(G).forward
    i = sympy.cancel(f.flops / f.bytes)
    lines = [
        f"- FLOPs {m(f.flops)}, bytes read {m(f.bytes_read)}, written {m(f.bytes_written)}",
        f"- intensity {m(i)} FLOPs/byte",
        f"- as B → ∞: {m(leading_term(i, B))} (O(d)); as B → 0: {m(leading_term(i, B, 0))} (∝ B); "
        f"as d → ∞: {m(leading_term(i, d))}",
        "",
        elementwise_intensity(),
    ]
    return "\n".join(lines)


def _elementwise(fn: str):
    """Forward cost of one element-wise op on B bf16 elements."""
    b = GraphBuilder("ew", b=B)
    x = b.input("x", "b", dtype="bf16")
    b.elementwise("f", fn, [x, x] if fn == "add" else x, "b, b -> b" if fn == "add" else "b")
    return totals(b.graph).forward


EW = ("add", "relu", "gelu", "silu")


def elementwise_intensity() -> str:
    rows = []
    for fn in EW:
        c = _elementwise(fn)
        rows.append([f"`{fn}`", m(c.flops), m(c.bytes), m(sympy.cancel(c.flops / c.bytes))])
    return table(["element-wise op on B bf16 elements", "FLOPs", "bytes", "FLOPs/byte"], rows)


# -- lecture.md ------------------------------------------------------------------------------------


def lecture() -> str:
    dev = device(H100)
    r = estimate("gpt3-175b", tokens=LECTURE["gpt3_tokens"])
    n_all, n = r["params"]["total"], r["params"]["non_embedding"]
    D = LECTURE["gpt3_tokens"]
    c_lecture = 6 * LECTURE["gpt3_params"] * D
    c_6nd, c_full = r["flops"]["six_nd"], r["flops"]["training_total"]
    per_param = bytes_per_param("bf16-mixed", "adamw")
    b16, b12 = sum(per_param.values()), sum(bytes_per_param("bf16-pure-fp32-moments", "adamw").values())
    b18 = sum(bytes_per_param("bf16-mixed-fp32-grads", "adamw").values())
    p7 = LECTURE["llama_params"]
    ridge = Fraction(LECTURE["peak_flops"], LECTURE["bandwidth"])
    h100 = dev.peak("bf16") / dev.memory_bandwidth
    G = _matmul_graph()
    i = sympy.cancel(totals(G).forward.flops / totals(G).forward.bytes)
    i_4096 = i.subs({B: 4096, d: 4096})
    rows = [
        ["GPT-3 parameters N", "1.75e11", f"{n_all:,} (non-embedding {n:,})", "`estimate gpt3-175b`"],
        [
            "C = 6ND, D = 3e11",
            "≈ 3.1e23",
            f"{sci(c_lecture)} with N = 1.75e11; {sci(c_6nd)} with the engine's N",
            "6 × 1.75e11 × 3e11 rounds to 3.2e23, not 3.1e23; the engine's non-embedding N gives the 3.1e23",
        ],
        [
            "C, every op counted",
            "",
            f"{sci(c_full)} ({100 * c_6nd / c_full:.1f}% of it is 6ND)",
            "attention scores at T = 2048, tied unembedding, element-wise ops",
        ],
        [
            "time at 400 TFLOP/s sustained",
            "7.8e8 s ≈ 25 years",
            f"{sci(c_6nd / LECTURE['sustained_flops'])} s = {c_6nd / LECTURE['sustained_flops'] / YEAR:.1f} years "
            f"(6ND); {c_full / LECTURE['sustained_flops'] / YEAR:.1f} years (every op)",
            f"years of 365.25 days; 400 TFLOP/s is {100 * LECTURE['sustained_flops'] / dev.peak('bf16'):.0f}% of "
            f"`{H100}`'s dense bf16 peak",
        ],
        [
            "bytes per parameter, bf16 + AdamW",
            "16 (table: 2 + 2 + 4 + 4)",
            f"{b16} = " + " + ".join(f"{v} {k}" for k, v in per_param.items()),
            f"the table's sum is {b12} (`bf16-pure-fp32-moments`): it omits the fp32 master weights",
        ],
        [
            "... with fp32 master weights",
            "≈ 18",
            f"{b18} (`bf16-mixed-fp32-grads`: fp32 gradients too)",
            "master weights are already in the 16",
        ],
        [
            "7B × 16",
            "112 GB",
            f"{p7 * int(b16) / 1e9:g} GB = {p7 * int(b16) / 2**30:.1f} GiB (no activations)",
            f"decimal GB; more than the {float(dev.memory_bytes) / 1e9:g} GB of one `{H100}`",
        ],
        [
            "ridge point I*",
            "1000 TFLOP/s ÷ 3 TB/s ≈ 333",
            f"{float(ridge):.1f} FLOPs/byte (= 1000/3)",
            "the lecture's rounded numbers",
        ],
        [
            "ridge, H100 dense bf16",
            "",
            f"{float(h100):.1f} FLOPs/byte",
            f"`{H100}` of the hardware table: {float(dev.peak('bf16')) / 1e12:g} TFLOP/s ÷ "
            f"{float(dev.memory_bandwidth) / 1e12:g} TB/s (dense, not the 2:4-sparse figure)",
        ],
        [
            "matmul B×d · d×d intensity",
            "≈ Bd²/Bd = O(d)",
            f"{m(i)}; B = d = 4096: {float(i_4096):.1f}",
            "the engine also counts the output write (2Bd bytes); the lecture lists (Bd + 2d²)·2 bytes for operands of Bd + d² elements",
        ],
        [
            "element-wise intensity",
            "I ≈ 1",
            ", ".join(f"{fn} {sympy.cancel(_elementwise(fn).flops / _elementwise(fn).bytes)}" for fn in EW)
            + " FLOPs/byte (bf16)",
            "the lecture counts FLOPs per element read, the engine FLOPs per byte moved",
        ],
    ]
    return table(["quantity", "lecture", "engine", "note"], rows)


def activations() -> str:
    G = load("gpt").graph
    per = sympy.expand(kept_activations(G).bytes / (B * T))
    per_layer = sympy.expand(sympy.Poly(per, L).coeff_monomial(L))
    return (
        f"- activation bytes saved per token per layer (GPT family, bf16): {m(per_layer)}: O(d) "
        f"plus the materialised attention scores, O(T) per token, O(T²) per sequence\n"
        f"- leading term as d → ∞: {m(leading_term(per_layer, d))}"
    )


# -- memory.md ---------------------------------------------------------------------------------------


def memory_policies() -> str:
    from costmodel.memory.states import policy_table

    return policy_table()


def memtracker() -> str:
    """The training peak against torch's MemTracker, per setting, from ``tests/data/memtracker.json``
    (``scripts/memtracker_table.py`` writes it; ``tests/memory/test_peak_memtracker.py`` checks its rows)."""
    import json

    path = Path(__file__).resolve().parents[1] / "tests" / "data" / "memtracker.json"
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    out = [
        "| model | setting | MemTracker (bytes) | its phase | fused: error, at | transformers: error, at |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    errors: dict[str, list[float]] = {"fused": [], "transformers": []}
    for r in rows:
        setting = ", ".join(f"{k} {v}" for k, v in r["setting"].items()) or "base"
        cells = []
        for impl in ("fused", "transformers"):
            e = r[impl]["peak"] / r["measured"] - 1
            errors[impl].append(abs(e))
            cells.append(f"{e:+.2%}, {r[impl]['at']}")
        out.append(f"| {r['family']} | {setting} | {r['measured']:,} | {r['phase']} | {' | '.join(cells)} |")
    summary = [
        f"- `--implementation {impl}`: mean |error| {sum(v) / len(v):.2%}, max {max(v):.2%} over {len(v)} settings"
        for impl, v in errors.items()
    ]
    return "\n".join([*summary, "", *out])


def families_check() -> str:
    """Every family checked against its transformers module, from ``tests/data/families_check.json``
    (``scripts/families_check.py`` writes it; ``tests/testing/test_against_transformers.py`` checks the families
    again and that the file lists every one)."""
    import json

    from costmodel.families import families

    path = Path(__file__).resolve().parents[1] / "tests" / "data" / "families_check.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = {r["family"]: r for r in data["families"]}
    out = [
        f"{sum(r['result'] == 'pass' for r in rows.values())} of {len(families())} families pass "
        f"(`costmodel check FAMILY --against transformers --examples {data['examples']}`, seed {data['seed']}, "
        f"torch {data['torch']}, transformers {data['transformers']}).",
        "",
        "| family | transformers module | result | pinned to the small config | convention taken off FlopCounterMode's "
        "count |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in families():
        r = rows.get(name)
        if r is None:
            out.append(f"| {name} | | not checked (rerun scripts/families_check.py) | | |")
            continue
        module = f"`{(r.get('module') or '').removeprefix('transformers ')}`" if r.get("module") else ""
        ran = f"{r.get('properties', 0) - r.get('skipped', 0)} properties"
        result = {"pass": f"pass ({ran})", "fail": "FAIL: " + "; ".join(r.get("failed", []))}
        result = result.get(r["result"], f"error: {r.get('reason', '')}")
        conventions = "; ".join(c.split(":")[0] for c in r.get("conventions", [])) or "none"
        pinned = ", ".join(f"{k}={v}" for k, v in sorted(r.get("pinned", {}).items())) or "none"
        out.append(f"| {name} | {module} | {result} | {pinned} | {conventions} |")
    return "\n".join(out)


def korthikanti() -> str:
    """One GPT-3 layer's saved bytes (bf16, dropout on) under each choice, as the engine derives them."""
    from costmodel.graph.passes import flash_attention
    from costmodel.memory.activations import activations as kept
    from costmodel.memory.activations import per_iteration
    from costmodel.memory.parallel import activation_share
    from costmodel.options import Layout

    G = load("gpt", {"dropout_p": True}).graph

    def split(parts: dict) -> tuple[sympy.Expr, sympy.Expr]:
        main = sympy.expand(parts.get("activation", 0) + parts.get("mask", 0))
        return sympy.factor(main), sympy.expand(parts.get("stats", 0))

    rows = []
    for label, graph, recompute in (
        ("no recompute", G, "none"),
        ("selective (attention core)", G, "selective"),
        ("full (layer inputs only)", G, "full"),
        ("FlashAttention", flash_attention(G), "none"),
    ):
        main, stats = split(per_iteration(graph, "layers", recompute))
        rows.append([label, m(main), m(stats)])
    tensors = [k for k in kept(G).tensors.values() if k.savers[0].startswith("layers.") and k.saved.role != "stats"]
    t = sympy.Symbol("t", positive=True, integer=True)
    tp = Layout(tp=2)  # a tensor is either split by TP (share 1/2) or replicated (share 1)
    split = sum(k.bytes / L for k in tensors if activation_share(G, k, tp, "first", 1) != 1)
    whole = sum(k.bytes / L for k in tensors if activation_share(G, k, tp, "first", 1) == 1)
    rows.append(["tensor parallel t (Megatron)", m(sympy.expand(whole) + sympy.factor(split) / t), "replicated"])
    rows.append(["tensor + sequence parallel t", m(sympy.factor(whole + split) / t), "divided by t"])
    return table(["choice", "per layer: activations + 1-byte masks", "LayerNorm statistics (fp32)"], rows)


# -- architectures.md -------------------------------------------------------------------------------


def encoder_decoder() -> str:
    """T5's training matmul FLOPs of one step, by stack, and what each source and target token costs."""
    from costmodel.graph.analysis import breakdown
    from costmodel.symbols import T_src

    rows = {"encoder": [], "decoder": [], "head": []}
    for name, row in breakdown(load("t5").graph, Counting(elementwise="none")).items():
        rows[name.split(".")[0] if name.split(".")[0] in rows else "head"].append(row.training.matmul_flops)
    total = {k: sympy.expand(sympy.Add(*v)) for k, v in rows.items()}
    every = sympy.Add(*total.values())
    per_source = sympy.expand(sympy.diff(every, T_src, 1).subs(T_src, 0).subs(T, 0) / B)
    per_target = sympy.expand(sympy.diff(every, T, 1).subs(T, 0).subs(T_src, 0) / B)
    lines = [
        table(
            ["stack", "training matmul FLOPs of one step (B pairs of T_src source, T target tokens)"],
            [[k, m(v)] for k, v in total.items()],
        ),
        "",
        f"- each source token, apart from attention: {m(per_source)} (the encoder, and the decoder's "
        "cross-attention k, v projections of its output)",
        f"- each target token, apart from attention: {m(per_target)} (the decoder and the LM head)",
        f"- attention: {m(sympy.expand(every - B * T_src * per_source - B * T * per_target))}",
    ]
    return "\n".join(lines)


def presets() -> str:
    """Every preset with its exact parameter count (and the active share of an MoE), as ``costmodel models``."""
    import costmodel  # the public catalogue (the CLI's ``models`` verb)

    rows = []
    for r in costmodel.models()["presets"]:
        active = f"{r['active_params']:,}" if r["active_params"] != r["params"] else ""
        rows.append([f"`{r['name']}`", f"`{r['family']}`", f"{r['params']:,}", active, r["about"]])
    return table(["preset", "family", "parameters", "active per token", "what it is"], rows)


def options_table() -> str:
    """Every option a user types, from its one declaration (costmodel.options.flags)."""
    from costmodel import Options

    defaults = Options()
    rows = []
    for f in Options.flags():
        field = f.name if hasattr(defaults, f.name) else None
        default = (
            getattr(defaults, field)
            if field
            else getattr(defaults.layout, f.name, getattr(defaults.counting, f.name, None))
        )
        accepts = (
            ", ".join(f"`{c}`" for c in Options.choices(f.name))
            if f.takes == "choice"
            else {"switch": "on/off", "on": "on"}.get(f.takes)
            or (", ".join(map(str, f.numbers)) if f.numbers else "")
            or {
                "count": "a count (`300B`)",
                "length": "a length (`8k`)",
                "rate": "an exact number",
                "price": "USD, `list` or a price entry",
            }.get(f.read or "", "text")
        )
        shown = "" if default is None else f"`{default}`"
        rows.append(
            [f"`{f.option}`", f"`{f.name}`", accepts, shown, f.help.format(batch_default="1").replace("|", "\\|")]
        )
    return table(["flag", "Python (`Options`)", "accepts", "default", "what it is"], rows)


# -- serving.md --------------------------------------------------------------------------------------


def engines_table() -> str:
    from costmodel.serving.profiles import builtin

    rows = []
    for p in builtin().values():
        rows.append(
            [
                f"`{p.name}` {p.version}",
                p.max_num_seqs,
                p.max_num_batched_tokens,
                p.block_size,
                float(p.gpu_memory_utilization),
                "decodes first" if p.decode_first else "prefills first",
                f"{float(p.step_overhead_s) * 1e3:g} ms",
                ", ".join(p.calibrated_for) or "none",
            ]
        )
    return table(
        [
            "engine",
            "max_num_seqs",
            "max_num_batched_tokens",
            "block",
            "memory share",
            "order",
            "step overhead",
            "calibrated for",
        ],
        rows,
    )


SERVE_EXAMPLE = {"rate": 4, "input_len": "2048", "output_len": "256", "slo": "ttft_p90=2s,tpot_p99=50ms"}


def serve_example() -> str:
    r = costmodel.serve("llama3-70b", "h100-sxm", options=costmodel.Options.make(tp=4), max_rate=False, **SERVE_EXAMPLE)
    return (
        "```text\n$ costmodel serve llama3-70b --hardware h100-sxm --tp 4 --rate 4 --input-len 2048 --output-len 256 \\\n    --slo ttft_p90=2s,tpot_p99=50ms --no-max-rate\n"
        + r.to_text()
        + "\n```"
    )


def kv_pool_example() -> str:
    from costmodel.devices.table import device
    from costmodel.serving.memory import kv_pool
    from costmodel.serving.profiles import profile

    m = costmodel.load("llama3-8b")
    p = kv_pool(m.graph, m.values, device("h100-sxm"), profile("vllm-v1"))
    return (
        f"llama3-8b on an H100 SXM (80 GB) under vLLM v1: ⌊(0.9 × 80,000,000,000 − {p.weights_bytes:,} weights − "
        f"{p.activation_bytes:,} activations of one 8,192-token chunk − {p.reserve_bytes:,} reserve) / (16 × "
        f"{p.kv_bytes_per_token:,} bytes a token)⌋ = **{p.num_blocks:,} blocks** = {p.tokens:,} tokens: "
        f"{p.tokens // 8192} sequences of 8,192 tokens (`costmodel fit llama3-8b --hardware h100-sxm --inference --context 8192`)."
    )


SERVE_PLAN = ("--devices", "8-16", "--tp", "4,8", "--max-num-seqs", "16,64,256", "--max-num-batched-tokens", "8192")


def serve_plan_example() -> str:
    r = costmodel.serve_plan(
        "llama3-70b",
        "h100-sxm",
        devices="8-16",
        tp=(4, 8),
        max_num_seqs=(16, 64, 256),
        max_num_batched_tokens=(8192,),
        slo="ttft_p90=2s,tpot_p99=50ms",
        top=5,
    )
    return (
        "```text\n$ costmodel serve-plan llama3-70b --hardware h100-sxm "
        + " ".join(SERVE_PLAN)
        + " \\\n    --slo ttft_p90=2s,tpot_p99=50ms --top 5\n"
        + r.to_text()
        + "\n```"
    )


BLOCKS = {
    "presets": presets,
    "symbols": symbols_table,
    "elementwise": elementwise_table,
    "dtypes": dtype_table,
    "precisions": precision_table,
    "conventions": conventions_table,
    "six-nd": six_nd,
    "sixteen": sixteen,
    "intensity": intensity,
    "lecture": lecture,
    "activations": activations,
    "memory-policies": memory_policies,
    "korthikanti": korthikanti,
    "memtracker": memtracker,
    "families-check": families_check,
    "encoder-decoder": encoder_decoder,
    "options": options_table,
    "engines": engines_table,
    "serve-example": serve_example,
    "kv-pool": kv_pool_example,
    "serve-plan-example": serve_plan_example,
}


def render(text: str, where: str = "docs") -> str:
    """``text`` with every generated block replaced by what the engine makes now."""

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in BLOCKS:
            raise SystemExit(f"{where}: unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return match.group(1) + BLOCKS[name]() + "\n" + match.group(4)

    return MARKER.sub(replace, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in sorted(DOCS.glob("*.md")):
        old = path.read_text(encoding="utf-8")
        new = render(old, path.name)
        if new != old:
            stale.append(path.name)
            if not check:
                path.write_text(new, encoding="utf-8")
    if check and stale:
        print(f"docs drifted from the engine: {', '.join(stale)}; run python docs/generate.py", file=sys.stderr)
        return 1
    print(
        ("checked" if check else "regenerated")
        + f" {len(list(DOCS.glob('*.md')))} files"
        + (f"; updated {', '.join(stale)}" if stale and not check else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
