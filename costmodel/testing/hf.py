"""``against="transformers"``: a built-in family checked against the transformers module of the same config.

The model is a Hugging Face ``config.json`` (or a family name: its first model type's config class, built small,
:func:`costmodel.tracer.hf.small_config`). Which config field sets which of the family's symbols is found by
asking the family itself: each whole-number field is changed, the file read again (``from_hf``), and a field
whose change moves exactly one symbol, to the field's new value, sets that symbol. Those symbols are drawn, and
the factory writes each drawn size into its fields (``head_dim`` follows ``hidden_size / num_attention_heads``
where the file's does and the family reads no ``d_head`` from it), builds the config with transformers (``CONFIG_MAPPING``, no hub) and its ``AutoModelForCausalLM``
(eager attention, batched-MM experts, no cache); every other symbol stays at the file's value (pinned). The
inputs are ``input_ids`` and ``labels`` of B × T and an all-ones ``attention_mask`` (without a mask,
transformers checks for packed sequences with ``.item()``, which meta tensors cannot do).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from ..errors import CostModelError

#: What a module transformers builds is compared on: parameters and matmul FLOPs (its saved tensors are eager
#: attention's and its own kernels', which no precision policy of a family describes byte for byte).
TERMS = ("params.total", "flops.matmul.forward", "flops.matmul.training")


def config_path(model: str) -> str:
    """The ``config.json`` of ``model``: the file (or a model folder's), or for a family name a small config of
    its first model type written to a temporary folder."""
    from ..families import families  # deferred: the kit's modules load what they use
    from ..families import hf as hf_config  # deferred: as above

    if not hf_config.can_trace():
        raise CostModelError(
            "checking against transformers needs torch and transformers: pip install 'costmodel[torch]'"
        )
    if os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json")):
        return os.path.join(model, "config.json")
    if model.endswith(".json"):
        return model
    fam = families().get(model)
    if fam is None or not fam.hf_model_types:
        raise CostModelError(
            f"check --against transformers: {model!r} is no config.json and no family that reads one; expected a "
            "config.json or a family with a Hugging Face model type (see 'costmodel models')"
        )
    from ..tracer.hf import small_config  # deferred: imports transformers

    folder = tempfile.mkdtemp(prefix="costmodel-check-")
    small_config(fam.hf_model_types[0]).save_pretrained(folder)
    return os.path.join(folder, "config.json")


def _ints(cfg: Mapping[str, object]) -> dict[str, int]:
    return {k: v for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def _head_dim_follows(cfg: Mapping[str, object]) -> bool:
    """Whether the file's ``head_dim`` is its ``hidden_size / num_attention_heads`` (then it follows them)."""
    d, h, k = (cfg.get(n) for n in ("hidden_size", "num_attention_heads", "head_dim"))
    return all(isinstance(x, int) and x > 0 for x in (d, h, k)) and k * h == d


def _with(cfg: Mapping[str, object], follows: bool, **changed: int) -> dict:
    new = {**cfg, **changed}
    if follows and new["hidden_size"] % new["num_attention_heads"] == 0:
        new["head_dim"] = new["hidden_size"] // new["num_attention_heads"]
    return new


def field_map(family, cfg: Mapping[str, object]) -> tuple[dict[str, list[str]], bool]:
    """Symbol → the config fields that set it, found by changing each field (see the module); and whether
    ``head_dim`` follows ``hidden_size / num_attention_heads`` (the family reads no ``d_head`` from it)."""
    base = family.from_hf(dict(cfg))
    out: dict[str, list[str]] = {}

    def moves(name: str, value: int, follows: bool) -> str | None:
        try:
            moved = family.from_hf(_with(cfg, follows, **{name: value}))
        except CostModelError:
            return None
        changed = {k for k in {*base, *moved} if k not in ("B", "T") and moved.get(k) != base.get(k)}
        sym = next(iter(changed)) if len(changed) == 1 else None
        return sym if sym is not None and moved[sym] == value else None

    follows = _head_dim_follows(cfg) and "d_head" not in base  # the family reads d/h, not head_dim
    for name, value in _ints(cfg).items():
        if follows and name == "head_dim":
            continue
        sym = moves(name, value * 2, follows)
        if sym is not None:
            out.setdefault(sym, []).append(name)
    return out, follows


def against(model: str, symbols: set[str]) -> tuple[str, object, dict[str, int], object]:
    """The config.json to check, the factory of its transformers module at drawn sizes, the symbols pinned to
    the file's values (those no field sets alone) and a relation the draws must meet (an even head width)."""
    from ..families import families  # deferred: the kit's modules load what they use
    from ..families.hf import SAME_STRUCTURE, read_json  # deferred: as above
    from ..families.hf_reading import read, table  # deferred: as above

    path = config_path(model)
    where = f"check --against transformers: config {path!r}"
    supported = {t: fam for fam in families().values() for t in fam.hf_model_types}
    data = read_json(path)
    cfg, _ = read(data, supported, where)
    model_type = cfg.get("model_type")
    family = supported.get(model_type) or supported.get(SAME_STRUCTURE.get(model_type, ("",))[0])
    if family is None:
        raise CostModelError(f"{where}: no built-in family reads model_type {model_type!r}; nothing to compare")
    fields, follows = field_map(family, cfg)
    aliases = table()["model_types"].get(model_type, {}).get("aliases", {})  # old name -> the class's name
    settings = family.from_hf(dict(cfg))
    drawn = {s for s in fields if s in symbols}
    pinned = {s: int(v) for s, v in settings.items() if s in symbols and s not in drawn and s not in ("B", "T")}
    pinned = {s: v for s, v in pinned.items() if isinstance(v, int)}

    def factory(**sizes: int):
        import torch  # deferred: torch is optional (the torch extra)

        from ..tracer.hf import causal_lm, config_from_json  # deferred: imports transformers

        new = _with(cfg, follows, **{aliases.get(n, n): sizes[sym] for sym in drawn for n in fields[sym]})
        for old in aliases:  # one name per field: transformers would set the canonical one from a stale alias
            new.pop(old, None)
        if cfg.get("qk_rope_head_dim") is not None and cfg.get("head_dim") == cfg["qk_rope_head_dim"]:
            new["head_dim"] = new["qk_rope_head_dim"]  # MLA: transformers' head_dim is the RoPE part
        layers = [n for n in fields.get("L", ()) if isinstance(cfg.get(n), int)]
        if layers and "L" in sizes:  # a per-layer list (layer_types) follows the layer count, its pattern cycled
            n_old = cfg[layers[0]]
            for key, value in cfg.items():
                if isinstance(value, list) and len(value) == n_old and value:
                    new[key] = [value[i % n_old] for i in range(sizes["L"])]
        config, _ = config_from_json(new, where)
        module = causal_lm(config)
        batch, seq = sizes.get("B", 2), sizes.get("T", 8)
        ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        mask = torch.ones(batch, seq, dtype=torch.long, device="meta")
        return module, {"input_ids": ids, "labels": ids.clone(), "attention_mask": mask}

    factory.__qualname__ = f"transformers {model_type}"
    even = _even_heads(symbols, follows)
    return path, factory, pinned, even


def _even_heads(symbols: set[str], follows: bool):
    """The relations transformers' configs need of the drawn sizes besides the family's: a head's width even
    (rotary embeddings rotate pairs: ``inv_freq`` has ceil(d_head / 2) entries), and the heads dividing the width
    (its configs validate ``hidden_size % num_attention_heads`` even where ``head_dim`` is its own field)."""
    import sympy  # deferred: the kit's modules load what they use

    from ..symbols import symbol  # deferred: the kit's modules load what they use

    out = []
    for rotated in ("d_head", "d_rope"):  # MLA rotates its d_rope part only
        if rotated in symbols:
            out.append(sympy.Eq(sympy.Mod(symbol(rotated), 2), 0))
    if {"d", "h"} <= symbols:
        per_head = symbol("d") / (2 * symbol("h")) if follows or "d_head" not in symbols else symbol("d") / symbol("h")
        out.append(sympy.Eq(sympy.Mod(per_head, 1), 0))
    return sympy.And(*out) if out else None
