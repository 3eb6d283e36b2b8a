"""Every option a user can type, declared once: its flag, how its text is read, its choices, its help line.

The command line's flags (``costmodel.cli``), :meth:`Options.parse` (typed text → value), the docs' table of
options (``docs/options.md``, generated) and :meth:`Options.flags` all read this one table, so an option added
here is in the CLI, in Python (:class:`~costmodel.options.Options` has the field of the same name), in the JSON
(``Options.describe``) and in the docs at once; ``tests/cli/test_flags.py`` checks each of those doors.

A declaration names the option as :meth:`Options.make` does (a field, or a shortcut such as ``tp`` that sets a
field of the layout). ``takes`` says how argparse takes it: ``value`` (text read by ``read``), ``choice`` (one of
:meth:`Options.choices`), ``switch`` (``--x``/``--no-x``), ``on`` (``--x`` only), ``text`` (taken as typed);
``group`` is the section of ``--help`` it is listed under. No sympy here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One option as typed: ``name`` (the :class:`Options` name), ``group``, ``help``; see the module notes."""

    name: str
    group: str
    help: str
    takes: str = "value"
    read: str | None = None  # count | length | rate | price | names: how typed text is read (Options.parse)
    metavar: str | None = None
    flag: str | None = None  # the flag, when it is not --name with dashes
    scale: int = 1  # the typed number × scale is the option's value (--achieved-tflops: 10^12 FLOP/s)
    exclusive: str | None = None  # flags of one exclusive set: at most one of them is given
    numbers: tuple[int, ...] | None = None  # the whole numbers a value takes (--zero 0..3)

    @property
    def option(self) -> str:
        """The flag as typed: ``--name-with-dashes`` unless declared."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """argparse's attribute for it."""
        return self.option[2:].replace("-", "_")


#: The groups of ``--help``, in order, and their titles (None: listed with the command's own flags).
GROUPS = {
    "model": None,
    "step": None,
    "precision": None,
    "counting": None,
    "memory": "memory and parallel layout (every memory_bytes.* number is per device)",
    "time": "time (with --hardware)",
    "finetune": "fine-tuning (frozen weights hold no gradient and no optimizer state)",
}

_PARALLEL = (
    ("dp", "data"),
    ("tp", "tensor (Megatron)"),
    ("pp", "pipeline (1F1B)"),
    ("sp", "sequence/context"),
    ("cp", "context (ring attention; the same as --sp)"),
    ("ep", "expert"),
)

#: Every option a user can type, in the order ``--help`` lists them.
FLAGS: tuple[Flag, ...] = (
    Flag(
        "via",
        "model",
        "how a config.json is read: family (a built-in family) or trace (its transformers model traced; "
        "costmodel[torch]); default: the family, else traced when torch is installed",
        takes="choice",
    ),
    Flag("batch", "step", "sequences per step, B (default {batch_default}); 1k = 1000", read="count"),
    Flag("seq", "step", "tokens per sequence, T (default: the model's context); 8k = 8192", read="length"),
    Flag("tokens", "step", "training tokens D, e.g. 3e11 or 300B", read="count"),
    Flag("precision", "precision", "precision policy (default bf16-mixed)", takes="choice"),
    Flag("optimizer", "precision", "optimizer (default adamw)", takes="choice"),
    Flag(
        "causal", "counting", "count causal attention over the full T×T square (default) or half of it", takes="choice"
    ),
    Flag(
        "recompute",
        "memory",
        "activation recompute: none (default), selective (attention core) or full (layer inputs only)",
        takes="choice",
    ),
    Flag(
        "recompute_fraction",
        "memory",
        "partial rematerialisation: a share F of each repeated block's layers recomputed whole, the rest as "
        "--recompute says (PaLM 540B: --recompute selective --recompute-fraction 0.75)",
        read="rate",
        metavar="F",
    ),
    Flag(
        "attention",
        "memory",
        "attention implementation: unfused (the training default: scores materialised, softmax in the "
        "activations' dtype), eager (transformers' eager attention: softmax in fp32 cast back, two T×T tensors "
        "kept), sdpa or flash (fused: no T×T tensor kept; flash is the --inference default, as serving engines "
        "run fused attention)",
        takes="choice",
    ),
    Flag("flash", "memory", "a synonym of --attention flash: no T×T scores kept", takes="switch"),
    Flag(
        "norm_stats",
        "memory",
        "count the fp32 statistics norms keep for backward (default); --no-norm-stats leaves them out, as "
        "Korthikanti et al. 2022, Table 2 do",
        takes="switch",
    ),
    Flag("zero", "memory", "ZeRO stage over dp (3 = FSDP full shard)", numbers=(0, 1, 2, 3)),
    *(Flag(name, "memory", f"{what} parallel degree", read="count") for name, what in _PARALLEL),
    Flag("vpp", "memory", "virtual pipeline stages per device (interleaved 1F1B; default 1)", read="count"),
    Flag("schedule", "memory", "pipeline schedule (default 1f1b; interleaved with --vpp > 1)", takes="choice"),
    Flag(
        "stage_layers",
        "memory",
        "layers on the first and last pipeline stages when they differ (Llama 3 405B: 7,7)",
        takes="text",
        metavar="FIRST,LAST",
    ),
    Flag(
        "megatron_sp",
        "memory",
        "Megatron sequence parallelism in the TP group (replicated activations divided by tp)",
        takes="on",
    ),
    Flag(
        "micro_batch",
        "memory",
        "sequences per micro-batch on one device (default: 1 with a pipeline, --pp > 1; else batch / dp)",
        read="count",
    ),
    Flag("inference", "memory", "inference memory: weights, KV cache, working set", takes="on"),
    Flag("context", "memory", "KV-cache context in tokens (inference); 128k = 131072", read="length"),
    Flag("weights_dtype", "memory", "inference weight format (int4/int8/fp8 carry their group scales)", takes="choice"),
    Flag(
        "kv_dtype",
        "memory",
        "KV-cache element dtype for inference (default: the graph's activation dtype)",
        takes="choice",
    ),
    Flag(
        "logits",
        "memory",
        "inference prefill: keep the last position's logits (default: a generation) or all of them (scoring a text)",
        takes="choice",
    ),
    Flag("hardware", "time", "a device of 'costmodel hardware', or a .toml/.json file", takes="text", metavar="NAME"),
    Flag("devices", "time", "devices N (default 1)", read="count"),
    Flag(
        "achieved_flops",
        "time",
        "TFLOP/s each device executes (default: the roofline bound)",
        read="rate",
        metavar="X",
        flag="--achieved-tflops",
        scale=10**12,
        exclusive="rate",
    ),
    Flag("mfu", "time", "model FLOPs utilisation, 0 < F <= 1", read="rate", metavar="F", exclusive="rate"),
    Flag(
        "tokens_per_s",
        "time",
        "a measured throughput of all devices together: gives the MFU",
        read="rate",
        metavar="R",
        exclusive="rate",
    ),
    Flag(
        "time_model",
        "time",
        "without a rate: calibrated (default: attained efficiencies, networks, overlap, schedule) or roofline "
        "(the bound)",
        takes="choice",
        exclusive="rate",
    ),
    Flag(
        "overlap_comm",
        "time",
        "communication hidden behind compute, comma-separated of dp,tp,pp,sp,ep, or 'none' (default: dp and sp; "
        "see docs/hardware.md)",
        takes="text",
        metavar="KINDS",
    ),
    Flag(
        "stack",
        "time",
        "the software stack whose sustained factor the calibrated step uses (the device's efficiency.stacks, "
        "e.g. megatron-deepspeed on a100-80gb; default: the device's own factor; see docs/hardware.md)",
        takes="text",
        metavar="NAME",
    ),
    Flag(
        "mfu_basis",
        "time",
        "the model FLOPs an MFU counts: engine (every op, default), 6n (PaLM's 6N, a tied unembedding included) "
        "or 6n-attention (PaLM's 6N + 12·L·H·Q·T)",
        takes="choice",
    ),
    Flag(
        "price_per_hour",
        "time",
        "US dollars per device-hour: gives time.cost_usd (with --tokens) and the cost of a step; 'list': the dated "
        "example price of the device in costmodel/devices/data/prices.json, NAME: an entry of it "
        "(deepseek-v3-h800: $2, DeepSeek-V3's report); the report names the entry, its date and source",
        read="price",
        metavar="USD|list|NAME",
    ),
)

FLAGS += (
    Flag(
        "lora",
        "finetune",
        "LoRA adapters of rank RANK on the --lora-targets matmuls, every other weight frozen (LLaMA-2-7B, --lora 16 "
        "on q and v: 8,388,608 trainable parameters)",
        read="count",
        metavar="RANK",
    ),
    Flag(
        "lora_targets",
        "finetune",
        "the matmuls LoRA adapts: op names or patterns, comma-separated (default q,v; e.g. q,k,v,o or "
        "q,k,v,o,gate,up,down)",
        read="names",
        metavar="NAMES",
    ),
    Flag(
        "freeze",
        "finetune",
        "freeze the weights of the ops these names or fnmatch patterns match, comma-separated (e.g. "
        "'embed,layers.attn.*')",
        read="names",
        metavar="PATTERNS",
    ),
)

BY_NAME = {f.name: f for f in FLAGS}
assert len(BY_NAME) == len(FLAGS), "an option is declared twice"

#: How each option typed as text is read (:meth:`Options.parse`), from the declarations.
PARSERS = {f.name: f.read for f in FLAGS if f.read}

__all__ = ["BY_NAME", "FLAGS", "GROUPS", "PARSERS", "Flag"]
