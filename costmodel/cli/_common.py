"""What the subcommands share: the model and its settings, the option flags, number formatting.

Every flag maps to one field of :class:`costmodel.Options` (the table :data:`FLAGS`), typed text is
read by :meth:`costmodel.Options.parse`, and the CLI imports nothing but the public API.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable

from costmodel import CostModelError, Options, units

#: the CLI says numbers as every report does
duration, nbytes, sci = units.duration, units.nbytes, units.sci


def add_model_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    """MODEL and ``--set``; ``optional``: MODEL may be left out (a command that has another source of one)."""
    p.add_argument(
        "model",
        metavar="MODEL",
        **({"nargs": "?"} if optional else {}),
        help="a preset or family name (see 'costmodel models'), a Hugging Face config.json "
        "(read as data, no network), or path/to/file.py:builder, a function of yours that "
        "returns a GraphBuilder graph (the file is executed as Python: only load files you trust)",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a symbol (d=4096) or a builder option (d_ff=8*d/3, tied=false); "
        "values are numbers or expressions of symbols with + - * / ^ ( )",
    )


def settings(args: argparse.Namespace) -> dict[str, str]:
    """``--set NAME=VALUE`` as a mapping of texts (read by the restricted parser when the model loads)."""
    out: dict[str, str] = {}
    for text in args.settings:
        name, eq, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name, re.ASCII) or not value:
            raise CostModelError(f"--set: expected NAME=VALUE such as d_ff=8*d/3, received {text!r}")
        out[name] = value
    return out


def typed(name: str, flag: str):
    """An argparse ``type`` reading ``flag``'s text as :meth:`Options.parse` reads option ``name``."""

    def convert(text: str) -> object:
        try:
            return Options.parse(name, text, what="value")
        except CostModelError as exc:  # argparse would replace a ValueError's message (it names the flag itself)
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None

    convert.__name__ = flag
    return convert


#: argparse destination → Options field (a shortcut such as ``tp`` sets a field of the layout).
FLAGS = {
    "batch": "batch",
    "seq": "seq",
    "tokens": "tokens",
    "precision": "precision",
    "optimizer": "optimizer",
    "causal": "causal",
    "recompute": "recompute",
    "flash": "flash",
    "zero": "zero",
    "dp": "dp",
    "tp": "tp",
    "pp": "pp",
    "sp": "sp",
    "ep": "ep",
    "megatron_sp": "megatron_sp",
    "micro_batch": "micro_batch",
    "inference": "inference",
    "context": "context",
    "weights_dtype": "weights_dtype",
    "kv_dtype": "kv_dtype",
    "hardware": "hardware",
    "devices": "devices",
    "mfu": "mfu",
    "tokens_per_s": "tokens_per_s",
    "cp": "cp",
    "vpp": "vpp",
    "schedule": "schedule",
    "stage_layers": "stage_layers",
    "time_model": "time_model",
    "overlap_comm": "overlap_comm",
    "attention": "attention",
    "recompute_fraction": "recompute_fraction",
    "norm_stats": "norm_stats",
    "logits": "logits",
    "mfu_basis": "mfu_basis",
    "price_per_hour": "price_per_hour",
    "stack": "stack",
    "lora": "lora",
    "lora_targets": "lora_targets",
    "freeze": "freeze",
}


def options(args: argparse.Namespace, skip: Iterable[str] = ()) -> Options:
    """The :class:`Options` the parsed flags describe (flags a command lacks keep their defaults)."""
    given = {
        field: getattr(args, dest)
        for dest, field in FLAGS.items()
        if dest not in skip and getattr(args, dest, None) is not None
    }
    if given.get("overlap_comm") in ("none", ""):
        given["overlap_comm"] = ()
    if getattr(args, "achieved_tflops", None) is not None:
        given["achieved_flops"] = args.achieved_tflops * 10**12
    return Options.make(**given)


def output_file(text: str) -> str:
    """An argparse ``type`` for a file the command writes: a name, not an empty string (which would be ignored)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, received {text!r}")
    return text


def add_step_args(p: argparse.ArgumentParser, *, batch_default: str = "1") -> None:
    p.add_argument(
        "--batch", type=typed("batch", "--batch"), help=f"sequences per step, B (default {batch_default}); 1k = 1000"
    )
    p.add_argument(
        "--seq", type=typed("seq", "--seq"), help="tokens per sequence, T (default: the model's context); 8k = 8192"
    )


def add_counting_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--causal",
        choices=Options.choices("causal"),
        help="count causal attention over the full T×T square (default) or half of it",
    )


def add_memory_args(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """--precision/--optimizer (unless the caller has them), recompute, flash, layout, inference."""
    if precision:
        add_precision_args(p)
    g = p.add_argument_group("memory and parallel layout (every memory_bytes.* number is per device)")
    g.add_argument(
        "--recompute",
        choices=Options.choices("recompute"),
        help="activation recompute: none (default), selective (attention core) or full (layer inputs only)",
    )
    g.add_argument(
        "--recompute-fraction",
        type=typed("recompute_fraction", "--recompute-fraction"),
        metavar="F",
        help="partial rematerialisation: a share F of each repeated block's layers recomputed whole, the "
        "rest as --recompute says (PaLM 540B: --recompute selective --recompute-fraction 0.75)",
    )
    g.add_argument(
        "--attention",
        choices=Options.choices("attention"),
        help="attention implementation: unfused (the training default: scores materialised, softmax in the "
        "activations' dtype), eager (transformers' eager attention: softmax in fp32 cast back, two T×T "
        "tensors kept), sdpa or flash (fused: no T×T tensor kept; flash is the --inference default, as serving "
        "engines run fused attention)",
    )
    g.add_argument(
        "--flash",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a synonym of --attention flash: no T×T scores kept",
    )
    g.add_argument(
        "--norm-stats",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="count the fp32 statistics norms keep for backward (default); --no-norm-stats leaves them "
        "out, as Korthikanti et al. 2022, Table 2 do",
    )
    g.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage over dp (3 = FSDP full shard)")
    for name, what in (
        ("dp", "data"),
        ("tp", "tensor (Megatron)"),
        ("pp", "pipeline (1F1B)"),
        ("sp", "sequence/context"),
        ("cp", "context (ring attention; the same as --sp)"),
        ("ep", "expert"),
    ):
        g.add_argument(f"--{name}", type=typed(name, f"--{name}"), help=f"{what} parallel degree")
    g.add_argument(
        "--vpp", type=typed("vpp", "--vpp"), help="virtual pipeline stages per device (interleaved 1F1B; default 1)"
    )
    g.add_argument(
        "--schedule",
        choices=Options.choices("schedule"),
        help="pipeline schedule (default 1f1b; interleaved with --vpp > 1)",
    )
    g.add_argument(
        "--stage-layers",
        metavar="FIRST,LAST",
        help="layers on the first and last pipeline stages when they differ (Llama 3 405B: 7,7)",
    )
    g.add_argument(
        "--megatron-sp",
        action="store_true",
        default=None,
        help="Megatron sequence parallelism in the TP group (replicated activations divided by tp)",
    )
    g.add_argument(
        "--micro-batch",
        type=typed("micro_batch", "--micro-batch"),
        help="sequences per micro-batch on one device (default: 1 with a pipeline, --pp > 1; else batch / dp)",
    )
    g.add_argument(
        "--inference", action="store_true", default=None, help="inference memory: weights, KV cache, working set"
    )
    g.add_argument(
        "--context", type=typed("context", "--context"), help="KV-cache context in tokens (inference); 128k = 131072"
    )
    g.add_argument(
        "--weights-dtype",
        choices=Options.choices("weights_dtype"),
        help="inference weight format (int4/int8/fp8 carry their group scales)",
    )
    g.add_argument(
        "--kv-dtype",
        choices=Options.choices("kv_dtype"),
        help="KV-cache element dtype for inference (default: the graph's activation dtype)",
    )
    g.add_argument(
        "--logits",
        choices=Options.choices("logits"),
        help="inference prefill: keep the last position's logits (default: a generation) or all of "
        "them (scoring a text)",
    )
    add_finetune_args(p)


def add_finetune_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fine-tuning (frozen weights hold no gradient and no optimizer state)")
    g.add_argument(
        "--lora",
        type=typed("lora", "--lora"),
        metavar="RANK",
        help="LoRA adapters of rank RANK on the --lora-targets matmuls, every other weight frozen "
        "(LLaMA-2-7B, --lora 16 on q and v: 8,388,608 trainable parameters)",
    )
    g.add_argument(
        "--lora-targets",
        type=typed("lora_targets", "--lora-targets"),
        metavar="NAMES",
        help="the matmuls LoRA adapts: op names or patterns, comma-separated (default q,v; e.g. q,k,v,o or "
        "q,k,v,o,gate,up,down)",
    )
    g.add_argument(
        "--freeze",
        type=typed("freeze", "--freeze"),
        metavar="PATTERNS",
        help="freeze the weights of the ops these names or fnmatch patterns match, comma-separated "
        "(e.g. 'embed,layers.attn.*')",
    )


def add_precision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", choices=Options.choices("precision"), help="precision policy (default bf16-mixed)")
    p.add_argument("--optimizer", choices=Options.choices("optimizer"), help="optimizer (default adamw)")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """``--hardware --devices --achieved-tflops --mfu --tokens-per-s`` (time and utilisation)."""
    g = p.add_argument_group("time (with --hardware)")
    g.add_argument("--hardware", metavar="NAME", help="a device of 'costmodel hardware', or a .toml/.json file")
    g.add_argument("--devices", type=typed("devices", "--devices"), help="devices N (default 1)")
    rate = g.add_mutually_exclusive_group()
    rate.add_argument(
        "--achieved-tflops",
        type=typed("achieved_flops", "--achieved-tflops"),
        metavar="X",
        help="TFLOP/s each device executes (default: the roofline bound)",
    )
    rate.add_argument("--mfu", type=typed("mfu", "--mfu"), metavar="F", help="model FLOPs utilisation, 0 < F <= 1")
    rate.add_argument(
        "--tokens-per-s",
        type=typed("tokens_per_s", "--tokens-per-s"),
        metavar="R",
        help="a measured throughput of all devices together: gives the MFU",
    )
    rate.add_argument(
        "--time-model",
        choices=Options.choices("time_model"),
        help="without a rate: calibrated (default: attained efficiencies, networks, overlap, "
        "schedule) or roofline (the bound)",
    )
    g.add_argument(
        "--overlap-comm",
        metavar="KINDS",
        help="communication hidden behind compute, comma-separated of dp,tp,pp,sp,ep, or 'none' "
        "(default: dp and sp; see docs/hardware.md)",
    )
    g.add_argument(
        "--stack",
        metavar="NAME",
        help="the software stack whose sustained factor the calibrated step uses (the device's efficiency.stacks, "
        "e.g. megatron-deepspeed on a100-80gb; default: the device's own factor; see docs/hardware.md)",
    )
    g.add_argument(
        "--mfu-basis",
        choices=Options.choices("mfu_basis"),
        help="the model FLOPs an MFU counts: engine (every op, default), 6n (PaLM's 6N, a tied "
        "unembedding included) or 6n-attention (PaLM's 6N + 12·L·H·Q·T)",
    )
    g.add_argument(
        "--price-per-hour",
        type=typed("price_per_hour", "--price-per-hour"),
        metavar="USD|list|NAME",
        help="US dollars per device-hour: gives time.cost_usd (with --tokens) and the cost of a step; 'list': "
        "the dated example price of the device in costmodel/devices/data/prices.json, NAME: an entry of it "
        "(deepseek-v3-h800: $2, DeepSeek-V3's report); the report names the entry, its date and source",
    )


def add_chunk_args(p: argparse.ArgumentParser, what: str, chunk: int) -> None:
    """``--workers``, ``--dask`` and ``--chunk`` of a verb that runs through the chunk engine (``sweep``, ``plan``):
    ``what`` names the items of a chunk (``configs``, ``layouts``), ``chunk`` their default number."""
    verb = "evaluate" if what == "configs" else "search"
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"{verb} chunks of {what} in N local processes (the result is identical; 0: one per CPU)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help=f"{verb} chunks on a Dask cluster, e.g. tcp://host:8786 (needs pip install 'costmodel[dask]')",
    )
    p.add_argument("--chunk", type=int, metavar="N", help=f"{what} per chunk (default {chunk})")


def chunking(args: argparse.Namespace) -> dict[str, object]:
    """``workers``, ``dask`` and (when given) ``chunk`` from :func:`add_chunk_args`' options, checked."""
    if args.workers < 0:
        raise CostModelError(f"--workers {args.workers}: expected 0 (one per CPU) or more local processes")
    if args.chunk is not None and args.chunk < 1:
        raise CostModelError(f"--chunk {args.chunk}: expected a positive number of items per chunk")
    out: dict[str, object] = {"workers": args.workers or os.cpu_count() or 1, "dask": args.dask}
    if args.chunk is not None:
        out["chunk"] = args.chunk
    return out
