"""Named counting conventions, as data: how each published rule counts training FLOPs, with its source.

Every published rule for "training FLOPs" is the same graph counted with different choices; this table
writes each one down (:class:`~costmodel.options.Counting` for the op-level choices, plus how the step is
summed). :mod:`costmodel.verbs.compare` derives each from a model's graph. No sympy here: the names are
read at start-up (``costmodel compare --help``).

>>> {'6nd', '6nd-total', 'chinchilla', 'engine'} <= set(CONVENTIONS)
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import CostModelError, closest
from .options import Counting


@dataclass(frozen=True)
class Convention:
    """A named way of counting training FLOPs (and memory), with its source.

    Parameters
    ----------
    name, about, source:
        What it is called, what it counts, where it is published (with the formula as published).
    ops:
        The op-level choices (causal, embedding, element-wise FLOPs, softmax FLOPs).
    method:
        ``"ops"`` (sum of op costs) or ``"params"`` (6 per parameter per token, N as ``params`` says).
    params:
        ``method="params"`` only, which parameters are N: ``"non_embedding"`` (Kaplan: every parameter but
        the embedding tables, biases and norm gains included), ``"matmul"`` (every parameter a token's
        matmuls use: the non-embedding ones plus a tied unembedding's table, which the logits matmul reads;
        PaLM's N), ``"total"`` (every parameter, embeddings included: GPT-3's Table D.1, Llama 3's 3.8e25),
        ``"strict"`` (Kaplan et al.'s Table 1: the weight matrices of the repeated layers only, no biases,
        no norm gains) or ``"nanogpt"`` (nanoGPT's ``get_num_params()``: every parameter but the position
        table). A mixture of experts counts the active (routed) share.
    attention:
        ``method="params"`` only: add 3 × the forward FLOPs of the contractions.
    embed_flops:
        ``method="params"`` only: forward FLOPs per element of the embedding (the tensor entering the
        repeated layers), × 3 for training (Kaplan et al.'s Table 1 "Embed" row: 4·d_model per token).
    router:
        ``method="ops"`` only: ``False`` leaves out a mixture of experts' router matmul (Megatron-Core's
        ``num_floating_point_operations`` has no router term).
    recompute:
        ``method="ops"`` only: the forward of every op inside a repeated block runs
        again during backward (and only the blocks' inputs are saved).
    policy:
        Precision policy of the model-state memory (:mod:`costmodel.training`).
    """

    name: str
    about: str
    source: str
    ops: Counting = field(default_factory=Counting)
    method: str = "ops"
    attention: bool = True
    recompute: bool = False
    policy: str = "bf16-mixed"
    params: str = "non_embedding"
    embed_flops: int = 0
    router: bool = True

    def __post_init__(self) -> None:
        if self.method not in ("ops", "params"):
            raise CostModelError(
                f"convention {self.name!r}: method must be 'ops' or 'params', received {self.method!r}"
            )
        if self.params not in PARAMS:
            raise CostModelError(
                f"convention {self.name!r}: params must be one of {', '.join(PARAMS)}, received {self.params!r}"
            )


#: What a ``method="params"`` convention may take as N (see :class:`Convention`).
PARAMS = ("non_embedding", "matmul", "total", "strict", "nanogpt")


_MATMUL_ONLY = Counting(elementwise="none")

#: The named conventions, in the order ``costmodel compare`` prints them.
CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention(
            "engine",
            "costmodel's default: every op's FLOPs, causal attention over the full square",
            "docs/conventions.md",
        ),
        Convention(
            "flopcounter",
            "matmuls and contractions only, full causal square, embedding lookups free",
            "PyTorch torch/utils/flop_counter.py (FlopCounterMode counts only registered matmul-like ops)",
            _MATMUL_ONLY,
        ),
        Convention(
            "6nd",
            "6 per non-embedding parameter per token; attention term dropped",
            "Kaplan et al. 2020, Sec. 2.1: C ≈ 6N per token",
            _MATMUL_ONLY,
            "params",
            attention=False,
        ),
        Convention(
            "6nd-total",
            "6 per parameter per token, embeddings included; attention term dropped",
            "Brown et al. 2020 (GPT-3), Table D.1 (GPT-3 Small: 6 × 125M × 300B = 2.25e20); Llama Team 2024, "
            "Sec. 3.1 (405B × 15.6T tokens: 3.8e25)",
            _MATMUL_ONLY,
            "params",
            attention=False,
            params="total",
        ),
        Convention(
            "kaplan",
            "6N plus the one T term, causal (half) attention: C_fwd = 2N + 2 n_layer n_ctx d_attn",
            "Kaplan et al. 2020, Table 1 and Eq. 2.2",
            Counting(causal="half", elementwise="none"),
            "params",
        ),
        Convention(
            "kaplan-strict",
            "Kaplan's Table 1 to the letter: N = the layers' weight matrices only (no biases, "
            "no norm gains), C_fwd = 2N + 2 n_layer n_ctx d_attn + 4 d_model (its Embed row)",
            "Kaplan et al. 2020, Table 1 (N = 2 d_model n_layer (2 d_attn + d_ff))",
            Counting(causal="half", elementwise="none"),
            "params",
            params="strict",
            embed_flops=4,
        ),
        Convention(
            "palm",
            "6N + 12·L·H·Q·T per token, N every matmul parameter (a tied unembedding included): full "
            "attention square (also torchtitan)",
            "Chowdhery et al. 2022 (PaLM), Appendix B (8B at T = 2048: 5.5e10 FLOPs per token)",
            _MATMUL_ONLY,
            "params",
            params="matmul",
        ),
        Convention(
            "nanogpt",
            "nanoGPT's estimate_mfu: 6N + 12·L·H·Q·T, N = get_num_params() (all but the position table)",
            "karpathy/nanoGPT model.py, GPT.get_num_params and GPT.estimate_mfu (PaLM Appendix B)",
            _MATMUL_ONLY,
            "params",
            params="nanogpt",
        ),
        Convention(
            "chinchilla",
            "every matmul incl. embeddings as one-hot matmuls, softmax 3 FLOPs per score, backward 2 × forward",
            "Hoffmann et al. 2022 (Chinchilla), Appendix F",
            Counting(embedding="matmul", elementwise="softmax", softmax_flops=(3, 6)),
        ),
        Convention(
            "megatron",
            "matmuls only, full attention square, each layer's forward recomputed: 96·B·T·L·d²(1 + T/6d + V/16Ld)",
            "Narayanan et al. 2021 (Megatron-LM at scale), Appendix: FLOPs with activation recomputation",
            _MATMUL_ONLY,
            recompute=True,
        ),
        Convention(
            "megatron-causal",
            "as megatron with causal attention halved (what a causal kernel skips): 96·B·T·L·d²(1 + T/12d + V/16Ld)",
            "Narayanan et al. 2021, Appendix, with the attention term halved for the causal mask",
            Counting(causal="half", elementwise="none"),
            recompute=True,
        ),
        Convention(
            "megatron-core",
            "Megatron-Core's num_floating_point_operations: matmuls only (3 × forward), full "
            "attention square, no recompute, experts top-k, no router: 12·B·s·L·h²·((1 + g/a + s/h)·q/h + "
            "f/h·k·gated + V/2Lh)",
            "NVIDIA/Megatron-LM megatron/training/training.py, num_floating_point_operations (core_r0.8.0)",
            _MATMUL_ONLY,
            router=False,
        ),
        Convention(
            "megatron-core-causal",
            "Megatron-Core's num_floating_point_operations since it halves the causal mask: as megatron-core with "
            "the core attention term q·s/2·2 ('only half of the mask is non-zero'), no router: 12·B·s·L·h²·"
            "((1 + g/a + s/2h)·q/h + f/h·k·gated + V/2Lh)",
            "NVIDIA/Megatron-LM megatron/training/training.py, num_floating_point_operations, transformer_flops "
            "(commit 001b00c2): '# causal mask (only half of the mask is non-zero)'",
            Counting(causal="half", elementwise="none"),
            router=False,
        ),
    )
}


def convention(name: str) -> Convention:
    """The named convention, or a :class:`CostModelError` naming the known ones."""
    if name not in CONVENTIONS:
        raise CostModelError(
            f"unknown convention {name!r}{closest(name, CONVENTIONS)}; known: {', '.join(CONVENTIONS)}"
        )
    return CONVENTIONS[name]
