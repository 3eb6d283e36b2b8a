"""Write ``costmodel/families/data/hf_configs.json``: how transformers reads a ``config.json``, as data.

For every model type transformers knows (``CONFIG_MAPPING_NAMES``), from its config class:

* ``class``: the config class's name;
* ``defaults``: the class's own default of every scalar field (a dataclass field's default in transformers 5.x,
  the value a ``config.json`` that leaves the field out gets), fields defaulting to ``None`` left out (those are
  worked out from others in ``__post_init__``: ``head_dim``, ``layer_types``...) and the fields every config
  shares (``PretrainedConfig``'s own);
* ``aliases``: the class's ``attribute_map`` (an old or common name → the name the class stores: Qwen3-MoE's
  ``num_experts`` → ``num_local_experts``);
* ``text``: for a multimodal wrapper, the key of its language model's sub-config (``text_config``,
  ``llm_config``, ``language_config``) and the model type that sub-config takes when it names none.

costmodel reads the table at run time (no transformers import, no network). Run with the pinned version::

    pip install transformers==5.24.0 && python scripts/hf_config_table.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

TEXT_KEYS = ("text_config", "llm_config", "language_config")
OUT = os.path.join(os.path.dirname(__file__), "..", "costmodel", "families", "data", "hf_configs.json")


def scalar(value: object) -> bool:
    return isinstance(value, (bool, int, float, str)) and not (isinstance(value, float) and value != value)


def entry(cls, base: set[str]) -> dict:
    out: dict = {
        "class": cls.__name__,
        "defaults": {},
        "aliases": dict(sorted(getattr(cls, "attribute_map", {}).items())),
    }
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name in base or f.default is dataclasses.MISSING or not scalar(f.default):
                continue
            out["defaults"][f.name] = f.default
    subs = getattr(cls, "sub_configs", {}) or {}
    for key in TEXT_KEYS:
        if key in subs:
            try:
                made = getattr(cls(), key)
                nested = getattr(made, "model_type", None)
            except Exception as exc:  # a wrapper that cannot be built without arguments: say so in the table
                nested, out["text_error"] = None, f"{type(exc).__name__}: {exc}"[:200]
            out["text"] = {"key": key, "model_type": nested or getattr(subs[key], "model_type", None) or None}
            break
    return out


def main() -> int:
    import transformers
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    base = {f.name for f in dataclasses.fields(PretrainedConfig)}
    table = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception as exc:  # a config module that needs another package: left out, named
            print(f"skipped {model_type}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        table[model_type] = entry(cls, base)
    doc = {
        "source": f"transformers=={transformers.__version__}, written by scripts/hf_config_table.py",
        "transformers": transformers.__version__,
        "model_types": table,
    }
    head = json.dumps({k: v for k, v in doc.items() if k != "model_types"})[:-1]
    rows = ",\n".join(f"{json.dumps(t)}: {json.dumps(e, separators=(',', ':'))}" for t, e in table.items())
    with open(OUT, "w", encoding="utf-8") as fh:  # one model type a line: a new transformers is a readable diff
        fh.write(f'{head}, "model_types": {{\n{rows}\n}}}}\n')
    print(f"wrote {len(table)} model types to {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
