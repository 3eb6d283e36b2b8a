"""Hugging Face ``config.json`` files: read safely, hand to the family that knows the ``model_type``.

No network, no code from the file: the JSON is parsed strictly (no NaN or
Infinity, a size limit) and each family's ``from_hf`` maps the fields it needs
to costmodel settings, raising a clear error for a missing or ill-typed field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from ..errors import CostModelError, closest

MAX_CONFIG_BYTES = 4 * 2**20
MAX_SIZE = 10**15  # no real size is near this; larger values are corrupt files


def _reject_constant(name: str) -> object:
    raise CostModelError(f"config.json: {name} is not a valid number (expected finite numbers)")


def read_json(path: str) -> dict:
    """Parse a JSON object from ``path`` strictly."""
    try:
        size = os.path.getsize(path)
        if size > MAX_CONFIG_BYTES:
            raise CostModelError(f"config {path!r} is {size:,} bytes; expected a config.json under "
                                 f"{MAX_CONFIG_BYTES:,}")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CostModelError(f"cannot read config {path!r}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CostModelError(f"config {path!r} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise CostModelError(f"config {path!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise CostModelError(f"config {path!r} is nested too deeply") from None
    if not isinstance(data, dict):
        raise CostModelError(f"config {path!r}: expected a JSON object, received {type(data).__name__}")
    return data


def field(cfg: Mapping[str, object], name: str, kind: type = int, default: object = ..., where: str = "config.json",
          minimum: int = 1):
    """A typed field of a config; an int ≥ ``minimum`` (1) unless ``kind`` says otherwise.

    ``default=...`` means required. ``None`` in the file counts as absent.
    """
    value = cfg.get(name)
    if value is None:
        if default is ...:
            raise CostModelError(f"{where}: missing field {name!r} (expected {kind.__name__})")
        return default
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CostModelError(f"{where}: field {name!r} must be a whole number, received {value!r}")
        if value < minimum:
            expected = "positive" if minimum == 1 else f"at least {minimum}"
            raise CostModelError(f"{where}: field {name!r} must be {expected}, received {value}")
        if value > MAX_SIZE:
            raise CostModelError(f"{where}: field {name!r} = {value} is out of range; expected at most {MAX_SIZE:.0e}")
    elif kind is bool:
        if not isinstance(value, bool):
            raise CostModelError(f"{where}: field {name!r} must be true or false, received {value!r}")
    elif not isinstance(value, kind):
        raise CostModelError(f"{where}: field {name!r} must be {kind.__name__}, received {value!r}")
    return value


#: Hugging Face model types without a family of their own whose layers are those of a supported type, read
#: from the same config fields: parameters and matmul FLOPs equal (``tests/arch/test_hf.py`` checks each against
#: transformers). Each: the supported type, and what differs that no count here sees.
SAME_STRUCTURE: dict[str, tuple[str, str]] = {
    "smollm3": ("llama", "SmolLM3 leaves rotary embeddings out of some layers"),
    "ministral": ("mistral", "Ministral names which layers use the sliding window in layer_types"),
}


def read_config(path: str, families: Mapping[str, object]) -> tuple[object, dict[str, object]]:
    """(family, settings) for a Hugging Face config.json."""
    data = read_json(path)
    model_type = data.get("model_type")
    supported = {t: fam for fam in families.values() for t in getattr(fam, "hf_model_types", ())}
    if not isinstance(model_type, str):
        raise CostModelError(f"config {path!r}: missing 'model_type'; supported: {', '.join(sorted(supported))}")
    if model_type not in supported:
        same = SAME_STRUCTURE.get(model_type)
        hint = (f"; it has the structure of {same[0]!r} ({same[1]}): a copy of the config with "
                f"\"model_type\": \"{same[0]}\" counts it exactly" if same and same[0] in supported
                else closest(model_type, supported))
        raise CostModelError(f"config {path!r}: unsupported model_type {model_type!r}{hint}; "
                             f"supported: {', '.join(sorted(supported))}")
    fam = supported[model_type]
    return fam, fam.from_hf(data)
