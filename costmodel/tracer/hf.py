"""Hugging Face transformers models for the tracer: configs in code, models on the meta device, no weights.

* :func:`small_config`: a model type's config with every size field the class has set small (width 64,
  2 layers, 4 heads, vocabulary 128...), for tests and for formula recovery's samples;
* :func:`causal_lm`: the ``AutoModelForCausalLM`` of a config on ``meta``, with ``use_cache=False`` (a
  returned cache is no tensor torch.export can output), eager or SDPA attention, and the ``batched_mm``
  experts of a mixture of experts (the default ``grouped_mm`` is invisible to ``FlopCounterMode``);
* :func:`trace_causal_lm`: trace it with ``input_ids`` (and ``labels``, for the loss) of symbolic B and T,
  T bounded by the position table;
* :data:`FIELDS`: config field → costmodel symbol, for formulas in a config's sizes.

Never downloads anything: configs are built from their classes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import CostModelError

#: Config fields and the small value :func:`small_config` gives them, when the config class has them.
SMALL = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "dim": 64,
    "intermediate_size": 128,
    "n_inner": 128,
    "ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "ffn_hidden_size": 128,
    "num_hidden_layers": 2,
    "n_layer": 2,
    "num_layers": 2,
    "n_layers": 2,
    "decoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rotary_dim": 8,
    "kv_channels": 16,
    "vocab_size": 128,
    "max_position_embeddings": 512,
    "n_positions": 512,
    "n_ctx": 512,
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "moe_k": 2,
    "top_k": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32,
    "expert_intermediate_size": 32,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "qk_head_dim": 16,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "global_head_dim": 16,
    "attention_chunk_size": 256,
}

#: Config field → costmodel symbol name (formulas in a config's sizes speak costmodel's notation).
FIELDS = {
    "hidden_size": "d",
    "n_embd": "d",
    "d_model": "d",
    "num_hidden_layers": "L",
    "n_layer": "L",
    "num_layers": "L",
    "num_attention_heads": "h",
    "n_head": "h",
    "num_key_value_heads": "n_kv",
    "head_dim": "d_head",
    "intermediate_size": "d_ff",
    "n_inner": "d_ff",
    "vocab_size": "V",
    "max_position_embeddings": "T_max",
    "n_positions": "T_max",
    "num_local_experts": "n_experts",
    "num_experts": "n_experts",
    "n_routed_experts": "n_experts",
    "num_experts_per_tok": "top_k",
    "moe_intermediate_size": "d_expert",
    "n_shared_experts": "n_shared",
    "q_lora_rank": "r_q",
    "kv_lora_rank": "r_kv",
    "qk_rope_head_dim": "d_rope",
    "qk_nope_head_dim": "d_nope",
    "v_head_dim": "d_v",
    "first_k_dense_replace": "L_dense",
    "sliding_window": "W",
}

#: Position-table fields: T may not exceed them.
POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")


def config_class(spec: object):
    """A config class from ``"transformers:Qwen3Config"`` (or ``"Qwen3Config"``), or the class itself."""
    if not isinstance(spec, str):
        return spec
    import transformers  # deferred: torch is optional, imported only when tracing

    module, _, name = spec.rpartition(":")
    if module not in ("", "transformers"):
        raise CostModelError(f"config class {spec!r}: expected transformers:ClassName")
    cls = getattr(transformers, name, None)
    if cls is None or not isinstance(cls, type):
        raise CostModelError(f"config class {spec!r}: transformers {transformers.__version__} has no class {name!r}")
    if not issubclass(cls, transformers.PretrainedConfig):  # AutoConfig is a factory, not a config
        raise CostModelError(
            f"config class {spec!r}: {name} is not a config class (a subclass of PretrainedConfig); "
            f"expected one such as transformers:Qwen3Config"
        )
    return cls


#: Fields :func:`small_config` gives a value only where the class leaves them ``None`` (a class that builds only
#: with one, such as dots1's shared experts).
SMALL_IF_NONE = {"n_shared_experts": 1}

#: Layer-count fields: a per-layer list of the class's default length is cut to the small count.
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")


def _per_layer(values: list, n: int) -> list:
    """``n`` entries of a per-layer list (``layer_types``), each kind of layer kept where ``n`` allows: the first
    layer of each kind, then the first layers, in the list's order."""
    firsts = sorted({v: i for i, v in reversed(list(enumerate(values)))}.values())[:n]
    rest = [i for i in range(len(values)) if i not in firsts][: n - len(firsts)]
    return [values[i] for i in sorted(firsts + rest)]


def small_config(model_type: str, **overrides: object):
    """The config of ``model_type`` with each size field it has set small (see :data:`SMALL`). A class whose
    validation refuses the small layer count next to its default per-layer lists (``layer_types``,
    ``layers_block_type``) gets those lists cut to it (:func:`_per_layer`)."""
    from transformers import AutoConfig  # deferred: torch is optional, imported only when tracing

    defaults = AutoConfig.for_model(model_type).to_dict()
    fields = {k: v for k, v in SMALL.items() if k in defaults and not isinstance(defaults[k], (dict, list))}
    fields |= {k: v for k, v in SMALL_IF_NONE.items() if k in defaults and defaults[k] is None}
    for token in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id"):
        if isinstance(defaults.get(token), int):
            fields[token] = {"pad_token_id": 0, "eos_token_id": 2}.get(token, 1)
    if "qk_rope_head_dim" in fields and "head_dim" in fields:  # MLA: head_dim is the RoPE part
        fields["head_dim"] = fields["qk_rope_head_dim"]
    fields.update(overrides)
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception:  # transformers' validation: per-layer lists of the default depth, retried cut to the small one
        counts = [(defaults[k], fields[k]) for k in LAYER_COUNTS if isinstance(defaults.get(k), int) and k in fields]
        cut = {
            k: _per_layer(v, small)
            for k, v in defaults.items()
            for full, small in counts[:1]
            if isinstance(v, list) and len(v) == full and k not in fields and not isinstance(v[0], (list, dict))
        }
        if not cut:
            raise
        return AutoConfig.for_model(model_type, **{**cut, **fields})


def causal_lm(config, *, attn: str = "eager", dtype=None, experts: str = "batched_mm"):
    """``AutoModelForCausalLM`` of ``config`` on the meta device, without a cache."""
    import torch  # deferred: torch is optional, imported only when tracing
    from transformers import AutoModelForCausalLM  # deferred: torch is optional, imported only when tracing

    config.use_cache = False
    kwargs = {"attn_implementation": attn, "experts_implementation": experts}
    if dtype is not None:
        kwargs["dtype"] = dtype
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    model.train()
    return model


def position_limit(config) -> int | None:
    """The largest position a transformers config allows (its first positive field of :data:`POSITIONS`), or None."""
    for name in POSITIONS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def example_inputs(config, batch: int = 2, seq: int = 8, labels: bool = True):
    """``input_ids`` (and ``labels``) of symbolic B and T, and T's range (at most the position table)."""
    import torch  # deferred: torch is optional, imported only when tracing

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    inputs = {"input_ids": ids}
    dynamic = {"input_ids": {0: "B", 1: "T"}}
    if labels:
        inputs["labels"] = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        dynamic["labels"] = {0: "B", 1: "T"}
    limit = position_limit(config)
    return inputs, dynamic, {"T": (2, limit)} if limit else {}


def trace_causal_lm(
    config,
    *,
    attn: str = "eager",
    labels: bool = True,
    name: str | None = None,
    dtype=None,
    experts: str = "batched_mm",
    fold: bool = True,
):
    """Trace the causal LM of ``config``: a :class:`~costmodel.families.Model` in B and T."""
    from . import trace  # deferred: the tracer's modules import each other

    model = causal_lm(config, attn=attn, dtype=dtype, experts=experts)
    inputs, dynamic, ranges = example_inputs(config, labels=labels)
    name = name or config.model_type
    return trace(model, inputs, dynamic, ranges=ranges, name=name, fold=fold, t_step=chunk_of(config))


def as_settings(config, sizes: Mapping[str, str]) -> dict[str, int]:
    """The values of ``sizes`` (field → symbol name) in ``config``, by symbol name."""
    return {sym: int(getattr(config, field)) for field, sym in sizes.items()}


#: A ``config.json``'s model dtype (``dtype``; ``torch_dtype`` before transformers 4.56) by costmodel's name.
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

#: Fields of a ``config.json`` left out of the config a model is built from here: how a checkpoint is stored
#: (``quantization_config``: counted from the file's reading, never quantized on meta), the remote code a
#: file may name (``auto_map``: never run) and the class names a file lists (``architectures``).
NOT_BUILT = ("quantization_config", "auto_map", "architectures")


def config_from_json(data: Mapping[str, object], where: str):
    """The transformers config of a ``config.json``'s data, by its ``model_type`` (``CONFIG_MAPPING``, no hub,
    no remote code), and the name of its causal-LM class; the language model's config of a wrapper whose own
    type has no causal LM (``text_config``...)."""
    from transformers import CONFIG_MAPPING  # deferred: torch is optional, imported only when tracing
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # deferred: as above

    model_type = data.get("model_type")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        from ..families.hf_reading import language_model  # deferred: the tracer's modules import each other

        inner, _ = language_model(data, {}, where)
        if inner.get("model_type") != model_type and inner.get("model_type") in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            data, model_type = inner, inner["model_type"]
    if model_type not in CONFIG_MAPPING:
        raise CostModelError(
            f"{where}: unsupported model_type {model_type!r}: no built-in family reads it, and transformers "
            f"{_version()} has no such model type to trace (CONFIG_MAPPING)"
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise CostModelError(
            f"{where}: transformers {_version()} has no causal LM for model_type {model_type!r} (AutoModelForCausalLM)"
        )
    return build_config(data, where), MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]


def build_config(data: Mapping[str, object], where: str):
    """The transformers config of a ``config.json``'s data by its ``model_type`` (``CONFIG_MAPPING``, no hub,
    no remote code), whatever classes transformers has for it; the fields of :data:`NOT_BUILT` left out."""
    from transformers import CONFIG_MAPPING  # deferred: torch is optional, imported only when tracing

    model_type = data.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise CostModelError(f"{where}: transformers {_version()} has no model_type {model_type!r} (CONFIG_MAPPING)")
    kept = {k: v for k, v in data.items() if k not in NOT_BUILT}
    try:
        return CONFIG_MAPPING[model_type].from_dict(kept)
    except Exception as exc:  # transformers' validation of the file's fields: one line
        raise CostModelError(f"{where}: transformers refused the config: {type(exc).__name__}: {exc}") from None


def _version() -> str:
    import transformers  # deferred: torch is optional, imported only when tracing

    return transformers.__version__


def trace_config(data: Mapping[str, object], where: str, dtype: str | None = None):
    """The :class:`~costmodel.families.Model` of a ``config.json`` traced: its transformers causal LM built from
    the config on meta (eager attention, batched-MM experts, no cache), exported with symbolic B and T (T at
    most the position table) and read into a graph; ``dtype`` (costmodel's name) is the weights' and
    activations' dtype it is built in (default fp32)."""
    import torch  # deferred: torch is optional, imported only when tracing

    config, cls = config_from_json(data, where)
    torch_dtype = getattr(torch, TORCH_DTYPES.get(dtype or "fp32", "float32"))
    try:
        m = trace_causal_lm(config, name=config.model_type, dtype=torch_dtype)
    except CostModelError as exc:
        raise CostModelError(f"{where}: tracing {cls} failed: {exc}") from None
    info = m.graph.graph["traced"]
    note = (
        f"{config.model_type}: traced, no built-in family reads it — {cls} built from the config on meta "
        f"(transformers {_version()}, eager attention, {TORCH_DTYPES.get(dtype or 'fp32', 'float32')}) and "
        f"exported with torch.export ({info['aten_nodes']} ATen nodes); T at most the position table"
    )
    return m, note


#: Config fields holding a length T is cut into (SSM and linear-attention chunks, chunked attention).
CHUNKS = ("chunk_size", "attention_chunk_size", "mamba_chunk_size", "ssm_chunk_size", "block_size")


def chunk_of(config, least: int = 16) -> int:
    """The step of the fixed T a module torch cannot export with a symbolic T is traced at: the least common
    multiple of ``least`` and every chunk length the config names (:data:`CHUNKS`), so a padding to a chunk is
    exact at every traced T."""
    import math  # deferred: only a fit over T asks

    step = least
    for name in CHUNKS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 1 < value <= 4096:
            step = math.lcm(step, value)
    return step
