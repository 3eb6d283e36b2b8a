"""A ``config.json`` read as transformers reads it, before a family maps its fields: the language model of a
multimodal wrapper, the config class's defaults, renamed fields, and the notes that say what was done.

The data is ``data/hf_configs.json``, written by ``scripts/hf_config_table.py`` from transformers 5.24.0 (no
transformers import and no network here):

* a wrapper (``gemma3``, ``llava``, ``mistral3``, ``qwen2_5_vl``...) nests its language model under
  ``text_config`` (or ``llm_config``, ``language_config``): that config is the one counted, with the model type
  transformers gives it when it names none (``gemma3`` → ``gemma3_text``); the vision tower is not counted, and
  the notes say so;
* a field a file leaves out takes its config class's default, as ``from_pretrained`` does. transformers writes a
  config with ``to_diff_dict`` (``save_pretrained``): a field equal to its default is left out, and the file says
  ``transformers_version``. Only such a file is filled (a config someone typed without ``num_hidden_layers`` is a
  mistake more often than a wish for the class's 32 layers), and the fields filled are named in the notes;
* a field under another name (the class's ``attribute_map``: Qwen3-MoE's Hub files say ``num_experts``, the
  same config saved by transformers 5.24 says ``num_local_experts``) is given both names.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping

from ..errors import CostModelError

TEXT_KEYS = ("text_config", "llm_config", "language_config")
_TABLE = os.path.join(os.path.dirname(__file__), "data", "hf_configs.json")


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """The recorded table: ``{"transformers": version, "model_types": {type: {class, defaults, aliases, text}}}``."""
    with open(_TABLE, encoding="utf-8") as fh:
        return json.load(fh)


def language_model(data: Mapping[str, object], supported: Mapping[str, object], where: str) -> tuple[dict, list[str]]:
    """The config to count: ``data`` itself, or the language model a wrapper nests (``text_config``...) when no
    family reads the wrapper's own type; and a note naming what is left out."""
    model_type = data.get("model_type")
    if model_type in supported:
        return dict(data), []
    entry = table()["model_types"].get(model_type, {}) if isinstance(model_type, str) else {}
    keys = [entry["text"]["key"]] if "text" in entry else [k for k in TEXT_KEYS if isinstance(data.get(k), Mapping)]
    for key in keys:
        nested = data.get(key)
        if nested is None and "text" in entry:
            nested = {}  # every field at the language model's class defaults
        if not isinstance(nested, Mapping):
            continue
        inner = dict(nested)
        if not isinstance(inner.get("model_type"), str):
            default = entry.get("text", {}).get("model_type")
            if default is None:
                raise CostModelError(f"{where}: {key} names no model_type; expected one such as 'llama'")
            inner["model_type"] = default
        for shared in ("transformers_version", "quantization_config"):  # a wrapper's, said once at the top
            if shared in data and shared not in inner:
                inner[shared] = data[shared]
        towers = sorted(k for k, v in data.items() if k != key and k.endswith("_config") and isinstance(v, Mapping))
        towers = [t for t in towers if t != "quantization_config"]
        left = f"; {', '.join(towers)} (the vision tower and projector) not counted" if towers else ""
        note = f"{model_type}: the language model ({key}, model_type {inner['model_type']!r}) is counted{left}"
        return inner, [note]
    return dict(data), []


def aliases(cfg: dict, where: str) -> None:
    """Give each renamed field of ``cfg``'s class both its names (``num_experts`` and ``num_local_experts``)."""
    entry = table()["model_types"].get(cfg.get("model_type"), {})
    for old, new in entry.get("aliases", {}).items():
        if old in cfg and new in cfg and cfg[old] != cfg[new] and cfg[old] is not None and cfg[new] is not None:
            raise CostModelError(
                f"{where}: {old!r} = {cfg[old]!r} and {new!r} = {cfg[new]!r} are one field of "
                f"{entry['class']} (its attribute_map); expected one of them, or equal values"
            )
        if cfg.get(new) is None and cfg.get(old) is not None:
            cfg[new] = cfg[old]
        elif cfg.get(old) is None and cfg.get(new) is not None:
            cfg[old] = cfg[new]


def defaults(cfg: dict) -> list[str]:
    """Fill the fields ``cfg`` leaves out with its class's defaults, if transformers wrote it; the names filled."""
    entry = table()["model_types"].get(cfg.get("model_type"))
    if entry is None or "transformers_version" not in cfg:
        return []
    filled = []
    for name, value in entry["defaults"].items():
        if name not in cfg:  # a null in the file is the file's own value (no sliding window), never filled
            cfg[name] = value
            filled.append(name)
    for old, new in entry.get("aliases", {}).items():  # a default given under one name reaches the other
        if cfg.get(old) is None and cfg.get(new) is not None:
            cfg[old] = cfg[new]
    return filled


#: Fields whose default a note names (sizes that change a count); the others (dropouts, token ids) are not named.
_SIZES = ("vocab", "hidden", "intermediate", "layers", "heads", "head_dim", "position", "experts", "tie_", "window")


def read(data: Mapping[str, object], supported: Mapping[str, object], where: str) -> tuple[dict, list[str]]:
    """``data`` as transformers reads it (see the module's docstring), and the notes saying what was read."""
    cfg, notes = language_model(data, supported, where)
    aliases(cfg, where)
    filled = defaults(cfg)
    shown = [f"{n}={cfg[n]!r}" for n in filled if any(s in n for s in _SIZES) and isinstance(cfg[n], (int, bool))]
    if shown:
        cls = table()["model_types"][cfg["model_type"]]["class"]
        version = table()["transformers"]
        notes.append(f"left out of the file, so {cls}'s defaults (transformers {version}): {', '.join(shown)}")
    return cfg, notes
