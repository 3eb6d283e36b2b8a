"""``estimate`` from derived formulas: derive once per (model, settings, options), then only arithmetic.

The first estimate of a model under some options derives its quantities (sympy), writes them as plain
Python (:class:`~costmodel.formulas.compiled.Formulas`) and caches them in memory and on disk; every later estimate
with the same model, settings and options — at any batch and sequence length — substitutes numbers into
that code. This module imports neither sympy nor networkx: a cached estimate never loads them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

from ..errors import CostModelError
from ..formulas import compiled as formulas
from ..options import Options, check_settings
from ..render.results import Estimate, nest
from ..version import __version__

_MEMO: dict[str, formulas.Formulas] = {}
_MEMO_SIZE = 256


_KEYS: dict[tuple, str] = {}


def key(model: object, settings: Mapping[str, object] | None, options: Options) -> str | None:
    """What the formulas of an estimate depend on, hashed; ``None`` when that cannot be said (a model object
    built in memory, a device given as an object): those are derived every time. A name that is no file
    (a preset, a family) keeps its key for the process; a file is read again each time (it may change)."""
    if not isinstance(model, str) or (options.hardware is not None and not isinstance(options.hardware, str)):
        return None
    try:
        memo = (model, tuple(sorted((str(k), repr(v)) for k, v in (settings or {}).items())), options.derivation_key())
        if memo in _KEYS:
            return _KEYS[memo]
    except TypeError:  # an option that cannot be hashed
        memo = None
    k = _key(model, settings, options)
    if memo is not None and not any(
        os.path.exists(p) for p in (model, model.rpartition(":")[0], str(options.hardware or ""))
    ):
        _KEYS[memo] = k
    return k


def _key(model: str, settings: Mapping[str, object] | None, options: Options) -> str:
    described = options.replace(batch=None, seq=None).describe()  # B and T are values, not choices
    parts: dict[str, object] = {
        "version": __version__,
        "code": formulas.code_stamp(),
        "model": model,
        "settings": sorted((str(k), repr(v)) for k, v in (settings or {}).items()),
        "options": described,
        "weights_default": options.weights_default,  # the checkpoint's weight format, or one chosen
    }
    # files the formulas are derived from: a config.json, a model folder's, a builder, a hardware file
    for name in (model, model.rpartition(":")[0], os.path.join(model, "config.json"), str(options.hardware or "")):
        if name and os.path.isfile(name):
            parts[f"file:{name}"] = formulas.file_digest(name)
            if name.endswith(".py"):  # a builder: the helpers it imports from its folder too
                parts[f"folder:{name}"] = formulas.folder_digest(name)
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def estimate(
    model: object, *, settings: Mapping[str, object] | None = None, options: Options | None = None, **kwargs: object
) -> Estimate:
    """Exact numbers for one step of ``model``: parameters, FLOPs, bytes, memory per device, time.

    ``settings`` set symbols or builder options of a named model (``{"d_ff": "8*d/3"}``); the other
    keywords are :class:`~costmodel.options.Options` (``batch``, ``seq``, ``tokens``, ``recompute``,
    ``flash``, ``tp``, ``hardware``...), or pass ``options=``.

    >>> r = estimate("gpt2-small", batch=1, seq=1024)
    >>> r["params"]["total"]  # 124,439,808: biases on, embeddings tied
    124439808
    """
    opts = Options.make(options, **kwargs)
    settings = check_settings(settings)
    k = key(model, settings, opts)
    f = _MEMO.get(k) if k is not None else None
    if f is None and k is not None:
        f = formulas.load(k)
    if f is None:
        from ..sections.run import estimate_formulas  # deferred: deriving needs sympy; cached formulas do not

        f = estimate_formulas(model, settings, opts)
        if k is not None:
            formulas.store(k, f)
    if k is not None:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[k] = f
    out = report(f, opts)
    if opts.inference and "capacity_bytes" in out.get("memory", {}):
        _engine(model, settings, opts, out)
    return Estimate(out)


def _engine(model: object, settings: Mapping[str, object] | None, opts: Options, out: dict) -> None:
    """``memory.serving``: the sequences of the context a serving engine holds on the device, by the one rule
    of inference memory that ``fit --inference`` and ``roofline --decode`` use (:mod:`costmodel.serving.memory`:
    vLLM's KV pool), beside this estimate's own reading (every one of the B prompts prefilled at once). The pool's
    inputs are an estimate too (one chunk's prefill, :func:`~costmodel.serving.memory.pool_options`), served from
    the same cache. Not for a model with a recurrent state (the pool counts KV blocks only) or without a cache."""
    from ..serving.memory import pool, pool_options, sequences  # deferred: only an inference estimate needs them
    from ..serving.profiles import profile  # deferred, as above

    m = out["memory_bytes"]
    if not m.get("kv_cache") or "state_cache" in m:
        return
    prof = profile("vllm-v1")
    try:
        chunk = estimate(
            model,
            settings=settings,
            options=pool_options(prof, tp=opts.layout.tp, weights_dtype=opts.weights_dtype, kv_dtype=opts.kv_dtype),
        )["memory_bytes"]
    except CostModelError:  # a chunk the model cannot take as one sequence (learned positions: T <= 2,048)
        return
    context = int(out["time"]["context"]) if "context" in out.get("time", {}) else int(out["config"]["T"])
    capacity = int(out["memory"]["capacity_bytes"])
    try:
        kv = pool(capacity, prof, chunk["params"], chunk["activations"], chunk["kv_cache"], tp=opts.layout.tp)
        n = sequences(kv, context)
    except CostModelError:
        kv, n = None, 0
    batch = int(out["config"]["B"])
    out["memory"]["serving"] = {
        "inference_memory": f"engine: {prof.name} {prof.version}",
        "sequences": n,
        "context": context,
        "fits": batch <= n,
        "engine": None if kv is None else kv.as_dict(),
    }


def report(f: formulas.Formulas, opts: Options) -> dict:
    """The nested estimate of formulas ``f`` at the batch and sequence of ``opts``."""
    meta = f.meta
    values = dict(meta["values"])
    used = set(meta["graph_symbols"])
    values["B"] = opts.batch if opts.batch is not None else values.get("B", 1)
    if opts.seq is not None:
        if "T" not in used:  # a ViT's tokens come from its image and patch sizes
            raise CostModelError(
                f"model {meta['model']!r} has no sequence length T for --seq: its tokens per step "
                f"are {meta['tokens']}; set those sizes with --set NAME=VALUE"
            )
        values["T"] = opts.seq
    missing = sorted(s for s in used if s not in values)
    if missing:
        raise CostModelError(
            f"model {meta['model']!r} needs a value for {', '.join(missing)}; "
            f"give them with --set NAME=VALUE (or pick a preset: 'costmodel models')"
        )
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise CostModelError(f"{name}: expected a positive whole number, received {v}")
    flat = f.evaluate(values)
    out = nest(flat)
    c = opts.counting
    out.update(
        {
            "model": meta["model"],
            "family": meta["family"],
            "config": dict(sorted(values.items())),
            "conventions": {
                "causal": c.causal,
                "embedding": c.embedding,
                "elementwise": c.elementwise,
                "precision": opts.precision,
                "optimizer": opts.optimizer,
                "attention": opts.attention,
                "attention_default": opts.attention_default,
                "recompute": opts.recompute,
                "recompute_fraction": None if opts.recompute_fraction is None else str(opts.recompute_fraction),
                "norm_stats": opts.norm_stats,
                "mfu_basis": opts.mfu_basis,
                **({"logits": opts.logits} if opts.inference else {}),
                "flop": "a multiply-add is 2 FLOPs",
                "activations": flat.get(
                    "memory.conventions.activations", "saved for backward, no recompute, attention scores materialised"
                ),
            },
        }
    )
    if meta.get("source") is not None:
        out["source"] = meta["source"]
    if meta.get("notes"):  # what reading a config.json did: a vision tower not counted, defaults, quantization
        out["notes"] = list(meta["notes"])
    return out
