"""The sub-records of :class:`~costmodel.options.Options`: :class:`Counting` (how FLOPs are counted) and
:class:`Layout` (how a step is spread over devices), with the checks every record's fields share.

Like :mod:`costmodel.options`, this module imports no sympy or networkx (a cached estimate starts without them).

>>> Layout(tp=2, pp=4, dp=8).devices
64
>>> Layout(vpp=2, pp=4).schedule  # --vpp alone asks for the interleaved schedule
'interleaved'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from ..errors import CostModelError, closest
from ..sizes import parse_count, parse_rate
from .policies import SCHEDULES, check_schedule


@dataclass(frozen=True)
class Counting:
    """Counting choices that change FLOP numbers at the level of one op. Say which you use. The named
    conventions of ``costmodel compare`` (6ND, Kaplan, PaLM, Chinchilla, Megatron) are these choices plus
    how the step is summed.

    Attributes
    ----------
    causal : ``"full"`` counts causal attention over the whole T×T square (dense kernels,
        ``FlopCounterMode``); ``"half"`` counts half of it (what a causal kernel skips to).
    embedding : ``"lookup"``: a gather does no FLOPs forward; ``"matmul"``: it counts as a one-hot
        matmul, 2 × ids × table, backward 2 × forward (Chinchilla, Appendix F).
    elementwise : which non-matmul FLOPs count: ``"all"`` (the element-wise table and the rules),
        ``"none"`` (``FlopCounterMode``, 6ND) or ``"softmax"`` (Chinchilla).
    softmax_flops : per score, (forward, backward): (5, 4) = max, subtract, exp, sum, divide; Chinchilla (3, 6).
    """

    causal: str = "full"
    embedding: str = "lookup"
    elementwise: str = "all"
    softmax_flops: tuple[int, int] = (5, 4)

    def __post_init__(self) -> None:
        choices = {
            "causal": ("full", "half"),
            "embedding": ("lookup", "matmul"),
            "elementwise": ("all", "none", "softmax"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise CostModelError(
                    f"counting: {name} must be one of {', '.join(map(repr, allowed))}, received {getattr(self, name)!r}"
                )
        sf = self.softmax_flops
        if not (
            isinstance(sf, tuple)
            and len(sf) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sf)
        ):
            raise CostModelError(
                f"counting: softmax_flops must be two whole numbers (forward, backward), received {sf!r}"
            )


@dataclass(frozen=True)
class Layout:
    """Degrees of data (``dp``), tensor (``tp``), pipeline (``pp``), sequence/context (``sp``, also given as
    ``cp``) and expert (``ep``) parallelism, the ZeRO stage (0 = none), Megatron sequence parallelism inside
    the TP group, and the pipeline: its ``schedule`` (:data:`~costmodel.options.policies.SCHEDULES`), ``vpp``
    virtual stages per device (interleaved 1F1B; ``vpp > 1`` picks it) and ``stage_layers`` (layers on the
    first and the last stage when they differ from the others, e.g. ``(7, 7)``)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: int = 1
    ep: int = 1
    zero: int = 0
    megatron_sp: bool = False
    vpp: int = 1
    schedule: str = "1f1b"
    stage_layers: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "sp", "ep", "vpp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CostModelError(f"layout: {name} must be a positive whole number, received {v!r}")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise CostModelError(f"layout: zero must be 0, 1, 2 or 3, received {self.zero!r}")
        if not isinstance(self.megatron_sp, bool):
            raise CostModelError(f"layout: megatron_sp must be true or false, received {self.megatron_sp!r}")
        if self.dp % self.ep:
            raise CostModelError(
                f"layout: ep ({self.ep}) must divide dp ({self.dp}): experts are spread over the data-parallel devices"
            )
        if self.vpp > 1 and self.schedule == "1f1b":  # --vpp alone asks for the interleaved schedule
            object.__setattr__(self, "schedule", "interleaved")
        check_choice(self.schedule, SCHEDULES, "layout: schedule")
        check_schedule(self.schedule, self.pp, self.vpp)
        if self.stage_layers is not None:
            sl = self.stage_layers
            if isinstance(sl, str):
                sl = tuple(part.strip() for part in sl.split(","))
            if not (isinstance(sl, (tuple, list)) and len(sl) == 2):
                raise CostModelError(
                    f"layout: stage_layers must be the layers of the first and last stage, e.g. "
                    f"(7, 7), received {self.stage_layers!r}"
                )
            sl = tuple(parse_count(v, "layout: stage_layers") for v in sl)
            if self.pp < 2:
                raise CostModelError("layout: stage_layers sets the first and last pipeline stages; expected --pp > 1")
            object.__setattr__(self, "stage_layers", sl)

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.sp


#: ``scale_out_per``: the bandwidth is each device's (``gpu``) or a node's, shared by its devices (``node``).
SCALE_OUT_PER = ("gpu", "node")


def parse_scale_out(text: object) -> tuple[Fraction, str]:
    """``"50"`` → (50, ``"gpu"``); ``"100/node"`` → (100, ``"node"``); ``"50/gpu"`` as the first. GB/s per direction.

    >>> parse_scale_out("100/node")
    (Fraction(100, 1), 'node')
    """
    raw = str(text).strip()
    value, _, per = raw.partition("/")
    per = per.strip().lower() or "gpu"
    try:
        gbps = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        gbps = None
    if gbps is None or gbps <= 0 or per not in SCALE_OUT_PER or isinstance(text, float):
        raise CostModelError(
            f"--scale-out: expected GB/s per direction per GPU (e.g. 50) or per node (e.g. 100/node), received {text!r}"
        )
    return gbps, per


def check_choice(value: object, allowed, what: str) -> str:
    """``value`` if it is one of ``allowed``, else an error naming the closest."""
    if not isinstance(value, str) or value not in allowed:
        raise CostModelError(
            f"{what}: expected one of {', '.join(sorted(allowed))}, received {value!r}"
            + (closest(value, allowed) if isinstance(value, str) else "")
        )
    return value


def check_count(value: object, what: str, *, length: bool = False, sequences: bool = False) -> int | None:
    """A positive whole number (``length``: 8k = 8192), or None left as None; ``sequences``: a count of
    sequences (a batch), which the token counts' suffixes B and T do not write (``--batch 7B`` read as 7e9
    sequences was a model size typed in the wrong place)."""
    if sequences and isinstance(value, str) and value.strip()[-1:] in ("B", "T") and value.strip()[:-1]:
        n = parse_count(value, what)
        raise CostModelError(
            f"{what}: {value!r} would be {n:,} sequences; B and T write token counts (--tokens 300B), a batch "
            "counts sequences: expected a number such as 8, 512 or 1k"
        )
    return None if value is None else parse_count(value, what, length=length)


def check_rate(value: object, what: str) -> Fraction | None:
    """An exact positive number (int, Fraction or decimal text), or None left as None; a float is refused."""
    if value is None:
        return None
    if isinstance(value, float):
        raise CostModelError(
            f"{what}: expected an exact number (an int, a Fraction or a decimal string such as "
            f"'0.45'), received the float {value!r}"
        )
    if hasattr(value, "p") and hasattr(value, "q"):  # a sympy Rational, without importing sympy
        value = Fraction(int(value.p), int(value.q))
    return parse_rate(value, what)


def is_price_name(value: object) -> bool:
    """Whether a price per hour is a name (``"list"``, a price table entry) rather than a number."""
    return isinstance(value, str) and bool(re.fullmatch(r"[a-z][a-z0-9-]*", value))


def check_stack(stack: object, hardware: object, rates: list[str], time_model: str | None, inference: bool) -> None:
    """A software stack (``Options.stack``) names a factor of the calibrated training step: it needs a device,
    and no rate, roofline bound or inference estimate that would not use it. The name itself is checked against
    the device's stacks where the device is read (``costmodel.devices.table.with_stack``)."""
    if not isinstance(stack, str) or not stack.strip():
        raise CostModelError(f"stack: expected the name of a software stack, received {stack!r}")
    if hardware is None:
        raise CostModelError("a software stack is a device's sustained factor: give --hardware NAME too")
    other = (
        rates[0]
        if rates
        else "time_model='roofline'"
        if time_model == "roofline"
        else "inference"
        if inference
        else None
    )
    if other is not None:
        raise CostModelError(
            f"stack chooses the sustained factor of the calibrated training step; received {other} too, "
            "which does not use it (drop one)"
        )
