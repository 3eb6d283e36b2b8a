"""What a transformers module computes beyond the architecture it implements, taken off FlopCounterMode's count.

``costmodel check FAMILY --against transformers`` compares a family with transformers' module of the same
config. Where that module does more matmul work than the architecture needs, and the family counts what the
architecture needs, the two sides differ by design, not by a bug. Each such implementation choice is one
:class:`Extra` here: which modules it applies to (found in the built module, not by model type), the FLOPs it
adds there at the drawn sizes (forward, and forward + backward), computed from the module's own shapes, and one
sentence stating it, printed at the top of the report. Nothing else is loosened: the rest must match exactly.

* **Every expert runs every token** (``Llama4TextMoe``): transformers multiplies every token by every expert and
  gives the ones not picked a router score of 0 (its experts take no ``experts_implementation``), so
  FlopCounterMode counts ``n_experts`` experts where the model computes ``top_k``: ``(E − k)`` experts' weights ×
  ``2·B·T`` more forward, 3× that forward + backward (each ``bmm``'s backward is two of its size).
* **A padded causal convolution** (a Mamba mixer's ``conv1d``, depthwise, kernel ``W``, padding ``W − 1``):
  transformers' ``causal_conv1d_fn`` fallback pads ``W − 1`` on both sides and keeps the first ``T`` of the
  ``T + W − 1`` outputs, where a causal kernel computes ``T``: ``2·B·U·W·(W − 1)`` more forward and again in the
  input gradient; and torch 2.13's ``conv_backward_flop`` counts the weight gradient as if the convolution were
  dense (groups ignored): ``2·B·U²·W·(T + W − 1)`` for the ``2·B·U·W·T`` it computes.

Tested against the hand counts of ``tests/arch/test_hf_ssm.py`` and ``tests/arch/test_hf_decoders_b.py``
(``tests/testing/test_hf_extra.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ..errors import CostModelError


@dataclass(frozen=True)
class Extra:
    """One implementation choice: ``finds(module)`` yields the submodules it applies to, ``flops(part, B, T)`` is
    what FlopCounterMode counts there beyond the architecture, ``(forward, forward + backward)``; ``states``: the
    sentence the report prints."""

    name: str
    states: str
    finds: Callable[[object], Iterator[object]]
    flops: Callable[[object, int, int], tuple[int, int]]


EXTRAS: dict[str, Extra] = {}


def extra(name: str, states: str, finds: Callable[[object], Iterator[object]]):
    """Register the decorated ``flops`` as the :class:`Extra` ``name`` (one registry; a name twice raises)."""

    def register(flops: Callable[[object, int, int], tuple[int, int]]):
        if name in EXTRAS:
            raise CostModelError(f"transformers extra {name!r} is registered twice")
        EXTRAS[name] = Extra(name, states, finds, flops)
        return flops

    return register


def _of_class(suffix: str) -> Callable[[object], Iterator[object]]:
    def finds(module) -> Iterator[object]:
        return (m for m in module.modules() if type(m).__name__.endswith(suffix))

    return finds


@extra(
    "every expert runs every token",
    "Llama4TextMoe runs every token through every expert (the ones not picked weighted 0): FlopCounterMode's "
    "count less (n_experts - top_k) experts' 2·B·T·weights forward, 3x that forward + backward",
    _of_class("Llama4TextMoe"),
)
def _all_experts(moe, batch: int, seq: int) -> tuple[int, int]:
    experts = moe.experts
    weights = experts.gate_up_proj.numel() + experts.down_proj.numel()  # E experts' matrices
    idle = (moe.num_experts - moe.top_k) * weights // moe.num_experts
    forward = 2 * batch * seq * idle
    return forward, 3 * forward


def _mamba_convs(module) -> Iterator[object]:
    for m in module.modules():
        conv = getattr(m, "conv1d", None)
        if type(m).__name__.endswith("MambaMixer") and conv is not None and conv.groups == conv.in_channels:
            yield conv


@extra(
    "a padded causal convolution",
    "a Mamba mixer's depthwise conv1d pads W - 1 on both sides and keeps T of its T + W - 1 outputs, and "
    "FlopCounterMode counts its weight gradient as dense (groups ignored): taken off, 2·B·U·W·(W - 1) forward "
    "and 2·B·U·W·(2·(W - 1) + U·(T + W - 1) - T) more forward + backward",
    _mamba_convs,
)
def _padded_conv(conv, batch: int, seq: int) -> tuple[int, int]:
    u, w = conv.in_channels, conv.kernel_size[0]
    pad = 2 * batch * u * w * (w - 1)  # the W - 1 outputs past T, each W multiply-adds per channel
    weight_grad = 2 * batch * u * w * (u * (seq + w - 1) - seq)  # counted as dense, less what it computes
    return pad, 2 * pad + (weight_grad if conv.weight.requires_grad else 0)  # forward, input and weight grads


def surplus(module, sizes: Mapping[str, int]) -> dict[str, int]:
    """FLOPs FlopCounterMode counts in ``module`` beyond the architecture at ``sizes`` (its ``B`` and ``T``), by
    term: ``flops.matmul.forward`` and ``flops.matmul.training`` (zero where no :class:`Extra` applies)."""
    batch, seq = sizes.get("B", 2), sizes.get("T", 8)
    forward = training = 0
    for e in EXTRAS.values():
        for part in e.finds(module):
            f, t = e.flops(part, batch, seq)
            forward, training = forward + f, training + t
    return {"flops.matmul.forward": forward, "flops.matmul.training": training}


def conventions(module) -> tuple[str, ...]:
    """The sentences of the :class:`Extra` s that apply to ``module`` (what the report states it took off)."""
    return tuple(e.states for e in EXTRAS.values() if next(iter(e.finds(module)), None) is not None)
