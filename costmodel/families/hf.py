"""Hugging Face ``config.json`` files: read safely, hand to the family that knows the ``model_type``.

No network, no code from the file: the JSON is parsed strictly (no NaN or
Infinity, a size limit) and each family's ``from_hf`` maps the fields it needs
to costmodel settings, raising a clear error for a missing or ill-typed field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import CostModelError, closest
from ..files import read_capped

MAX_CONFIG_BYTES = 4 * 2**20
MAX_SIZE = 10**15  # no real size is near this; larger values are corrupt files
MAX_DIGITS = 30  # digits of any integer in a config (sizes.MAX_DIGITS): a 5,000-digit one is refused in one line
#: Layers of a config (``num_hidden_layers``, ``n_layer``...) and entries of any list (``layer_types``,
#: ``mlp_only_layers``): families read per-layer patterns as Python lists, so L = 10^9 would take gigabytes.
#: The deepest published models have a few hundred layers.
MAX_LAYERS = 100_000


def _reject_constant(name: str) -> object:
    raise CostModelError(f"config.json: {name} is not a valid number (expected finite numbers)")


def _digits_capped(text: str) -> int:
    """A JSON integer, refused past :data:`MAX_DIGITS` digits (Python would refuse 4,300 with a ValueError)."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise CostModelError(
            f"config.json: an integer of {len(text.lstrip('-')):,} digits is out of range; "
            f"expected at most {MAX_DIGITS} digits (no real size is near 10^{MAX_DIGITS})"
        )
    return int(text)


def _float_capped(text: str) -> float:
    if len(text) > 64:
        raise CostModelError(f"config.json: a number of {len(text):,} characters; expected at most 64")
    return float(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are distinct: a repeated key is refused rather than the last one kept."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise CostModelError(f"config.json: key {key!r} appears twice in one object; expected each key once")
        out[key] = value
    return out


def read_json(path: str) -> dict:
    """Parse a JSON object from ``path`` strictly: a regular file under the byte cap, no NaN or Infinity,
    no integer of more than :data:`MAX_DIGITS` digits, no repeated key."""
    raw = read_capped(path, MAX_CONFIG_BYTES, "config.json")
    try:
        data = json.loads(
            raw.decode("utf-8"),
            parse_constant=_reject_constant,
            parse_int=_digits_capped,
            parse_float=_float_capped,
            object_pairs_hook=_unique_keys,
        )
    except UnicodeDecodeError as exc:
        raise CostModelError(f"config {path!r} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise CostModelError(
            f"config {path!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise CostModelError(f"config {path!r} is nested too deeply") from None
    if not isinstance(data, dict):
        raise CostModelError(f"config {path!r}: expected a JSON object, received {type(data).__name__}")
    return data


def field(
    cfg: Mapping[str, object],
    name: str,
    kind: type = int,
    default: object = ...,
    where: str = "config.json",
    minimum: int = 1,
):
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
#: transformers). Each: the supported type that reads it, and what differs that no count here sees (the note).
SAME_STRUCTURE: dict[str, tuple[str, str]] = {
    "smollm3": (
        "llama",
        "SmolLM3 leaves rotary embeddings out of every 4th layer (no_rope_layers): those layers' RoPE "
        "element-wise ops are counted, a few FLOPs over; parameters and matmul FLOPs are exact",
    ),
    "ministral": ("mistral", "Ministral names which layers use the sliding window in layer_types"),
}


def check_bounds(data: Mapping[str, object], where: str) -> None:
    """No layer count over :data:`MAX_LAYERS` and no list longer, in ``data`` or the configs it nests
    (``text_config``): refused before a family builds anything per layer, in a line that quotes no list."""
    todo = [data]
    while todo:
        cfg = todo.pop()
        for key, value in cfg.items():
            if isinstance(value, Mapping):
                todo.append(value)
            elif isinstance(value, list) and len(value) > MAX_LAYERS:
                raise CostModelError(
                    f"{where}: field {key!r} lists {len(value):,} entries; expected at most {MAX_LAYERS:,} (per layer)"
                )
            elif (
                isinstance(value, int)
                and not isinstance(value, bool)
                and str(key).endswith(("layers", "layer"))
                and value > MAX_LAYERS
            ):
                raise CostModelError(
                    f"{where}: field {key!r} = {value} is out of range; expected at most {MAX_LAYERS:,} layers"
                )


@dataclass(frozen=True)
class Read:
    """A ``config.json`` read: the family that builds it, its settings, what the reading did (``notes``) and how
    the checkpoint stores its weights (``checkpoint``, from ``quantization_config``; None: the graph's dtype)."""

    family: object
    settings: dict[str, object]
    notes: tuple[str, ...] = ()
    checkpoint: object = None
    model_type: str = ""


def read_config(path: str, families: Mapping[str, object]) -> Read:
    """The :class:`Read` of a Hugging Face config.json, read as transformers reads it (:mod:`.hf_reading`)."""
    from .hf_reading import read  # deferred: the recorded table loads only for a config.json
    from .quantized import checkpoint  # deferred: as above

    data = read_json(path)
    where = f"config {path!r}"
    check_bounds(data, where)
    supported = {t: fam for fam in families.values() for t in getattr(fam, "hf_model_types", ())}
    if not isinstance(data.get("model_type"), str):
        raise CostModelError(f"{where}: missing 'model_type'; supported: {', '.join(sorted(supported))}")
    data, notes = read(data, supported, where)
    model_type = data["model_type"]
    same = SAME_STRUCTURE.get(model_type)
    if model_type not in supported and same and same[0] in supported:
        notes.append(f"{model_type} counted as {same[0]!r}, whose layers it has: {same[1]}")
        fam = supported[same[0]]
    elif model_type not in supported:
        raise CostModelError(
            f"{where}: unsupported model_type {model_type!r}{closest(model_type, supported)}; "
            f"supported: {', '.join(sorted(supported))}"
        )
    else:
        fam = supported[model_type]
    stored = None
    if data.get("quantization_config") is not None:
        stored, more = checkpoint(data["quantization_config"], where)
        notes += more
    return Read(fam, fam.from_hf(data), tuple(notes), stored, model_type)
