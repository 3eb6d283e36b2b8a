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
    Flag(
        "implementation",
        "memory",
        "whose kernels and training loop: fused (default: Megatron/TE-style fused kernels, resident gradient "
        "buffer, fused optimizer; Korthikanti et al.'s activations) or transformers (transformers' modules in eager "
        "PyTorch: what their ops save, zero_grad(set_to_none=True), torch.optim's foreach step)",
        takes="choice",
    ),
    Flag(
        "optimizer_impl",
        "memory",
        "torch.optim's step: foreach (torch's CUDA default: one extra copy of a state), fused (none) or forloop "
        "(about twice the largest tensor); default: the implementation's (fused: fused, transformers: foreach)",
        takes="choice",
    ),
    Flag(
        "grads_resident",
        "memory",
        "gradients held through all of backward (set_to_none=False, gradient accumulation, a resident buffer); "
        "--no-grads-resident: each born at its weight's backward (zero_grad's default); default: the "
        "implementation's (fused: resident; transformers: resident only with more than one micro-batch)",
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
        "overlap_grad_reduce",
        "time",
        "ZeRO/DDP: the gradient reduce-scatter (all-reduce without ZeRO) hidden behind the last micro-batch's "
        "backward, as Megatron's --overlap-grad-reduce (default: as --overlap-comm hides dp)",
        takes="switch",
    ),
    Flag(
        "overlap_param_gather",
        "time",
        "ZeRO-1/2: the parameter all-gather hidden behind the next step's forward, as Megatron's "
        "--overlap-param-gather (default: as --overlap-comm hides dp)",
        takes="switch",
    ),
    Flag(
        "gpus_per_node",
        "time",
        "devices in one scale-up (NVLink) domain, the node (default: the device's network.node_size, 8 for an HGX)",
        read="count",
        metavar="N",
    ),
    Flag(
        "scale_out",
        "time",
        "the scale-out network in GB/s per direction: per device (50: one 400 Gb/s NIC per GPU) or per node, shared "
        "by its devices (100/node: four 200 Gb/s NICs per node); default: the device table's",
        takes="text",
        metavar="GBPS[/node]",
    ),
    Flag(
        "cluster",
        "time",
        "a JSON file of the cluster: gpus_per_node, scale_out_gbps, scale_out_per (gpu or node), source; the flags "
        "above win over it",
        takes="text",
        metavar="FILE",
    ),
    Flag(
        "cuda_graphs",
        "time",
        "CUDA graphs: the step's kernels replayed from one launch, so no kernel waits on the host's dispatch "
        "(default: each op at least its kernels' launches, costmodel/devices/data/host.json)",
        takes="on",
    ),
    Flag(
        "launch_us",
        "time",
        "the host's dispatch time per kernel in µs (default: the stack's in costmodel/devices/data/host.json, 5)",
        read="rate",
        metavar="US",
    ),
    Flag(
        "attention_kernel",
        "time",
        "the fused attention kernel whose measured share of peak attention runs at: flash2 (35% on H100), flash3 "
        "(75%, Hopper only), cudnn (60%) or sdpa (PyTorch's flash backend); implies fused attention; default: the "
        "device's efficiency.attention (costmodel/devices/data/attention.json)",
        takes="choice",
    ),
    Flag(
        "tp_comm_overlap",
        "time",
        "tensor-parallel collectives pipelined with their GEMMs, as Megatron's --tp-comm-overlap (Transformer "
        "Engine): forward in tp chunks (the first chunk's exposed), backward behind the op's other GEMM; a partial "
        "hide (see docs/hardware.md)",
        takes="on",
    ),
    Flag(
        "comm_sm_share",
        "time",
        "the share F of compute an overlapped collective takes while it runs (NCCL's kernels occupy SMs): hidden "
        "communication then costs F × its time (default 0: overlap is free)",
        read="rate",
        metavar="F",
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
    Flag(
        "base_dtype",
        "finetune",
        "how the frozen matmul weights of the layers are stored (nf4: QLoRA's 4-bit NormalFloat, double-quantised, "
        "2113/4096 bytes a weight; default: the precision's weights dtype)",
        takes="choice",
    ),
    Flag("qlora", "finetune", "QLoRA: --lora over a 4-bit base (--base-dtype nf4)", takes="on"),
)

BY_NAME = {f.name: f for f in FLAGS}
assert len(BY_NAME) == len(FLAGS), "an option is declared twice"

#: How each option typed as text is read (:meth:`Options.parse`), from the declarations.
PARSERS = {f.name: f.read for f in FLAGS if f.read}

__all__ = ["BY_NAME", "FLAGS", "GROUPS", "PARSERS", "Flag"]
