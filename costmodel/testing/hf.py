"""``against="transformers"``: a built-in family checked against the transformers module of the same config.

The model is a Hugging Face ``config.json`` (or a family name: its first model type's config class, built small,
:func:`costmodel.tracer.hf.small_config`). The module is the class the family describes (:func:`module_class`:
the file's ``architectures``, else the first of the causal LM, encoder-decoder LM, masked LM, image classifier
and bare model that the family reads as the file without ``architectures``). Which config field sets which of
the family's symbols is found by asking the family itself: each whole-number field is changed, the file read
again (``from_hf``), and a field whose change moves exactly one symbol, to the field's new value, sets that
symbol. Those symbols are drawn, and the factory writes each drawn size into its fields; a field the config class
computes from the others is left out, to follow them (:func:`derived_fields`: ``head_dim``, DeepSeek's
``qk_head_dim``); every other symbol stays at the file's value (pinned). transformers builds the config
(``CONFIG_MAPPING``, no hub) and the class (eager attention, batched-MM experts, no cache), on meta, or on CPU
where its forward reads data; the inputs follow its head (:func:`_inputs`). What the module computes beyond the
architecture is taken off FlopCounterMode's count and stated (:mod:`costmodel.testing.hf_extra`).
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
    folder = tempfile.mkdtemp(prefix="costmodel-check-")
    from ..tracer.hf import small_config  # deferred: imports transformers

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


def _cycled(cfg: Mapping[str, object], n_old: int, n_new: int) -> dict:
    """``cfg`` with each list of ``n_old`` entries (a per-layer list: ``layer_types``) made ``n_new`` long, its
    pattern cycled."""
    return {
        k: [v[i % n_old] for i in range(n_new)] if isinstance(v, list) and v and len(v) == n_old else v
        for k, v in cfg.items()
    }


def field_map(family, cfg: Mapping[str, object]) -> tuple[dict[str, list[str]], bool]:
    """Symbol → the config fields that set it, found by changing each field (see the module); and whether
    ``head_dim`` follows ``hidden_size / num_attention_heads`` (the family reads no ``d_head`` from it)."""
    base = family.from_hf(dict(cfg))
    out: dict[str, list[str]] = {}

    def moves(name: str, value: int, follows: bool) -> str | None:
        try:
            moved = family.from_hf(_with(cfg, follows, **{name: value}))
        except CostModelError:
            try:  # a layer count with per-layer lists (layer_types) of its length: the lists follow it
                moved = family.from_hf(_cycled(_with(cfg, follows, **{name: value}), cfg[name], value))
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


#: The transformers auto classes a family's module is looked for in, in order, with the inputs each takes.
HEADS = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "seq2seq"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "image"),
    ("MODEL_MAPPING_NAMES", "base"),
)


def module_class(family, cfg: Mapping[str, object], where: str) -> tuple[str, str]:
    """The transformers class the family describes for ``cfg``, and its head (:data:`HEADS`): the file's own
    ``architectures`` where transformers has that class for its model type; else, asking the family, the first
    class of :data:`HEADS` that the family reads as it reads the file without ``architectures`` (BERT: the
    masked LM, not ``BertLMHeadModel``; ViT: the classifier; T5: the encoder-decoder LM)."""
    import transformers.models.auto.modeling_auto as auto  # deferred: imports transformers

    model_type = cfg.get("model_type")
    candidates = [
        (getattr(auto, names)[model_type], head) for names, head in HEADS if model_type in getattr(auto, names)
    ]
    named = [a for a in cfg.get("architectures") or () if isinstance(a, str)]
    for name in named:
        for cls, head in candidates:
            if cls == name:
                return cls, head
    base = family.from_hf({k: v for k, v in cfg.items() if k != "architectures"})
    for cls, head in candidates:
        try:
            if family.from_hf({**cfg, "architectures": [cls]}) == base:
                return cls, head
        except CostModelError:  # a head the family does not read
            continue
    raise CostModelError(
        f"{where}: transformers has no module of model_type {model_type!r} that the family describes "
        f"(tried {', '.join(c for c, _ in candidates) or 'none'}); nothing to compare"
    )


def derived_fields(cfg: Mapping[str, object], where: str) -> set[str]:
    """The whole-number fields transformers' config class computes itself from the others (DeepSeek's
    ``qk_head_dim`` = nope + RoPE widths, LLaMA's ``head_dim`` = width / heads, one of two names of a field):
    left out of a config at drawn sizes, so that they follow the drawn fields instead of keeping the file's
    value. A field is left out when the config built without it, and without those left out before it, is the
    file's config field for field."""
    from ..tracer.hf import build_config  # deferred: imports transformers

    full = build_config(cfg, where).to_dict()
    out: set[str] = set()
    for name in _ints(cfg):
        try:
            without = build_config({k: v for k, v in cfg.items() if k != name and k not in out}, where).to_dict()
        except CostModelError:
            continue
        if without == full:
            out.add(name)
    return out


def against(model: str, symbols: set[str]) -> tuple[str, object, dict[str, int], object]:
    """The config.json to check, the :class:`~costmodel.testing.pytorch.Factory` of its transformers module at
    drawn sizes (with what that module computes beyond the architecture, :mod:`costmodel.testing.hf_extra`),
    the symbols pinned to the file's values (those no field sets alone) and a relation the draws must meet (an
    even head width)."""
    from ..families import families  # deferred: the kit's modules load what they use
    from ..families.hf import SAME_STRUCTURE, read_json  # deferred: as above
    from ..families.hf_reading import read, table  # deferred: as above
    from ..tracer.hf import build_config  # deferred: imports transformers
    from .hf_extra import conventions, surplus  # deferred: as above
    from .pytorch import Factory  # deferred: as above

    path = config_path(model)
    where = f"check --against transformers: config {path!r}"
    supported = {t: fam for fam in families().values() for t in fam.hf_model_types}
    data = read_json(path)
    cfg, _ = read(data, supported, where)
    model_type = cfg.get("model_type")
    family = supported.get(model_type) or supported.get(SAME_STRUCTURE.get(model_type, ("",))[0])
    if family is None:
        raise CostModelError(f"{where}: no built-in family reads model_type {model_type!r}; nothing to compare")
    cls_name, head = module_class(family, cfg, where)
    fields, follows = field_map(family, cfg)
    aliases = table()["model_types"].get(model_type, {}).get("aliases", {})  # old name -> the class's name
    settings = family.from_hf(dict(cfg))
    drawn = {s for s in fields if s in symbols}
    inputs = ("B", "T", "T_src")  # the inputs' sizes, drawn: no config field sets them
    pinned = {s: int(v) for s, v in settings.items() if s in symbols and s not in drawn and s not in inputs}
    pinned = {s: v for s, v in pinned.items() if isinstance(v, int)}
    set_by_draws = {n for sym in drawn for n in fields[sym]}
    derived = derived_fields(cfg, where) - set_by_draws

    def factory(**sizes: int):
        import torch  # deferred: torch is optional (the torch extra)

        # one name per field (transformers would set the canonical one from a stale alias), and a derived field
        # left out, to follow the drawn ones
        kept = {k: v for k, v in cfg.items() if k not in aliases and k not in derived}
        new = _with(kept, follows, **{aliases.get(n, n): sizes[sym] for sym in drawn for n in fields[sym]})
        if "kv_lora_rank" in cfg:  # MLA: a key per head, which eager attention repeats heads / kv heads times
            new["num_key_value_heads"] = new["num_attention_heads"]
        layers = [n for n in fields.get("L", ()) if isinstance(cfg.get(n), int)]
        if layers and "L" in sizes:  # a per-layer list (layer_types) follows the layer count, its pattern cycled
            new = _cycled(new, cfg[layers[0]], sizes["L"])
        config = build_config(new, where)
        module = _build(config, cls_name)
        return module, _inputs(config, head, sizes, torch)

    factory.__qualname__ = f"transformers {cls_name}"
    probe = _build(build_config(cfg, where), cls_name, meta=True)  # which conventions apply: the module's parts
    made = Factory(factory, off=surplus, conventions=conventions(probe), cpu=True)
    even = _even_heads(symbols, follows)
    return path, made, pinned, even


def _build(config, cls_name: str, meta: bool = False):
    """transformers' ``cls_name`` of ``config`` (``_from_config``, what ``AutoModel.from_config`` calls) on
    torch's default device (the factory's caller sets it; ``meta``: on meta), eager attention, batched-MM
    experts (the default ``grouped_mm`` is invisible to ``FlopCounterMode``), no cache, in training mode."""
    import contextlib  # deferred: with torch below

    import torch  # deferred: torch is optional (the torch extra)
    import transformers  # deferred: as above

    config.use_cache = False
    with torch.device("meta") if meta else contextlib.nullcontext():
        module = getattr(transformers, cls_name)._from_config(
            config, attn_implementation="eager", experts_implementation="batched_mm"
        )
    module.train()
    return module


def _inputs(config, head: str, sizes: Mapping[str, int], torch) -> dict:
    """The example inputs of a module with ``head`` at the drawn sizes, on torch's default device:

    * causal LM: ``input_ids`` and ``labels`` of B × T and an all-ones ``attention_mask`` (without a mask,
      transformers checks for packed sequences with ``.item()``, which meta tensors cannot do);
    * masked LM: ``input_ids`` and ``labels``, no mask (the bidirectional mask helper reads a given mask's
      data: ``padding_mask.all()``);
    * encoder-decoder: ``input_ids`` of B × T_src, ``decoder_input_ids`` and ``labels`` of B × T (given, not the
      labels shifted: a config need not name its decoder's start token);
    * image classifier / bare model: ``pixel_values`` of B × channels × side × side (the config's
      ``image_size``), with ``labels`` of B for a classifier; a bare text model: ``input_ids``.
    """
    batch, seq = sizes.get("B", 2), sizes.get("T", 8)

    def ids(n: int):
        return torch.zeros(batch, n, dtype=torch.long)

    if head == "causal":
        return {"input_ids": ids(seq), "labels": ids(seq), "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
    if head == "masked":
        return {"input_ids": ids(seq), "labels": ids(seq)}
    if head == "seq2seq":
        source = ids(sizes.get("T_src", seq))
        return {"input_ids": source, "decoder_input_ids": ids(seq), "labels": ids(seq)}
    side = getattr(config, "image_size", None)
    if head in ("image", "base") and side is not None:
        side = side[0] if isinstance(side, (list, tuple)) else side
        pixels = torch.zeros(batch, getattr(config, "num_channels", 3), side, side)
        if head == "image":
            return {"pixel_values": pixels, "labels": torch.zeros(batch, dtype=torch.long)}
        return {"pixel_values": pixels}
    return {"input_ids": ids(seq)}


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
