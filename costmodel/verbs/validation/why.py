"""``docs/validation.md``'s diagnosis of the held-out runs furthest off (:func:`why`), kept beside the generator.

Each claim names its source; the numbers are those of the run that generates the document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ...devices.table import builtin
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
    return out + bridge(rows, pct)


def bridge(rows: list, pct: Callable[[float], str]) -> list[str]:
    """Why Megatron-Bridge's 25.11 runs are off (its performance summary; no other source has these devices'
    runs): the dense runs by whether their device's ``sustained`` was ever fitted, the MoE runs by the time per
    micro-batch and layer the step is short of (measured − predicted over micro-batches × a stage's layers)."""
    mine = [r for r in rows if r.run.get("source_key") == "megatron-bridge-25.11"]
    if not mine:
        return []
    table = builtin()
    dense = [r for r in mine if r.run["options"].get("ep", 1) == 1]
    moe = [r for r in mine if r.run["options"].get("ep", 1) > 1]
    fitted = [r for r in dense if table[r.run["hardware"]].attained.sustained != 1]
    unfitted = [r for r in dense if table[r.run["hardware"]].attained.sustained == 1]

    def mean(rs: list) -> str:
        return pct(sum(r.error for r in rs) / len(rs)) if rs else "none"

    def listed(rs: list) -> str:
        return ", ".join(f"{r.run['id']} {pct(r.error)}" for r in rs)

    def short_ms(r) -> float:
        o = r.run["options"]
        m = o["batch"] // (o.get("dp", 1) * o.get("micro_batch", 1))
        L = int(load(r.run["model"]["preset"], r.run["model"].get("settings")).values[SYMBOLS["L"]])
        return 1000 * (r.measured - r.predicted) / (m * L / o.get("pp", 1))

    def share(r) -> float:  # the table's model TFLOP/s per GPU as a share of the dense peak the matmuls run at
        dt = "fp8" if "fp8" in r.run["options"]["precision"] else "bf16"
        return r.run["measured"]["model_tflops_per_gpu"] * 1e12 / float(table[r.run["hardware"]].peak(dt))

    out = [
        "",
        "## Why Megatron-Bridge's runs are off",
        "",
        "NVIDIA's Megatron-Bridge performance summary (25.11) is the only source here with Blackwell runs, so its "
        "runs are predicted on each device's default and no stack factor of theirs can be checked on another "
        "source. Three mechanisms decide the error. **fp8**: before the matmuls of an fp8 precision were timed at "
        "the fp8 dense peak (timing.kernels.gemm_dtype) an FP8 run could not be predicted at all; the FP8 rows "
        "are now in. **An unfitted `sustained`**: the dense runs on a device whose factor was fitted to measured "
        f"steps (the H100: NVIDIA's DGX Cloud recipes) have an average error of {mean(fitted)} "
        f"({listed(fitted)}); on B200, GB200 and GB300, whose "
        f"`sustained` is 1 because no run of another source exists to fit it, of {mean(unfitted)} "
        f"({listed(unfitted)}): the kernels' benchmark rates, which a "
        "training step does not sustain (the H100's fitted factor is "
        f"{float(table['h100-sxm'].attained.sustained):g}). **MoE layers**: the MoE runs are "
        f"{mean(moe)} on average (signed). Their published model TFLOP/s are "
        + ", ".join(f"{100 * share(r):.1f}%" for r in moe)
        + " of the dense peak (the dense runs: "
        + ", ".join(f"{100 * share(r):.0f}%" for r in dense)
        + "), and the step is short of the measured by "
        + ", ".join(f"{short_ms(r):.1f}" for r in moe)
        + " ms per micro-batch and layer ("
        + ", ".join(r.run["id"] for r in moe)
        + "): neither one constant nor a share of the work, so no per-layer overhead in the data would fit them "
        "all, and none is added (costmodel/devices/data/host.json has no published per-layer figure). What the "
        "engine leaves out there: Megatron-Core's all-to-all dispatcher needs the tokens per expert on the host "
        "for the all-to-all's split sizes in every MoE layer (megatron/core/transformer/moe/token_dispatcher.py: "
        "a device-to-host sync that empties the launch queue; the recipes capture the router and the dispatch "
        "preprocessing in CUDA graphs to shorten it); the grouped expert GEMMs of 128 small experts, priced on "
        "the dense curves; and the expert data-parallel group (with EP 8 inside a node and DP 64, as on the "
        "B200 GPT-OSS run, the experts' gradients are reduced over 8 nodes, one NIC each, where the engine "
        "reduces every gradient over the 64-way group; with EP = DP, the other MoE runs, experts need no "
        "data-parallel reduction at all). The MoE runs stay outside the 10 % target; no factor is fitted to them.",
        "",
    ]
    return out


__all__ = ["bridge", "why"]
