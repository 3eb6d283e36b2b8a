"""Measured serving runs from public sources: :func:`runs` reads ``costmodel/serving/data/measured_serving.json``.

The file holds, per source, the source's address (repository, commit, file, URL) and what experiment it ran, and
rows of one run each, in the order of ``columns``: the CSV line the row came from, the setting (model preset, device,
engine, engine version, weight format, tensor parallelism, prompt and output tokens, closed-loop concurrency) and
the measured means, TTFT and TPOT in milliseconds. Every row is checked when read (a model, device or engine costmodel
does not know, a length < 1, a time <= 0, a column missing or of the wrong type): one :class:`CostModelError` names
the source, the line and the field.

>>> rs = runs()
>>> len(rs) > 0, rs[0].source, rs[0].ttft_s > 0
(True, 'aic', True)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..devices.table import devices
from ..errors import CostModelError
from ..families import presets
from ..files import read_capped
from ..options.policies import WEIGHT_FORMATS
from .profiles import engines

WHERE = "costmodel/serving/data/measured_serving.json"
COLUMNS = (
    "line",
    "model",
    "hardware",
    "engine",
    "engine_version",
    "weights_dtype",
    "tp",
    "input_tokens",
    "output_tokens",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
)
_WHOLE = ("line", "tp", "input_tokens", "output_tokens", "concurrency")
_TIMES = ("ttft_ms", "tpot_ms")
_TEXT = ("model", "hardware", "engine", "weights_dtype")
SOURCE_FIELDS = ("url", "repo", "commit", "file", "experiment")


@dataclass(frozen=True)
class Run:
    """One measured serving run: its setting, its measured means (seconds) and where it came from."""

    source: str
    line: int
    model: str
    hardware: str
    engine: str
    engine_version: str
    weights_dtype: str
    tp: int
    input_tokens: int
    output_tokens: int
    concurrency: int
    ttft_s: float
    tpot_s: float

    @property
    def e2e_s(self) -> float:
        """The mean end-to-end latency the source's means imply: TTFT + (O − 1)·TPOT (aiperf's TPOT is
        (E2E − TTFT)/(O − 1) per request, so the means add exactly)."""
        return self.ttft_s + (self.output_tokens - 1) * self.tpot_s

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens/s of the replica in a closed loop of ``concurrency`` users (Little's law: C·O / E2E)."""
        return self.concurrency * self.output_tokens / self.e2e_s

    @property
    def setting(self) -> tuple:
        """What a prediction depends on besides the load: model, device, engine, weights and tp."""
        return (self.model, self.hardware, self.engine, self.weights_dtype, self.tp)


def _check_row(source: str, raw: object, known: Mapping[str, frozenset[str]], where: str) -> Run:
    if not isinstance(raw, list) or len(raw) != len(COLUMNS):
        raise CostModelError(
            f"{where}: source {source!r}: a row must be a list of {len(COLUMNS)} values ({', '.join(COLUMNS)}), "
            f"received {raw!r}"
        )
    row = dict(zip(COLUMNS, raw))
    at = f"{where}: source {source!r} line {row['line']!r}"
    for name in _WHOLE:
        v = row[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CostModelError(f"{at}: {name} must be a whole number >= 1, received {v!r}")
    for name in _TIMES:
        v = row[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
            raise CostModelError(f"{at}: {name} must be milliseconds > 0, received {v!r}")
    if not isinstance(row["engine_version"], str):
        raise CostModelError(f"{at}: engine_version must be a string, received {row['engine_version']!r}")
    for name in _TEXT:
        v = row[name]
        if not isinstance(v, str) or (name in known and v not in known[name]):
            choices = ", ".join(sorted(known.get(name, ())))
            raise CostModelError(f"{at}: unknown {name} {v!r}" + (f"; expected one of {choices}" if choices else ""))
    if row["output_tokens"] < 2:
        raise CostModelError(f"{at}: output_tokens must be >= 2 for a TPOT, received {row['output_tokens']}")
    return Run(
        source=source,
        **{k: row[k] for k in COLUMNS if k not in _TIMES},
        ttft_s=row["ttft_ms"] / 1e3,
        tpot_s=row["tpot_ms"] / 1e3,
    )


def _known() -> dict[str, frozenset[str]]:
    """The names a row may use: costmodel's presets, devices, engines and weight formats."""
    return {
        "model": frozenset(presets()),
        "hardware": frozenset(devices()),
        "engine": frozenset(engines()),
        "weights_dtype": frozenset(WEIGHT_FORMATS),
    }


def parse(data: object, where: str = WHERE, known: Mapping[str, frozenset[str]] | None = None) -> tuple[Run, ...]:
    """The runs of a parsed measured-serving file (``{"sources": {...}, "columns": [...], "rows": {source: [...]}}``),
    every row checked (see the module notes)."""
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("sources"), dict)
        or not isinstance(data.get("rows"), dict)
    ):
        raise CostModelError(f'{where}: expected {{"sources": {{...}}, "columns": [...], "rows": {{SOURCE: [...]}}}}')
    if data.get("columns") != list(COLUMNS):
        raise CostModelError(f"{where}: columns must be {list(COLUMNS)}, received {data.get('columns')!r}")
    for name, src in data["sources"].items():
        if not isinstance(src, dict) or any(not isinstance(src.get(k), str) or not src[k] for k in SOURCE_FIELDS):
            raise CostModelError(f"{where}: source {name!r} must give {', '.join(SOURCE_FIELDS)} as strings")
    known = _known() if known is None else known
    out = []
    for source, rows in data["rows"].items():
        if source not in data["sources"]:
            raise CostModelError(f"{where}: rows of {source!r}, which is not among the sources {list(data['sources'])}")
        if not isinstance(rows, list):
            raise CostModelError(f"{where}: rows of {source!r} must be a list")
        out.extend(_check_row(source, raw, known, where) for raw in rows)
    seen: set[tuple[str, int]] = set()
    for r in out:
        if (r.source, r.line) in seen:
            raise CostModelError(f"{where}: source {r.source!r} line {r.line} appears twice")
        seen.add((r.source, r.line))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[dict, tuple[Run, ...]]:
    text = resources.files("costmodel").joinpath("serving/data/measured_serving.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return data, parse(data)


def runs(path: str | Path | None = None) -> tuple[Run, ...]:
    """The measured runs: the built-in file's, or those of ``path`` (a file of the same shape)."""
    if path is None:
        return _builtin()[1]
    raw = read_capped(path, 16 << 20, "measured serving file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CostModelError(f"measured serving file {str(path)!r}: not valid JSON ({e})") from None
    return parse(data, str(path))


def sources(path: str | Path | None = None) -> dict[str, dict[str, str]]:
    """Each source's address and experiment, by name (the built-in file's, or ``path``'s)."""
    if path is None:
        return dict(_builtin()[0]["sources"])
    return dict(json.loads(read_capped(path, 16 << 20, "measured serving file").decode("utf-8"))["sources"])
