"""What each key of an estimate is called in words, and in which unit it is shown.

Documents label rows with these names and keep the key beside them; every door shows a number in the same
unit (:func:`show`, with :mod:`costmodel.units`; the live page's ``units.js`` reads the same unit names).

>>> label("flops.training_total"), show("time.training_s", 807_897_600.0)
('training FLOPs of the whole run', '25.6 years')
"""

from __future__ import annotations

from .. import units

LABELS = {
    "params.total": "parameters",
    "params.embedding": "embedding parameters",
    "params.non_embedding": "non-embedding parameters",
    "params.active": "parameters a token uses (active)",
    "params.active_non_embedding": "active non-embedding parameters (the N of 6ND)",
    "flops.forward": "forward FLOPs of a step",
    "flops.backward": "backward FLOPs of a step",
    "flops.training": "training FLOPs of a step",
    "flops.training_total": "training FLOPs of the whole run",
    "flops.six_nd": "6ND (the back-of-envelope count)",
    "flops.six_nd_share": "6ND as a share of the training FLOPs",
    "flops.matmul.forward": "matmul FLOPs, forward",
    "flops.matmul.backward": "matmul FLOPs, backward",
    "flops.matmul.training": "matmul FLOPs, training step",
    "flops.matmul.training_total": "matmul FLOPs, whole run",
    "flops.recompute": "FLOPs spent again by recompute",
    "bytes.forward": "bytes moved, forward",
    "bytes.backward": "bytes moved, backward",
    "tokens.per_step": "tokens per step",
    "tokens.total": "tokens of the run (D)",
    "memory_bytes.params": "weights",
    "memory_bytes.grads": "gradients",
    "memory_bytes.optimizer": "optimizer states",
    "memory_bytes.activations": "activations",
    "memory_bytes.kv_cache": "KV cache",
    "memory_bytes.state_cache": "recurrent state cache",
    "memory_bytes.total": "total (sum of the parts)",
    "memory_bytes.peak": "peak (liveness)",
    "memory.parameters_trainable": "trainable parameters on a device",
    "memory.parameters_frozen": "frozen parameters on a device",
    "memory.layout.micro_batch": "micro-batch (sequences a device runs at once)",
    "memory.layout.micro_batches": "micro-batches per step",
    "memory.capacity_bytes": "device memory",
    "communication_bytes.total": "sent per device per step",
    "time.peak_flops": "peak FLOP/s of a device",
    "time.model_flops_per_s": "model FLOP/s per device",
    "time.hardware_flops_per_s": "hardware FLOP/s per device",
    "time.achieved_flops": "achieved FLOP/s per device (given)",
    "time.roofline_step_s": "roofline bound of a step",
    "time.compute_s": "compute time of a step",
    "time.comm_s": "communication time of a step",
    "time.step_s": "step time",
    "time.tokens_per_s": "throughput (tokens/s, all devices)",
    "time.training_s": "training time",
    "time.training_days": "training time in days",
    "time.gpu_hours": "device-hours",
    "time.six_nd_training_s": "training time by 6ND",
    "time.pipeline_bubble": "pipeline bubble (idle share)",
    "time.ttft_s": "time to first token (prefill)",
    "time.decode_step_s": "decode step",
    "time.decode_tokens_per_s": "decode throughput (tokens/s)",
    "time.context": "context (tokens)",
    "time.cost_usd": "cost (USD)",
    "mfu": "MFU (model FLOPs utilisation)",
    "hfu": "HFU (hardware FLOPs utilisation)",
}

PREFIXES = {
    "memory_bytes.parts.": "state part: ",
    "memory_bytes.activations_by_role.": "activations kept as ",
    "communication_bytes.": "sent per device per step: ",
    "time.comm_by_kind.": "communication time: ",
    "time.breakdown.": "time: ",
}


def label(key: str) -> str:
    """The words for ``key`` (a key this table does not know: its last parts, spaced)."""
    if key in LABELS:
        return LABELS[key]
    for prefix, words in PREFIXES.items():
        if key.startswith(prefix):
            return words + key.removeprefix(prefix).removesuffix("_s").replace("_", " ")  # the unit says seconds
    if unit(key) == "seconds":  # a time this table does not name: its words, then the unit ("x (s)", not "x s")
        return key.removesuffix("_s").replace(".", " ").replace("_", " ") + " (s)"
    return key.replace(".", " ").replace("_", " ")


def unit(key: str) -> str:
    """How ``key``'s number is shown: ``count``, ``flops``, ``bytes``, ``seconds``, ``share``, ``rate``,
    ``days``, ``hours``, ``usd`` or ``plain``."""
    if key in ("flops.six_nd_share", "mfu", "hfu", "time.pipeline_bubble"):
        return "share"
    if key.startswith(("memory_bytes.", "communication_bytes.", "bytes.")) or key == "memory.capacity_bytes":
        return "bytes"
    if key.startswith("flops.") or key.endswith("flops_per_s") or key in ("time.peak_flops", "time.achieved_flops"):
        return "flops"
    if key.endswith("_per_s"):  # a rate, before the "time.…_s" rule below reads it as a duration
        return "rate"
    if key.startswith("time.") and key.endswith("_s"):
        return "seconds"
    return {"time.training_days": "days", "time.gpu_hours": "hours", "time.cost_usd": "usd"}.get(
        key, "count" if key.startswith(("params.", "tokens.", "memory.", "time.context")) else "plain"
    )


def show(key: str, value: object) -> str:
    """``value`` of ``key`` in its unit (:func:`unit`)."""
    return shown(unit(key), value)


def shown(as_: str, value: object) -> str:
    """``value`` shown as ``as_`` (the rules of ``units.js``'s twin, ``show`` in ``page.js``)."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if as_ == "count":
        return units.grouped(value) if isinstance(value, int) else units.sig(value, 4)
    if as_ == "flops":
        return units.sci(value)
    if as_ == "bytes":
        return units.nbytes(value)
    if as_ == "seconds":
        return units.duration(value)
    if as_ == "share":
        return units.percent(value)
    if as_ == "rate":
        return units.rate(value)
    if as_ == "days":
        return units.amount(value) + " days"
    if as_ == "hours":
        return units.amount(value) + " h"
    if as_ == "usd":
        return "$" + units.amount(value)
    return units.grouped(value) if isinstance(value, int) else units.sig(value, 4)
