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
from ..options import VIA

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
    traced: Mapping[str, object] | None = None  # the file's data, when its transformers model is to be traced


def can_trace() -> bool:
    """Whether torch and transformers are installed (found, not imported: importing torch takes seconds)."""
    import importlib.util  # deferred: only a config.json no family reads asks

    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))


def read_config(path: str, families: Mapping[str, object], via: str | None = None) -> Read:
    """The :class:`Read` of a Hugging Face config.json, read as transformers reads it (:mod:`.hf_reading`).

    ``via`` (:data:`costmodel.options.VIA`): a :class:`Read` whose ``family`` is None and whose ``traced`` holds the file's data
    is one to trace (``via="trace"``, or a model type no family reads while torch is installed)."""
    from .hf_reading import read, table  # deferred: the recorded table loads only for a config.json

    if via not in (None, *VIA):
        raise CostModelError(f"via: expected one of {', '.join(VIA)}, received {via!r}")
    data = read_json(path)
    where = f"config {path!r}"
    check_bounds(data, where)
    supported = {t: fam for fam in families.values() for t in getattr(fam, "hf_model_types", ())}
    if not isinstance(data.get("model_type"), str):
        raise CostModelError(f"{where}: missing 'model_type'; supported: {', '.join(sorted(supported))}")
    if via == "trace":
        return _to_trace(data, where)
    read_data, notes = read(data, supported, where)
    model_type = read_data["model_type"]
    same = SAME_STRUCTURE.get(model_type)
    if model_type not in supported and same and same[0] in supported:
        notes.append(f"{model_type} counted as {same[0]!r}, whose layers it has: {same[1]}")
        fam = supported[same[0]]
    elif model_type not in supported:
        if via is None and model_type in table()["model_types"] and can_trace():  # a type transformers knows
            return _to_trace(data, where)
        hint = (
            "; or install torch and transformers (pip install 'costmodel[torch]') to trace its transformers model"
            if via is None
            else "; --via trace traces its transformers model instead"
        )
        raise CostModelError(
            f"{where}: unsupported model_type {model_type!r}{closest(model_type, supported)}; "
            f"supported: {', '.join(sorted(supported))}{hint}"
        )
    else:
        fam = supported[model_type]
    stored, more = _checkpoint(read_data, where)
    return Read(fam, fam.from_hf(read_data), (*notes, *more), stored, model_type)


def _checkpoint(data: Mapping[str, object], where: str) -> tuple[object, list[str]]:
    from .quantized import checkpoint  # deferred: the quantization methods load only for a config.json

    if data.get("quantization_config") is None:
        return None, []
    return checkpoint(data["quantization_config"], where)


def _to_trace(data: dict, where: str) -> Read:
    if not can_trace():
        raise CostModelError(f"{where}: tracing a config needs torch and transformers: pip install 'costmodel[torch]'")
    stored, notes = _checkpoint(data, where)
    return Read(None, {}, tuple(notes), stored, data["model_type"], traced=data)
