"""Named counting conventions, as data: how each published rule counts training FLOPs, with its source.

Every published rule for "training FLOPs" is the same graph counted with different choices; this table
writes each one down (:class:`~costmodel.options.Counting` for the op-level choices, plus how the step is
summed). :mod:`costmodel.reports.compare` derives each from a model's graph. No sympy here: the names are
read at start-up (``costmodel compare --help``).

>>> sorted(CONVENTIONS)[:3]
['6nd', 'chinchilla', 'engine']
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
        ``"ops"`` (sum of op costs) or ``"params"`` (6 per non-embedding parameter per token).
    attention:
        ``method="params"`` only: add 3 × the forward FLOPs of the contractions.
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

    def __post_init__(self) -> None:
        if self.method not in ("ops", "params"):
            raise CostModelError(f"convention {self.name!r}: method must be 'ops' or 'params', "
                                 f"received {self.method!r}")


_MATMUL_ONLY = Counting(elementwise="none")

#: The named conventions, in the order ``costmodel compare`` prints them.
CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    Convention("engine", "costmodel's default: every op's FLOPs, causal attention over the full square",
               "docs/conventions.md"),
    Convention("flopcounter", "matmuls and contractions only, full causal square, embedding lookups free",
               "PyTorch torch/utils/flop_counter.py (FlopCounterMode counts only registered matmul-like ops)",
               _MATMUL_ONLY),
    Convention("6nd", "6 per non-embedding parameter per token; attention term dropped",
               "Kaplan et al. 2020, Sec. 2.1: C ≈ 6N per token", _MATMUL_ONLY, "params", attention=False),
    Convention("kaplan", "6N plus the one T term, causal (half) attention: C_fwd = 2N + 2 n_layer n_ctx d_attn",
               "Kaplan et al. 2020, Table 1 and Eq. 2.2", Counting(causal="half", elementwise="none"),
               "params"),
    Convention("palm", "6N + 12·L·H·Q·T per token: full attention square (also torchtitan, nanoGPT's MFU)",
               "Chowdhery et al. 2022 (PaLM), Appendix B", _MATMUL_ONLY, "params"),
    Convention("chinchilla", "every matmul incl. embeddings as one-hot matmuls, softmax 3 FLOPs per score, "
               "backward 2 × forward", "Hoffmann et al. 2022 (Chinchilla), Appendix F",
               Counting(embedding="matmul", elementwise="softmax", softmax_flops=(3, 6))),
    Convention("megatron", "matmuls only, full attention square, each layer's forward recomputed: "
               "96·B·T·L·d²(1 + T/6d + V/16Ld)",
               "Narayanan et al. 2021 (Megatron-LM at scale), Appendix: FLOPs with activation recomputation",
               _MATMUL_ONLY, recompute=True),
    Convention("megatron-causal", "as megatron with causal attention halved (what a causal kernel skips): "
               "96·B·T·L·d²(1 + T/12d + V/16Ld)",
               "Narayanan et al. 2021, Appendix, with the attention term halved for the causal mask",
               Counting(causal="half", elementwise="none"), recompute=True),
)}


def convention(name: str) -> Convention:
    """The named convention, or a :class:`CostModelError` naming the known ones."""
    if name not in CONVENTIONS:
        raise CostModelError(f"unknown convention {name!r}{closest(name, CONVENTIONS)}; "
                             f"known: {', '.join(CONVENTIONS)}")
    return CONVENTIONS[name]
