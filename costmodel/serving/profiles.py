"""Engine profiles as data: what a serving engine's scheduler obeys and how it allocates memory.

The built-in profiles (``vllm-v1``, ``sglang``, ``trtllm``) are ``costmodel/serving/data/engines.json``, each
field with its source. A user overrides any field (``--engine-set max_num_seqs=512``) or adds profiles from a file
of the same shape (``--engine-file FILE``). A profile names the engine ``version`` its defaults describe and the
versions its overheads were fitted to (``calibrated_for``); predicting for any other version is allowed and says so
(``serving.calibrated_for`` in a result).

>>> p = profile("vllm-v1")
>>> p.max_num_seqs, p.max_num_batched_tokens, p.block_size
(256, 8192, 16)
>>> profile("vllm-v1", {"max_num_seqs": "512"}).max_num_seqs
512
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from importlib import resources
from pathlib import Path

from ..errors import CostModelError, closest
from ..files import read_capped
from .batch import Limits

WHERE = "costmodel/serving/data/engines.json"

_INT = ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_partial_prefills", "runtime_reserve_bytes")
_BOOL = ("chunked_prefill", "decode_first", "mixed_batches", "prefix_caching")
_SECONDS = (
    "step_overhead_s",
    "layer_overhead_s",
    "graph_kernel_overhead_s",
    "allreduce_latency_s",
    "request_overhead_s",
)
#: Factors of the step and the analytic closed loop fitted to measured runs (optional in a profile file; the
#: defaults leave the derived step as it is): each kernel's compute, memory and collective time multiplied, and the
#: share of the other users' prompts a new request of a closed loop waits behind (:mod:`costmodel.serving.analytic`).
_FACTORS = {
    "compute_time_scale": Fraction(1),
    "memory_time_scale": Fraction(1),
    "communication_time_scale": Fraction(1),
    "prefill_queue_share": Fraction(0),
}
PREEMPTION = ("recompute",)
#: What ``gpu_memory_utilization`` is a share of: the whole device (vLLM, SGLang: weights, activations and the KV
#: cache all inside it) or the memory still free after the weights, activations and reserve (TensorRT-LLM's
#: ``free_gpu_memory_fraction``).
SHARE_OF = ("device", "free")


@dataclass(frozen=True)
class Profile:
    """One engine's scheduler limits, memory rules and fixed overheads (seconds), each with its source."""

    name: str
    version: str
    about: str
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    gpu_memory_utilization: Fraction
    chunked_prefill: bool
    max_partial_prefills: int
    decode_first: bool
    preemption: str
    prefix_caching: bool
    cuda_graph_sizes: tuple[int, ...]
    runtime_reserve_bytes: int
    step_overhead_s: Fraction
    layer_overhead_s: Fraction
    graph_kernel_overhead_s: Fraction
    allreduce_latency_s: Fraction
    request_overhead_s: Fraction
    compute_time_scale: Fraction = Fraction(1)
    memory_time_scale: Fraction = Fraction(1)
    communication_time_scale: Fraction = Fraction(1)
    prefill_queue_share: Fraction = Fraction(0)
    #: whether a step holds prompts and decodes together (vLLM v1, TensorRT-LLM); False: a step that computes a
    #: prompt computes prompts only, run before the decodes (SGLang without ``--enable-mixed-chunk``)
    mixed_batches: bool = True
    #: what ``gpu_memory_utilization`` is a share of (:data:`SHARE_OF`)
    memory_share_of: str = "device"
    #: the per-request overhead fitted to each engine version (``"unstated"``: runs whose source names none); a
    #: version not listed pays ``request_overhead_s``, the documented default (the API server and streaming front
    #: end differ between versions and deployments, so a fitted value is only claimed for what it was fitted to)
    request_overhead_by_version: Mapping[str, Fraction] = field(default_factory=dict)
    calibrated_for: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    overridden: tuple[str, ...] = ()

    def limits(self, num_blocks: int) -> Limits:
        """The scheduler's :class:`~costmodel.serving.batch.Limits` with ``num_blocks`` KV blocks; CUDA-graph
        sizes beyond ``max_num_seqs`` are never captured."""
        return Limits(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            block_size=self.block_size,
            num_blocks=num_blocks,
            chunked_prefill=self.chunked_prefill,
            max_partial_prefills=self.max_partial_prefills,
            decode_first=self.decode_first,
            mixed_batches=self.mixed_batches,
            prefix_caching=self.prefix_caching,
            cuda_graph_sizes=tuple(s for s in self.cuda_graph_sizes if s <= self.max_num_seqs),
            request_overhead_s=float(self.request_overhead_for(self.version)),
        )

    def request_overhead_for(self, version: str) -> Fraction:
        """The per-request overhead of engine ``version`` (``""`` reads as ``"unstated"``): its fitted value, or
        the profile's default where none was fitted.

        >>> p = dataclasses.replace(profile("vllm-v1"), request_overhead_by_version={"9.9": Fraction(1, 10)})
        >>> p.request_overhead_for("9.9"), p.request_overhead_for("0.0") == p.request_overhead_s
        (Fraction(1, 10), True)
        """
        return self.request_overhead_by_version.get(version or "unstated", self.request_overhead_s)

    def calibration(self) -> str:
        """What ``serving.calibrated_for`` says: the fitted versions, or that this version has none."""
        if self.version in self.calibrated_for:
            return f"{self.name} {self.version} (overheads fitted to it)"
        if not self.calibrated_for:
            return (
                f"uncalibrated: {self.name} {self.version} (overheads are documented defaults; fitted versions: none)"
            )
        fitted = ", ".join(self.calibrated_for)
        return f"uncalibrated: {self.name} {self.version} (overheads and factors fitted to other versions: {fitted})"


def _value(name: str, key: str, raw: object, where: str) -> object:
    """One field read strictly: whole numbers, booleans, fractions of a second, a list of sizes."""
    what = f"{where}: engine {name!r} field {key!r}"
    if key in _INT:
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < (0 if key == "runtime_reserve_bytes" else 1):
            raise CostModelError(f"{what}: expected a whole number >= 1, received {raw!r}")
        return raw
    if key in _BOOL:
        if isinstance(raw, str) and raw.lower() in ("true", "false", "on", "off", "1", "0"):
            raw = raw.lower() in ("true", "on", "1")
        if not isinstance(raw, bool):
            raise CostModelError(f"{what}: expected true or false, received {raw!r}")
        return raw
    if key in (*_SECONDS, *_FACTORS, "gpu_memory_utilization"):
        try:
            value = Fraction(str(raw)) if not isinstance(raw, bool) else None
        except (ValueError, ZeroDivisionError):
            value = None
        share = key in ("gpu_memory_utilization", "prefill_queue_share")
        if (
            value is None
            or value < 0
            or (key == "gpu_memory_utilization" and not 0 < value <= 1)
            or (key == "prefill_queue_share" and value > 1)
            or (key.endswith("_scale") and value == 0)
        ):
            bound = (
                "a share in (0, 1]"
                if key == "gpu_memory_utilization"
                else "a share in [0, 1]"
                if share
                else "a factor > 0"
                if key.endswith("_scale")
                else "seconds >= 0"
            )
            raise CostModelError(f"{what}: expected {bound}, received {raw!r}")
        return value
    if key == "request_overhead_by_version":
        if not isinstance(raw, dict):
            raise CostModelError(f"{what}: expected an object of version: seconds >= 0, received {raw!r}")
        return {str(k): _value(name, "request_overhead_s", v, where) for k, v in raw.items()}
    if key == "cuda_graph_sizes":
        items = raw.split(":") if isinstance(raw, str) else raw
        try:
            sizes = tuple(int(x) for x in items) if raw not in ("", None) else ()
        except (TypeError, ValueError):
            sizes = None
        if sizes is None or any(s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
            raise CostModelError(f"{what}: expected increasing batch sizes >= 1 (a list, or 1:2:4:8), received {raw!r}")
        return sizes
    if key == "memory_share_of":
        if raw not in SHARE_OF:
            raise CostModelError(f"{what}: expected one of {', '.join(SHARE_OF)}, received {raw!r}")
        return raw
    if key == "preemption":
        if raw not in PREEMPTION:
            raise CostModelError(f"{what}: expected one of {', '.join(PREEMPTION)}, received {raw!r}")
        return raw
    if key == "calibrated_for":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise CostModelError(f"{what}: expected a list of versions, received {raw!r}")
        return tuple(raw)
    if key == "sources":
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise CostModelError(f"{what}: expected an object of source strings, received {raw!r}")
        return dict(raw)
    if key in ("version", "about"):
        if not isinstance(raw, str) or not raw:
            raise CostModelError(f"{what}: expected a string, received {raw!r}")
        return raw
    fields = [f.name for f in dataclasses.fields(Profile) if f.name not in ("name", "overridden")]
    raise CostModelError(f"{what}: no such field{closest(key, fields)}; fields: {', '.join(fields)}")


def parse_profiles(data: object, where: str) -> dict[str, Profile]:
    """Profiles from a parsed engines file (``{"engines": {name: {field: value}}}``), every field required."""
    engines = data.get("engines") if isinstance(data, dict) else None
    if not isinstance(engines, dict) or not engines:
        raise CostModelError(f'{where}: expected {{"engines": {{NAME: {{...}}}}}} with at least one engine')
    required = [f.name for f in dataclasses.fields(Profile) if f.name not in ("name", "overridden")]
    out = {}
    for name, entry in engines.items():
        if not isinstance(entry, dict):
            raise CostModelError(f"{where}: engine {name!r} must be an object of fields")
        missing = [
            k
            for k in required
            if k not in entry
            and k
            not in (
                "calibrated_for",
                "sources",
                "request_overhead_by_version",
                "mixed_batches",
                "memory_share_of",
                *_FACTORS,
            )
        ]
        if missing:
            raise CostModelError(f"{where}: engine {name!r} has no {', '.join(missing)}")
        out[name] = Profile(name=name, **{k: _value(name, k, v, where) for k, v in entry.items()})
    return out


@functools.lru_cache(maxsize=1)
def builtin() -> dict[str, Profile]:
    """The built-in profiles, by engine name."""
    text = resources.files("costmodel").joinpath("serving/data/engines.json").read_text(encoding="utf-8")
    return parse_profiles(json.loads(text), WHERE)


def read_file(path: str | Path) -> dict[str, Profile]:
    """Profiles from a user's JSON file of the built-in file's shape."""
    raw = read_capped(path, 1 << 20, "engine profile file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CostModelError(f"engine profile file {str(path)!r}: not valid JSON ({e})") from None
    return parse_profiles(data, str(path))


def profile(name: str, overrides: Mapping[str, object] | None = None, *, file: str | Path | None = None) -> Profile:
    """The profile ``name`` (built-in or from ``file``) with ``overrides`` (field → value or its text)."""
    table = {**builtin(), **(read_file(file) if file else {})}
    if name not in table:
        raise CostModelError(f"unknown serving engine {name!r}{closest(name, table)}; engines: {', '.join(table)}")
    p = table[name]
    if not overrides:
        return p
    changes = {k: _value(name, k, v, "--engine-set") for k, v in overrides.items()}
    if "request_overhead_s" in changes and "request_overhead_by_version" not in changes:
        changes["request_overhead_by_version"] = {}  # the user's overhead is every version's
    return dataclasses.replace(p, **changes, overridden=tuple(sorted({*p.overridden, *changes})))


def engines() -> list[str]:
    """Names of the built-in engines."""
    return list(builtin())
