"""The choices of a training or inference run, as data: precision policies, optimizers, recompute
choices, inference weight formats. Plain records, no sympy: :mod:`costmodel.options` validates names
against them at start-up; :mod:`costmodel.memory.states` derives bytes from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from fractions import Fraction

from ..errors import CostModelError, closest

#: Pipeline schedules (see :mod:`costmodel.memory.schedules`).
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe")


def check_schedule(schedule: str, pp: int, vpp: int) -> None:
    """Raise when a schedule does not suit the layout (interleaving needs vpp > 1, DualPipe an even pp...)."""
    if schedule not in SCHEDULES:
        raise CostModelError(f"schedule: expected one of {', '.join(SCHEDULES)}, received {schedule!r}")
    if vpp > 1 and schedule != "interleaved":
        raise CostModelError(
            f"--vpp {vpp} is the interleaved schedule's chunks per device; received --schedule "
            f"{schedule} (use --schedule interleaved, or leave it out)"
        )
    if schedule == "interleaved" and vpp < 2:
        raise CostModelError("the interleaved schedule needs --vpp 2 or more virtual stages per device")
    if schedule != "1f1b" and pp == 1:
        raise CostModelError(f"--schedule {schedule} is a pipeline schedule; expected --pp > 1, received --pp 1")
    if schedule == "dualpipe" and pp % 2:
        raise CostModelError(
            f"DualPipe runs two pipelines in opposite directions: expected an even --pp, received {pp}"
        )


#: Activation recompute choices (see :mod:`costmodel.memory.activations`).
RECOMPUTE = ("none", "selective", "full")

#: Attention implementations, as they keep tensors for backward. ``unfused`` (the default): the scores are
#: materialised and the softmax runs in the activations' dtype (Megatron-LM's core attention, nanoGPT's manual
#: path, a bf16 model without autocast): one T×T tensor kept (the probabilities); ``eager``: transformers'
#: eager attention, ``softmax(scores, dtype=torch.float32).to(query.dtype)``: the fp32 probabilities kept by
#: the softmax and their cast kept by the context, two T×T tensors (the graph pass
#: :func:`costmodel.graph.passes.eager_attention`; transformers' GPT-2 softmaxes in the scores' dtype, so a
#: bf16 GPT-2 without autocast is ``unfused``; under autocast both keep the fp32 softmax); ``sdpa``:
#: ``torch.nn.functional.scaled_dot_product_attention`` (on a GPU its flash or memory-efficient kernel: no
#: T×T tensor); ``flash``: FlashAttention.
ATTENTION = ("unfused", "eager", "sdpa", "flash")
#: What each implementation is, in a report's words.
ATTENTION_ABOUT = {
    "unfused": "unfused: scores materialised, softmax in the activations' dtype",
    "eager": "eager (transformers): scores materialised, softmax in fp32 cast back",
    "sdpa": "sdpa: fused kernel, no T×T tensor kept",
    "flash": "flash: FlashAttention, no T×T tensor kept",
}
#: The implementations whose kernel keeps no T×T tensor (the FlashAttention graph pass).
FUSED_ATTENTION = ("sdpa", "flash")
#: Fused attention kernels whose measured share of peak the calibrated step can use (costmodel.devices.attention).
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn", "sdpa")

#: Whose kernels and training loop a training step's memory describes (:mod:`costmodel.memory.implementation`):
#: ``fused`` (Megatron-LM / Transformer Engine style: fused norms and losses keep what Korthikanti et al. 2022
#: count, gradients in a resident buffer, a fused optimizer step) or ``transformers`` (transformers' modules in
#: eager PyTorch: what their Python ops save, ``optimizer.zero_grad()`` setting gradients to None, torch.optim's
#: default step).
IMPLEMENTATIONS = ("fused", "transformers")
#: torch.optim's paths of a step (``foreach``: the CUDA default, lists of tensors at once; ``fused``: one kernel;
#: ``forloop``: one tensor at a time), by the temporary each allocates (see :mod:`costmodel.memory.loop`).
OPTIMIZER_IMPLS = ("foreach", "fused", "forloop")
#: The default path of each implementation: Megatron's fused Adam; torch's CUDA default.
DEFAULT_OPTIMIZER_IMPL = {"fused": "fused", "transformers": "foreach"}

#: The logits an inference prefill keeps: ``last`` (generation: transformers' ``logits_to_keep=1``, the
#: unembedding runs on the last position only) or ``all`` (scoring a text: every position's).
LOGITS = ("last", "all")

#: The model FLOPs an MFU counts: ``engine`` (every op of the graph, the estimate's ``flops.training``),
#: ``6n`` (6 per matmul parameter per token, PaLM's N: the tied unembedding included) and ``6n-attention``
#: (that plus the attention term, PaLM's 6N + 12·L·H·Q·T).
MFU_BASES = ("engine", "6n", "6n-attention")


@dataclass(frozen=True)
class Precision:
    """Which dtype holds each per-parameter training state (``None``: not kept)."""

    name: str
    weights: str
    grads: str
    master: str | None
    states: str  # optimizer moments
    activations: str
    about: str
    compute_copy: str | None = None  # a low-precision weight copy kept for compute (fp8, autocast)
    copy_of: str = "weights"  # which weights have that copy: "weights" (all), "matrices" (matmul weights only)


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "fp32", "fp32", None, "fp32", "fp32", "everything in fp32"),
        Precision(
            "bf16-mixed",
            "bf16",
            "bf16",
            "fp32",
            "fp32",
            "bf16",
            "bf16 weights and grads, fp32 master weights and moments (default)",
        ),
        Precision(
            "bf16-mixed-fp32-grads",
            "bf16",
            "fp32",
            "fp32",
            "fp32",
            "bf16",
            "as bf16-mixed, gradients accumulated in fp32",
        ),
        Precision(
            "bf16-pure",
            "bf16",
            "bf16",
            None,
            "bf16",
            "bf16",
            "bf16 weights, grads and moments, no master copy (a bf16 model with torch.optim: its states take the "
            "parameters' dtype)",
        ),
        Precision(
            "bf16-pure-fp32-moments",
            "bf16",
            "bf16",
            None,
            "fp32",
            "bf16",
            "bf16 weights and grads, no master copy, fp32 moments (an optimizer that keeps its states in fp32)",
        ),
        Precision(
            "fp16-mixed",
            "fp16",
            "fp16",
            "fp32",
            "fp32",
            "fp16",
            "fp16 weights and grads (with loss scaling), fp32 master weights and moments",
        ),
        Precision(
            "bf16-autocast",
            "fp32",
            "fp32",
            None,
            "fp32",
            "bf16",
            "torch.autocast(bf16): fp32 weights, grads and moments; each matmul weight's bf16 cast kept for backward",
            compute_copy="bf16",
            copy_of="matrices",
        ),
        Precision(
            "fp16-autocast",
            "fp32",
            "fp32",
            None,
            "fp32",
            "fp16",
            "torch.autocast(fp16) with a GradScaler: fp32 weights, grads and moments; fp16 matmul weight casts kept",
            compute_copy="fp16",
            copy_of="matrices",
        ),
        Precision(
            "fp8-mixed",
            "bf16",
            "bf16",
            "fp32",
            "fp32",
            "bf16",
            "fp8 matmuls (Transformer Engine): bf16 weights + a cached fp8 copy, bf16 grads, fp32 master and moments",
            compute_copy="fp8",
        ),
        Precision(
            "fp8-bf16-states",
            "bf16",
            "fp32",
            "fp32",
            "bf16",
            "bf16",
            "fp8 matmuls, fp32 grads and master, bf16 moments (DeepSeek-V3 report, sec. 3.3)",
            compute_copy="fp8",
        ),
    )
}


@dataclass(frozen=True)
class Optimizer:
    """The state tensors an optimizer keeps.

    ``states`` are parameter-shaped (in the policy's ``states`` dtype);
    ``factored`` are Adafactor-style second moments (rows + columns of a matrix,
    the full vector for a vector); ``quantized`` are 8-bit block-wise states
    (1 byte per element plus one fp32 absmax per ``block`` elements);
    ``scalars`` are 0-dim fp32 tensors kept per weight tensor (torch's ``step``).
    """

    name: str
    states: tuple[str, ...]
    about: str
    factored: tuple[str, ...] = ()
    quantized: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()
    block: int = 2048


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer("sgd", (), "plain SGD: no state"),
        Optimizer("sgd-momentum", ("momentum",), "SGD with a momentum buffer"),
        Optimizer("adam", ("m", "v"), "Adam: first and second moments", scalars=("step",)),
        Optimizer("adamw", ("m", "v"), "AdamW: first and second moments (decoupled weight decay)", scalars=("step",)),
        Optimizer(
            "adam-amsgrad", ("m", "v", "v_max"), "Adam with amsgrad: also the running max of v", scalars=("step",)
        ),
        Optimizer("adamw-amsgrad", ("m", "v", "v_max"), "AdamW with amsgrad", scalars=("step",)),
        Optimizer(
            "adafactor",
            (),
            "Adafactor (torch.optim.Adafactor, no first moment): factored second moment",
            factored=("v",),
            scalars=("step",),
        ),
        Optimizer(
            "adam-8bit",
            (),
            "8-bit Adam (bitsandbytes, block-wise): int8 m and v + fp32 absmax per 2048",
            quantized=("m", "v"),
        ),
        Optimizer("lion", ("m",), "Lion: one momentum buffer"),
    )
}


def precision(name: str) -> Precision:
    """The precision policy named ``name`` (:data:`PRECISIONS`)."""
    if name not in PRECISIONS:
        raise CostModelError(
            f"unknown precision policy {name!r}{closest(name, PRECISIONS)}; known: {sorted(PRECISIONS)}"
        )
    return PRECISIONS[name]


def optimizer(name: str) -> Optimizer:
    """The optimizer named ``name`` (:data:`OPTIMIZERS`)."""
    if name not in OPTIMIZERS:
        raise CostModelError(f"unknown optimizer {name!r}{closest(name, OPTIMIZERS)}; known: {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name]


@dataclass(frozen=True)
class WeightFormat:
    """How inference weights of matmuls are stored: bits per element + one scale set per group."""

    name: str
    bits: int
    group: int | None  # elements along the input axes sharing a scale; None: one per output row
    scale_bytes: int | Fraction  # bytes of scales (and zero points) per group
    about: str
    block_rows: int | None = 1  # output rows sharing a scale (FP8's 128 × 128 blocks); None: one scale per matrix
    index_bytes: int = 0  # bytes per input element of each matrix (GPTQ's g_idx, an int32 per input column)


#: QLoRA's frozen base (Dettmers et al. 2023, "QLoRA", Sec. 3, Double Quantization): 4-bit NormalFloat, one absmax
#: per block of 64 weights, the absmax themselves quantised to 8 bits with one fp32 constant per 256 of them. Per
#: weight: 4 bits + 8/64 bits + 32/(64 · 256) bits = 4 + 1/8 + 1/512 = 2113/512 bits = 2113/4096 bytes ≈ 0.516
#: (the paper: 0.127 bits of constants per parameter, down from 32/64 = 0.5 without double quantisation).
NF4 = WeightFormat(
    "nf4",
    4,
    64,
    1 + Fraction(4, 256),  # per block of 64: an 8-bit absmax and 1/256 of an fp32 second-level constant
    "NF4 with double quantisation (QLoRA): 4 bits, an 8-bit absmax per 64, an fp32 constant per 256 absmax",
)

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", 32, None, 0, "fp32, no scales"),
        WeightFormat("bf16", 16, None, 0, "bf16, no scales"),
        WeightFormat("fp16", 16, None, 0, "fp16, no scales"),
        WeightFormat("fp8", 8, 128, 4, "fp8 e4m3 with one fp32 scale per 128 input elements"),
        WeightFormat("int8", 8, None, 2, "int8 with one fp16 scale per output channel (LLM.int8-style)"),
        WeightFormat("int4", 4, 128, 4, "int4 with an fp16 scale and fp16 zero point per 128 (GPTQ/AWQ)"),
        NF4,
    )
}


@dataclass(frozen=True)
class Checkpoint:
    """How a checkpoint stores its weights, read off a ``config.json``'s ``quantization_config``.

    ``rules``: (which matmul weights, format), the first that applies wins: ``"routed"`` (a mixture of experts'
    routed experts), ``"layers"`` (matmul weights inside the repeated layers), ``"all"`` (every matmul weight);
    ``keep``: op names (fnmatch patterns) kept in the graph's dtype whatever the rules say (the config's
    ``modules_to_not_convert``, as costmodel names them). Every other weight is in the graph's dtype.
    """

    method: str
    rules: tuple[tuple[str, WeightFormat], ...]
    keep: tuple[str, ...]
    about: str
    source: str

    def format_of(self, node: str, block: str, routed: bool) -> WeightFormat | None:
        """The format of the matmul weight of op ``node`` (in ``block``; ``routed``: an expert's), or None:
        the graph's dtype."""
        if any(fnmatchcase(node, pattern) for pattern in self.keep):
            return None
        for which, fmt in self.rules:
            if which == "all" or (which == "routed" and routed) or (which == "layers" and block):
                return fmt
        return None


def weight_format(name: str) -> WeightFormat:
    """The inference weight format named ``name`` (:data:`WEIGHT_FORMATS`)."""
    if name not in WEIGHT_FORMATS:
        raise CostModelError(
            f"unknown weights dtype {name!r}{closest(name, WEIGHT_FORMATS)}; expected one of {sorted(WEIGHT_FORMATS)}"
        )
    return WEIGHT_FORMATS[name]
