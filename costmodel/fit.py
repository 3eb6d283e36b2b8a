"""Does it fit? The largest micro-batch, sequence or context for a memory size, or what overflows.

Memory per device grows with the micro-batch (linearly) and with the sequence
or context (linearly with FlashAttention, quadratically with materialised
scores), so the largest whole number that fits is found by doubling then
bisection on the exact per-device numbers of :func:`costmodel.budget.device_memory`.
For the batch the closed form is also given: ``floor((M − states) / bytes per
sequence)`` with the bytes per sequence derived from the graph.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from .analysis import check_values
from .budget import device_memory
from .errors import CostModelError
from .memory import activations
from .models import Model, graph_symbols, load
from .passes import flash_attention
from .symbols import B, T

SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """Bytes from ``"80GB"`` (decimal), ``"80GiB"`` (binary), ``"8e10"`` or ``"141 GB"``.

    >>> parse_size("80GB"), parse_size("1.5GiB"), parse_size("8e10")
    (80000000000, 1610612736, 80000000000)
    """
    from .expr import parse_number

    raw = str(text).strip()
    i = len(raw)
    while i and raw[i - 1].isalpha():
        i -= 1
    number, unit = raw[:i].strip(), raw[i:].upper()
    if unit not in SIZE_UNITS or not number:
        raise CostModelError(f"memory size {text!r}: expected a number with an optional unit "
                             f"({', '.join(u for u in SIZE_UNITS if u)}), e.g. 80GB")
    value = parse_number(number, "memory size") * SIZE_UNITS[unit]
    if value <= 0:
        raise CostModelError(f"memory size {text!r}: expected a positive size")
    if not unit and value < 2**20:  # "80" is surely 80 GB, not 80 bytes: make the unit explicit
        raise CostModelError(f"memory size {text!r}: a bare number is bytes; expected a unit, e.g. {number}GB")
    return int(sympy.floor(value))


def _criterion(r: Mapping[str, object], by: str) -> int:
    if by == "peak" and r.get("memory_bytes.peak") is not None:
        return int(r["memory_bytes.peak"])
    return int(r["memory_bytes.total"])


def _largest(fits, limit: int = 2**31) -> int:
    """The largest n ≥ 1 with ``fits(n)`` (monotone), or 0 if none."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _overflow(r: Mapping[str, object], memory: int) -> str:
    """The first component (in order states → cache → activations) at which the running sum exceeds ``memory``."""
    running = 0
    for key in ("params", "grads", "optimizer", "kv_cache", "activations"):
        running += int(r.get(f"memory_bytes.{key}") or 0)
        if running > memory:
            return key
    return "peak transients" if _criterion(r, "peak") > memory else ""


def fit(model: Model | str, memory: int, *, solve: str = "batch", batch: int | None = None, seq: int | None = None,
        settings: Mapping[str, object] | None = None, by: str = "peak", **options: object) -> dict:
    """Largest micro-batch per device (``solve="batch"``) or sequence/context (``"seq"``) within ``memory`` bytes.

    ``by="peak"`` compares the liveness peak where it is modelled, else the
    sum ``memory_bytes.total``; ``by="total"`` always the sum. Options are
    those of :func:`costmodel.report.estimate` (policy, optimizer, recompute,
    flash, layout, inference, weights_dtype...).
    """
    if solve not in ("batch", "seq"):
        raise CostModelError(f"fit: solve must be 'batch' or 'seq', received {solve!r}")
    m = model if isinstance(model, Model) else load(model, settings)
    values = dict(m.values)
    layout = options.get("layout")
    dp = layout.dp if layout is not None else 1
    values[B] = batch or dp
    if seq is not None:
        values[T] = seq
    missing = sorted(str(x) for x in graph_symbols(m.graph) if x not in values)
    if missing:
        raise CostModelError(f"fit: model {m.name!r} needs a value for {', '.join(missing)}")
    inference = bool(options.get("inference"))

    def run(n: int) -> dict[str, object]:
        v, opts = dict(values), dict(options)
        if solve == "batch":
            v[B] = n * dp
            opts["micro_batch"] = n
        elif inference:
            opts["context"] = n
        else:
            v[T] = n
        check_values(m.graph, v)
        return device_memory(m.graph, v, opts)

    n = _largest(lambda k: _criterion(run(k), by) <= memory)
    out: dict[str, object] = {"model": m.name, "memory": memory, "solve": solve, "by": by, "largest": n}
    if n == 0:
        r = run(1)
        out["fits"] = False
        out["overflow"] = _overflow(r, memory)
        out["at_one"] = {k.removeprefix("memory_bytes."): v for k, v in r.items()
                         if k.startswith("memory_bytes.") and k.count(".") == 1}
        return out
    r = run(n)
    out["fits"] = True
    out["at_largest"] = {k.removeprefix("memory_bytes."): v for k, v in r.items()
                         if k.startswith("memory_bytes.") and k.count(".") == 1}
    out["overflow_next"] = _overflow(run(n + 1), memory) or "peak transients"
    if solve == "batch":
        out["global_batch"] = n * dp
        if not inference:
            graph = flash_attention(m.graph) if options.get("flash") else m.graph
            acts = activations(graph, str(options.get("recompute", "none"))).bytes
            per_seq, rest = sympy.expand(sympy.diff(acts, B)), sympy.expand(acts.subs(B, 0))
            out["formula"] = (f"sum convention, no layout: B_max = floor((M - states - ({rest})) / ({per_seq})) "
                              "(activation bytes per sequence; B-independent saved tensors)")
    return out
