"""``docs/validation.md``'s diagnosis of the held-out runs furthest off (:func:`why`), kept beside the generator.

Each claim names its source; the numbers are those of the run that generates the document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ...families import load
from ...symbols import SYMBOLS


def why(rows: list, stacks: list, pct: Callable[[float], str], eq3: Callable[[Mapping], float]) -> list[str]:
    """The diagnosis of the held-out groups furthest off: a fixed text with the numbers of ``rows`` (validation
    ``Row``), ``stacks`` (``Refit``: a factor fitted on one DeepSpeed group predicting the other), ``pct`` the
    error format and ``eq3`` Narayanan et al.'s Eq. 3 FLOPs of a run."""
    by_id = {r.run["id"]: r for r in rows}
    need = ("narayanan21-529.6B", "korthikanti22-530B-full_recompute", "mtnlg-530b-2240")
    if not all(k in by_id for k in need):
        return []
    rate = {k: eq3(by_id[k].run) / (by_id[k].measured * by_id[k].run["devices"]) for k in need}
    o = {k: by_id[k].run["options"] for k in need}
    m = {k: o[k]["batch"] // (o[k].get("dp", 1) * o[k].get("micro_batch", 1)) for k in need}  # micro-batches
    bubble = {k: (o[k]["pp"] - 1) / (m[k] + o[k]["pp"] - 1) for k in need}  # 1F1B: (p - 1)/(m + p - 1)
    out = [
        "",
        "## Why BLOOM, MT-NLG and Llama 3 are off",
        "",
        "BLOOM and MT-NLG ran DeepSpeed's pipeline engine with Megatron's tensor slicing (2021-22); the A100's "
        "`sustained` is fitted to Megatron-LM 2022 (Korthikanti et al.). The same 530B model (105 layers, h 20480) "
        "with the same TP 8 x PP 35 on Selene's DGX A100s ran in Megatron-LM at "
        f"{rate['korthikanti22-530B-full_recompute'] / 1e12:.0f} TFLOP/s per GPU in 2022 (Korthikanti, 280 GPUs) and "
        f"{rate['narayanan21-529.6B'] / 1e12:.0f} in 2021 (Narayanan, 2520 GPUs), and in MT-NLG's DeepSpeed "
        f"pipeline at {rate['mtnlg-530b-2240'] / 1e12:.0f} (2240 GPUs; all three by Eq. 3 of Narayanan et al., "
        "recompute counted). The work per pipeline replica is all but the same in the three "
        f"({m['korthikanti22-530B-full_recompute']}, {m['narayanan21-529.6B']} and {m['mtnlg-530b-2240']} "
        f"micro-batches: 1F1B bubbles of {100 * bubble['korthikanti22-530B-full_recompute']:.1f}%, "
        f"{100 * bubble['narayanan21-529.6B']:.1f}% and {100 * bubble['mtnlg-530b-2240']:.1f}%); "
        "the difference is the software, which no layout input "
        "carries. So the stack is an input of the step (`--stack`, 'Software stacks' above; docs/hardware.md "
        "says how to fit your own). The check below is that section's leave-one-source-out for the DeepSpeed "
        "runs: a factor fitted on one source's runs predicts the other's (both on A100s); if the stack is the "
        "cause, a factor fitted on one transfers.",
        "",
    ]
    if stacks:
        out += [
            "| fitted on | sustained | predicted run | predicted s | measured s | error |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {r.fitted_on} | {r.sustained:.4f} | {r.row.run['id']} | {r.row.predicted:.4g} | "
            f"{r.row.measured:.4g} | {pct(r.row.error)} |"
            for r in stacks
        ]
    llama = [by_id[k] for k in by_id if k.startswith("llama3-405b-")]
    longest = max(llama, key=lambda r: r.run["options"]["seq"], default=None)
    if longest is not None:  # PaLM's count per token: 6N + 12·L·d·T; the attention term's share, and half of it
        m = load(longest.run["model"]["preset"], longest.run["model"].get("settings"))
        L, d = (int(m.values[SYMBOLS[k]]) for k in ("L", "d"))
        attn = 12 * L * d * longest.run["options"]["seq"]
        share = attn / (6 * longest.run["measured"]["params"] + attn)
    if llama:
        out += [
            "",
            "**Llama 3 405B** (Llama Team 2024, Sec. 3.3.2). The paper's interleaved schedule has one layer per "
            "virtual stage: after one layer was taken off the first and the last stage, the first chunk holds only "
            "the embedding and the last only the output and loss, so V = (126 + 2)/16 = 8; with V = 1 (assumed "
            "before) the bubble (PP−1)/(V·M) was 8 times too large (errors of +24%, +53% and +26%). The "
            "context-parallel all-gather is exposed, as the paper says. What remains: "
            + ", ".join(f"{r.run['id']} {pct(r.error)}" for r in llama)
            + ". Meta's stack runs at 43% MFU where NVIDIA's NeMo recipes (in-sample) reach about 55% on the same "
            "H100s, so the 8K runs are slower than the factor fitted to NeMo predicts. The 131K run's time is "
            f"derived through PaLM's FLOP count, which counts causal attention in full ({100 * share:.0f}% of its "
            f"FLOPs at {longest.run['options']['seq']:,} tokens); Meta does not print its count, and were attention "
            f"halved the measured time would be {50 * share:.0f}% shorter: "
            f"{pct(longest.predicted / (longest.measured * (1 - share / 2)) - 1)} for {longest.run['id']}.",
            "",
        ]
    return out


__all__ = ["why"]
