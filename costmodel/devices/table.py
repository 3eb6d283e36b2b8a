"""Accelerators as data: dense peak FLOP/s, memory and interconnect, each with its source.

The built-in table is ``costmodel/devices/data/hardware.json``; users add devices from a
small TOML or JSON file of the same shape (``{"devices": {name: {...}}}``, or a
single device table with a ``name``). Numbers are integers or decimals
(``989.4e12``, read as their decimal text, never through a binary float) and
stay exact :class:`sympy.Rational`. Conventions: dense (not sparse) peaks; decimal bytes (1 TB/s = 1e12
B/s); interconnect bandwidth is per device and per direction.

>>> h100 = device("h100-sxm")
>>> h100.peak("bf16"), h100.memory_bandwidth
(989400000000000, 3350000000000)
>>> round(float(h100.ridge("bf16")), 1)  # FLOPs per byte where the roofs meet
295.3
"""

from __future__ import annotations

import dataclasses
import functools
import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import sympy

from ..errors import CostModelError, closest
from ..expr import parse_number
from ..files import read_capped
from .efficiency import GENERIC, Efficiency, parse_efficiency

#: A hardware file is a few hundred bytes a device: 1 MiB is far more than any real table.
MAX_FILE_BYTES = 2**20

#: The dtypes a device may list a peak for (fp6 and fp4: a peak only, no element size yet).
PEAK_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32", "fp6", "fp4")

# What a real device can be: wider than any chip made, narrower than nonsense.
_RANGES = {
    "peak_flops": (sympy.Integer(10) ** 9, sympy.Integer(10) ** 18),  # 1 GFLOP/s .. 1 EFLOP/s
    "memory_bytes": (sympy.Integer(10) ** 8, sympy.Integer(10) ** 14),  # 100 MB .. 100 TB
    "memory_bandwidth": (sympy.Integer(10) ** 9, sympy.Integer(10) ** 15),  # 1 GB/s .. 1 PB/s
    "scale_up_bandwidth": (sympy.Integer(10) ** 8, sympy.Integer(10) ** 14),
    "scale_out_bandwidth": (sympy.Integer(10) ** 8, sympy.Integer(10) ** 14),
}


@dataclass(frozen=True)
class Device:
    """One accelerator. Every number is an exact sympy Rational, in FLOP/s, bytes or bytes/s."""

    name: str
    about: str
    peak_flops: Mapping[str, sympy.Rational]
    memory_bytes: sympy.Rational
    memory_bandwidth: sympy.Rational
    scale_up_bandwidth: sympy.Rational | None = None
    scale_out_bandwidth: sympy.Rational | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    efficiency: Efficiency | None = field(default=None, compare=False)

    @property
    def attained(self) -> Efficiency:
        """The device's efficiency curves and network tiers (:data:`~costmodel.devices.efficiency.GENERIC`
        when its table entry has none)."""
        return self.efficiency if self.efficiency is not None else GENERIC

    def peak(self, dtype: str = "bf16") -> sympy.Rational:
        """Dense peak FLOP/s for ``dtype`` (``"bf16"``...); an error names the dtypes it has."""
        if dtype not in self.peak_flops:
            raise CostModelError(
                f"device {self.name!r} lists no {dtype} peak; it has "
                f"{', '.join(self.peak_flops)} (choose another dtype or device)"
            )
        return self.peak_flops[dtype]

    def default_dtype(self) -> str:
        """bf16 when the device has it, else fp16, else its first listed dtype."""
        for dt in ("bf16", "fp16"):
            if dt in self.peak_flops:
                return dt
        return next(iter(self.peak_flops))

    def ridge(self, dtype: str = "bf16") -> sympy.Rational:
        """The ridge point I* = peak FLOP/s ÷ memory bandwidth, in FLOPs per byte."""
        return self.peak(dtype) / self.memory_bandwidth

    def link(self, scope: str) -> sympy.Rational:
        """Bandwidth per direction of ``"scale_up"`` (NVLink, ICI) or ``"scale_out"`` (network)."""
        if scope not in ("scale_up", "scale_out"):
            raise CostModelError(f"link scope must be 'scale_up' or 'scale_out', received {scope!r}")
        bw = getattr(self, f"{scope}_bandwidth")
        if bw is None:
            raise CostModelError(
                f"device {self.name!r} has no {scope} bandwidth in its table entry; "
                f"expected a number under {scope}_bandwidth (add one with a hardware file)"
            )
        return bw


def _number(value: object, where: str, key: str) -> sympy.Rational:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise CostModelError(
            f'{where}: {key} must be an integer or a decimal string such as "989.4e12", '
            f"received {value!r} (a Python float is not exact)"
        )
    number = sympy.Integer(value) if isinstance(value, int) else parse_number(value, f"{where}: {key}")
    lo, hi = _RANGES[key.split(".")[0]]
    if not lo <= number <= hi:
        raise CostModelError(
            f"{where}: {key} = {value} is outside [{float(lo):.0e}, {float(hi):.0e}]; "
            f"expected FLOP/s, bytes or bytes/s in decimal units (1 TB/s = 1e12)"
        )
    return number


_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _printable(text: object, where: str, what: str) -> None:
    """A text a device prints (``hardware``, ``estimate``, ``roofline``, ``plan``) holds no terminal control
    code (an escape sequence retitling or clearing a terminal) and no bidirectional override."""
    text = str(text)
    bad = next((c for c in text if c in _BIDI or unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise CostModelError(
            f"{where}: {what} holds the control character {bad!r}; expected printable text, received {text!r}"
        )


def parse_device(name: str, entry: Mapping[str, object], where: str) -> Device:
    """Validate one table entry into a :class:`Device` (missing or absurd numbers are errors)."""
    where = f"{where}: device {name!r}"
    if not isinstance(entry, Mapping):
        raise CostModelError(f"{where}: expected a table of fields, received {type(entry).__name__}")
    known = {
        "name",
        "about",
        "peak_flops",
        "memory_bytes",
        "memory_bandwidth",
        "scale_up_bandwidth",
        "scale_out_bandwidth",
        "sources",
        "efficiency",
        "network",
    }
    for key in entry:
        if key not in known:
            raise CostModelError(f"{where}: unknown field {key!r}{closest(key, known)}; expected {sorted(known)}")
    _printable(name, where, "its name")
    _printable(entry.get("about", ""), where, "about")
    for key, text in (entry.get("sources") or {}).items() if isinstance(entry.get("sources"), Mapping) else ():
        _printable(text, where, f"sources.{key}")
    for key in ("peak_flops", "memory_bytes", "memory_bandwidth"):
        if entry.get(key) is None:
            raise CostModelError(
                f"{where}: missing {key}; expected peak_flops (dtype -> FLOP/s), "
                f"memory_bytes and memory_bandwidth (bytes/s)"
            )
    peaks = entry["peak_flops"]
    if not isinstance(peaks, Mapping) or not peaks:
        raise CostModelError(
            f"{where}: peak_flops must map dtypes ({', '.join(PEAK_DTYPES)}) to FLOP/s, received {peaks!r}"
        )
    for dt in peaks:
        if dt not in PEAK_DTYPES:
            raise CostModelError(
                f"{where}: peak_flops has unknown dtype {dt!r}{closest(dt, PEAK_DTYPES)}; "
                f"expected some of {', '.join(PEAK_DTYPES)}"
            )
    optional = {
        k: None if entry.get(k) is None else _number(entry[k], where, k)
        for k in ("scale_up_bandwidth", "scale_out_bandwidth")
    }
    sources = entry.get("sources", {})
    if not isinstance(sources, Mapping):
        raise CostModelError(f"{where}: sources must be a table of strings, received {sources!r}")
    return Device(
        name,
        str(entry.get("about", name)),
        {dt: _number(v, where, f"peak_flops.{dt}") for dt, v in peaks.items()},
        _number(entry["memory_bytes"], where, "memory_bytes"),
        _number(entry["memory_bandwidth"], where, "memory_bandwidth"),
        optional["scale_up_bandwidth"],
        optional["scale_out_bandwidth"],
        {str(k): str(v) for k, v in sources.items()},
        parse_efficiency(entry.get("efficiency"), entry.get("network"), where),
    )


def parse_table(data: object, where: str) -> dict[str, Device]:
    """Devices from a parsed file: ``{"devices": {name: entry}}`` or one entry with a ``name``."""
    if not isinstance(data, Mapping):
        raise CostModelError(f"{where}: expected a table, received {type(data).__name__}")
    if "devices" in data:
        entries = data["devices"]
        if not isinstance(entries, Mapping) or not entries:
            raise CostModelError(f"{where}: 'devices' must be a non-empty table of name -> device")
    elif "name" in data:
        entries = {str(data["name"]): data}
    else:
        raise CostModelError(
            f"{where}: expected a 'devices' table or a device with a 'name', received keys {sorted(data)}"
        )
    return {str(name): parse_device(str(name), entry, where) for name, entry in entries.items()}


def read_file(path: str | Path) -> dict[str, Device]:
    """Devices from a user's ``.toml`` or ``.json`` file (validated)."""
    p = Path(path)
    where = f"hardware file {str(path)!r}"
    if p.suffix not in (".toml", ".json"):
        raise CostModelError(f"{where}: expected a .toml or .json file, received {p.suffix or 'no suffix'!r}")
    try:  # a regular file only: no FIFO, device or huge file
        raw = read_capped(p, MAX_FILE_BYTES, "hardware file")
    except CostModelError as exc:
        why = str(exc).removeprefix(f"cannot read hardware file {str(path)!r}: ")
        raise CostModelError(f"{where}: cannot read it ({why})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CostModelError(f"{where} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        if p.suffix == ".json":
            data = json.loads(text, parse_float=str)  # 3.35e12 kept as its exact decimal text
        else:
            try:
                import tomllib  # hardware files in TOML are rare: the parser loads only then
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text, parse_float=str)
    except ValueError as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise CostModelError(f"{where}: not valid {p.suffix[1:].upper()}: {exc}") from None
    return parse_table(data, where)


@functools.lru_cache(maxsize=1)
def builtin() -> dict[str, Device]:
    """The built-in table, ``costmodel/devices/data/hardware.json``."""
    text = resources.files("costmodel").joinpath("devices/data/hardware.json").read_text(encoding="utf-8")
    return parse_table(json.loads(text), "costmodel/devices/data/hardware.json")


def devices(extra: str | Path | None = None) -> dict[str, Device]:
    """Built-in devices plus those of the file ``extra`` (which may override a built-in name)."""
    out = dict(builtin())
    if extra is not None:
        out.update(read_file(extra))
    return out


def _one_case(name: str, table) -> str:
    """``name`` as the table spells it when exactly one entry matches in another case (``H100-SXM``)."""
    if name in table:
        return name
    hits = [n for n in table if n.casefold() == name.casefold()]
    return hits[0] if len(hits) == 1 else name


def device(spec: str | Device) -> Device:
    """A device by name (``"h100-sxm"``), or the only/first device of a ``.toml``/``.json`` file.

    >>> device("h100")
    Traceback (most recent call last):
    ...
    costmodel.errors.CostModelError: unknown hardware 'h100' (did you mean 'h100-sxm' or 'h100-pcie'?); see 'costmodel hardware'
    """
    if isinstance(spec, Device):
        return spec
    if spec.endswith((".toml", ".json")):
        found = read_file(spec)
        return next(iter(found.values()))
    table = builtin()
    spec = _one_case(spec, table)
    if spec not in table:
        prefixed = sorted(n for n in table if n.startswith(spec.lower()))  # "h100" -> the H100 variants
        hint = closest(spec, prefixed) if prefixed else closest(spec, table)
        raise CostModelError(f"unknown hardware {spec!r}{hint}; see 'costmodel hardware'")
    return table[spec]


def with_stack(dev: Device, stack: str | None) -> Device:
    """``dev`` sustaining the rate of software ``stack`` (its ``efficiency.stacks`` entry); ``None``: ``dev`` as
    it is, with the device's default ``sustained``. An unknown name is an error naming the device's stacks.

    >>> float(with_stack(device("a100-80gb"), "megatron-deepspeed").attained.sustained) < 0.89
    True
    >>> with_stack(device("a100-80gb"), "deepspeed")
    Traceback (most recent call last):
    ...
    costmodel.errors.CostModelError: unknown stack 'deepspeed' for a100-80gb (did you mean 'megatron-deepspeed'?); its stacks: megatron-deepspeed, megatron-lm; omit --stack for its default sustained factor
    """
    if stack is None:
        return dev
    own = dev.attained.stacks
    if stack not in own:
        elsewhere = sorted({s for d in builtin().values() for s in d.attained.stacks} - set(own))
        hint = closest(stack, [*own, *elsewhere])
        has = f"its stacks: {', '.join(sorted(own))}" if own else "it has no stack factors"
        more = f" (other devices have {', '.join(elsewhere)})" if elsewhere else ""
        raise CostModelError(
            f"unknown stack {stack!r} for {dev.name}{hint}; {has}{more}; omit --stack for its default sustained factor"
        )
    eff = dataclasses.replace(dev.attained, sustained=own[stack].sustained)
    return dataclasses.replace(dev, efficiency=eff)


def hardware(name: str | None = None, *, file: str | Path | None = None) -> Device | dict[str, Device]:
    """The device table (name → :class:`Device`), or one device by name or from a ``.toml``/``.json`` file.

    ``file`` adds a user's devices to the built-in table (they may override a built-in name).

    >>> hardware("h100-sxm").peak("bf16")
    989400000000000
    """
    table = devices(file)
    if name is None:
        return table
    if name.endswith((".toml", ".json")):
        return device(name)
    name = _one_case(name, table)
    if name not in table:
        prefixed = sorted(n for n in table if n.startswith(name.lower()))
        hint = closest(name, prefixed) if prefixed else closest(name, table)
        raise CostModelError(f"unknown hardware {name!r}{hint}; see 'costmodel hardware'")
    return table[name]
