"""Gemma 1/2/3, Phi-3, Qwen3, Qwen3-MoE and OLMo 2 against transformers, from the same config.json.

As in ``test_hf.py``: each tiny config is written to a ``config.json``, read by costmodel and
built by ``transformers`` on the ``meta`` device (eager attention; Qwen3-MoE's experts with
``experts_implementation="batched_mm"``, which ``FlopCounterMode`` sees and which computes exactly
top-k of E experts per token). Exact equalities:

* ``params.total`` = the sum of ``numel()`` of the model's parameters (a tied table once);
* ``flops.matmul.forward`` / ``flops.matmul.training`` = ``FlopCounterMode`` over a forward pass /
  forward + backward, at two (B, T), one of them longer than the sliding window (read off the graph's
  totals, as ``estimate`` reads them, without its memory analyses, which are slow for layer patterns);
* the inference KV cache at batch 1 and context C (``memory_bytes.kv_cache``) = the bytes of the
  keys and values in transformers' ``DynamicCache`` after a bf16 prefill of C tokens, where sliding
  layers keep their last W − 1 tokens, at a C longer and one shorter than the window.
"""

from __future__ import annotations

import json

import pytest
import torch  # the test extra pins torch and transformers: a missing one fails, never skips
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from costmodel.families import load
from costmodel.graph.analysis import as_int, evaluate, totals
from costmodel.symbols import B, T
from costmodel.verbs.estimate import estimate

MOE_TYPES = ("qwen3_moe",)


def build(fields: dict, dtype: torch.dtype = torch.float32):
    fields = dict(fields)
    model_type = fields.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    extra = {"experts_implementation": "batched_mm"} if model_type in MOE_TYPES else {}
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype, **extra)


def hf_counts(model, batch: int, seq: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward + backward FLOPs) of the transformers model."""
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        model(input_ids=ids)
    with FlopCounterMode(display=False) as training:
        model(input_ids=ids, labels=ids).loss.backward()
    return sum(p.numel() for p in model.parameters()), forward.get_total_flops(), training.get_total_flops()


def hf_cache_bytes(model, context: int) -> int:
    """Bytes of the keys and values transformers' cache holds after a prefill of ``context`` tokens."""
    with torch.no_grad():
        cache = model(input_ids=torch.zeros(1, context, dtype=torch.long, device="meta"), use_cache=True).cache
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def write(tmp_path, fields: dict) -> str:
    path = tmp_path / f"{fields['model_type']}-config.json"
    path.write_text(json.dumps(fields))
    return str(path)


def engine_counts(path: str, batch: int, seq: int) -> tuple[int, int, int]:
    """``params.total``, ``flops.matmul.forward`` and ``flops.matmul.training`` as ``estimate`` derives them
    (the graph's totals), without the memory analyses ``estimate`` adds."""
    m = load(path)
    t = totals(m.graph)
    values = {**m.values, B: batch, T: seq}
    return tuple(
        as_int(evaluate(e, values), "count") for e in (t.params, t.forward.matmul_flops, t.training.matmul_flops)
    )


def check(tmp_path, fields: dict, points=((2, 5), (3, 7))) -> None:
    path, model = write(tmp_path, fields), build(fields)
    for batch, seq in points:
        assert engine_counts(path, batch, seq) == hf_counts(model, batch, seq), (fields, batch, seq)


def check_cache(tmp_path, fields: dict, contexts=(2, 7)) -> None:
    """The KV cache at batch 1 (bf16, the graphs' dtype) against a bf16 transformers model's cache."""
    path, model = write(tmp_path, fields), build(fields, torch.bfloat16)
    for context in contexts:
        ours = estimate(path, inference=True, context=context, batch=1)["memory_bytes"]["kv_cache"]
        assert ours == hf_cache_bytes(model, context), (fields, context)


def tiny(model_type: str, **over) -> dict:
    base = {
        "model_type": model_type,
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 50,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if model_type.startswith("gemma") or model_type == "qwen3":
        base["head_dim"] = 12  # ≠ d/h = 8: these types have a head_dim field
    if model_type == "qwen3_moe":
        base.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12, norm_topk_prob=True)
    return {**base, **over}


HAND_PICKED = {
    "gemma-mqa-tied": tiny("gemma", num_key_value_heads=1),
    "gemma-mha-bias-untied": tiny("gemma", num_key_value_heads=4, attention_bias=True, tie_word_embeddings=False),
    # layers 0 and 2 slide (W = 4), layer 1 is full: the pattern "sf" and a tail "s"
    "gemma2-alternating-odd": tiny("gemma2", sliding_window=4),
    "gemma2-layer-types-no-caps": tiny(
        "gemma2",
        num_hidden_layers=4,
        sliding_window=3,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        layer_types=["full_attention"] * 2 + ["sliding_attention"] * 2,
    ),
    # 8 layers, 5 local : 1 global: one unit "sssssf" and a tail "ss"
    "gemma3-5to1-tail": tiny("gemma3_text", num_hidden_layers=8, sliding_window=4, final_logit_softcapping=30.0),
    "gemma3-pattern2-bias": tiny(
        "gemma3_text",
        num_hidden_layers=4,
        sliding_window=3,
        sliding_window_pattern=2,
        attention_bias=True,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    ),
    "phi3-mha": tiny("phi3", num_key_value_heads=None, tie_word_embeddings=False),
    "phi3-gqa-window-head-dim": tiny("phi3", sliding_window=4, head_dim=6, tie_word_embeddings=True),
    "qwen3-tied": tiny("qwen3", tie_word_embeddings=True),
    # layer 0 full, layers 1 and 2 slide: the pattern "fss" once
    "qwen3-window-bias": tiny(
        "qwen3", use_sliding_window=True, sliding_window=4, max_window_layers=1, attention_bias=True
    ),
    "qwen3-moe": tiny("qwen3_moe"),
    "qwen3-moe-dense-layer-bias-tied": tiny(
        "qwen3_moe",
        mlp_only_layers=[1],
        attention_bias=True,
        tie_word_embeddings=True,
        num_experts=5,
        num_experts_per_tok=3,
    ),
    "qwen3-moe-sparse-step-window": tiny(
        "qwen3_moe",
        num_hidden_layers=4,
        decoder_sparse_step=2,
        head_dim=6,
        use_sliding_window=True,
        sliding_window=4,
        norm_topk_prob=False,
    ),
    "olmo2-mha": tiny("olmo2", num_key_value_heads=None, tie_word_embeddings=False),
    "olmo2-gqa-bias-tied": tiny("olmo2", attention_bias=True, tie_word_embeddings=True),
}


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_hand_picked_config_matches_transformers(tmp_path, name):
    check(tmp_path, HAND_PICKED[name])


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_kv_cache_matches_transformers(tmp_path, name):
    check_cache(tmp_path, HAND_PICKED[name])


def test_sliding_layers_keep_w_minus_1_tokens(tmp_path):
    # gemma2, W = 4, 3 layers (2 sliding, 1 full), C = 7, bf16, 2 KV heads of 12:
    # k and v of 2·12 elements per token: sliding 2 layers × 3 tokens, full 1 layer × 7
    fields = HAND_PICKED["gemma2-alternating-odd"]
    per_token = 2 * (2 * 12) * 2
    assert hf_cache_bytes(build(fields, torch.bfloat16), 7) == per_token * (2 * 3 + 7)
    check_cache(tmp_path, fields, contexts=(7,))


@pytest.mark.parametrize(
    "name",
    [
        "gemma2-alternating-odd",
        "gemma3-5to1-tail",
        "phi3-gqa-window-head-dim",
        "qwen3-window-bias",
        "qwen3-moe-sparse-step-window",
    ],
)
def test_windowed_decode_step_matches_transformers(tmp_path, name):
    # window=W counts what a model with a sliding cache computes in a decode step: a local layer's new
    # token meets min(C, W) keys (the W − 1 kept and its own), a global layer's all C = prompt + 1
    from costmodel.sections.decode import decode_cost
    from costmodel.symbols import C, W

    fields = HAND_PICKED[name]
    m = load(write(tmp_path, fields), {"window": W})
    ours = decode_cost(m.graph, m.values).matmul_flops
    model = build(fields).eval()
    for prompt in (2, 3, 6):  # below, at and past the window (W = 3 or 4)
        with torch.no_grad():
            cache = model(input_ids=torch.zeros(2, prompt, dtype=torch.long, device="meta"), use_cache=True).cache
            with FlopCounterMode(display=False) as step:
                model(input_ids=torch.zeros(2, 1, dtype=torch.long, device="meta"), cache=cache, use_cache=True)
        assert step.get_total_flops() == evaluate(ours, {B: 2, C: prompt + 1}), prompt


# -- generated configs: a few per family, each cross-checked with transformers -----------------------


@st.composite
def decoder_configs(draw, model_type: str) -> dict:
    kv = draw(st.sampled_from([1, 2]))
    h = kv * draw(st.sampled_from([1, 2]))
    head_dim = draw(st.sampled_from([4, 6]))
    layers = draw(st.integers(1, 7 if model_type == "gemma3_text" else 4))
    fields = tiny(
        model_type,
        num_attention_heads=h,
        num_key_value_heads=kv,
        hidden_size=8 * h,
        intermediate_size=draw(st.integers(4, 24)),
        num_hidden_layers=layers,
        vocab_size=draw(st.integers(8, 40)),
        tie_word_embeddings=draw(st.booleans()),
    )
    if model_type in ("gemma", "gemma2", "gemma3_text", "qwen3") or draw(st.booleans()):
        fields["head_dim"] = head_dim
    if model_type != "phi3":
        fields["attention_bias"] = draw(st.booleans())
    window = draw(st.integers(2, 6))
    if model_type in ("gemma2", "gemma3_text"):
        fields["sliding_window"] = window
        kinds = draw(
            st.lists(st.sampled_from(["sliding_attention", "full_attention"]), min_size=layers, max_size=layers)
        )
        if draw(st.booleans()):
            fields["layer_types"] = kinds
    if model_type == "gemma3_text":
        fields["sliding_window_pattern"] = draw(st.integers(1, 6))
    if model_type == "phi3" and draw(st.booleans()):
        fields["sliding_window"] = window
    if model_type in ("qwen3", "qwen3_moe") and draw(st.booleans()):
        fields.update(use_sliding_window=True, sliding_window=window, max_window_layers=draw(st.integers(0, layers)))
    if model_type == "qwen3_moe":
        experts = draw(st.integers(1, 6))
        fields.update(
            num_experts=experts,
            num_experts_per_tok=draw(st.integers(1, experts)),
            moe_intermediate_size=draw(st.integers(2, 12)),
            norm_topk_prob=draw(st.booleans()),
            decoder_sparse_step=draw(st.integers(1, 2)),
            mlp_only_layers=draw(st.lists(st.integers(1, layers), max_size=2, unique=True)),
        )
        if not any(
            (i + 1) % fields["decoder_sparse_step"] == 0 and i not in fields["mlp_only_layers"] for i in range(layers)
        ):
            fields["mlp_only_layers"], fields["decoder_sparse_step"] = [], 1  # at least one MoE layer
    return fields


TYPES = ("gemma", "gemma2", "gemma3_text", "phi3", "qwen3", "qwen3_moe", "olmo2")


@pytest.mark.parametrize("model_type", TYPES)
def test_generated_configs_match_transformers(tmp_path_factory, model_type):
    @settings(max_examples=4, deadline=None)
    @given(fields=decoder_configs(model_type), batch=st.integers(1, 2), seq=st.integers(1, 8))
    def run(fields, batch, seq):
        tmp = tmp_path_factory.mktemp("cfg")
        check(tmp, fields, points=((batch, seq),))
        check_cache(tmp, fields, contexts=(seq,))

    run()


# -- structure and strict reading ---------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gemma", "gemma2", "gemma3", "phi3", "qwen3", "qwen3_moe", "olmo2", "gemma3-1b"])
def test_flash_attention_fuses_every_layer_kind(family):
    # gemma2's soft-capped scores stay a chain FlashAttention fuses: scores → scale → softcap → mask → softmax
    from costmodel import load as load_model
    from costmodel.graph.passes import flash_attention

    G = load_model(family).graph
    H = flash_attention(G)  # raises if a softmax over scores is left unfused
    kinds = {"gemma2": 2, "gemma3": 2, "gemma3-1b": 3}.get(family, 1)  # local and full layers (and a tail)
    assert len(H.graph["rewritten"]["flash_attention"]) == kinds
    assert totals(H).forward.matmul_flops == totals(G).forward.matmul_flops


def test_a_pattern_must_tile_the_layers():
    from costmodel import CostModelError
    from costmodel import load as load_model

    with pytest.raises(CostModelError, match="count .* is not a positive whole number"):
        estimate(
            load_model("gemma3", {"L": 26, "d": 8, "h": 2, "n_kv": 1, "d_head": 4, "d_ff": 8, "V": 16, "W": 4}),
            seq=8,
            inference=True,
        )  # 26 layers are not units of 6 (gemma3-1b: tail="ss")
    assert load_model("gemma3", {"L": 8, "tail": "ss"}).graph.graph["blocks"]["sliding_tail"] == 2


@pytest.mark.parametrize(
    "fields, message",
    [
        ({**tiny("gemma"), "head_dim": None}, "missing field 'head_dim'"),
        ({k: v for k, v in tiny("qwen3").items() if k != "head_dim"}, "missing field 'head_dim'"),
        ({**tiny("gemma2"), "sliding_window": None}, "missing field 'sliding_window'"),
        (tiny("gemma2", sliding_window=4, layer_types=["full_attention"]), "field 'layer_types' must list"),
        (tiny("gemma2", sliding_window=4, attn_logit_softcapping="50"), "'attn_logit_softcapping' must be a positive"),
        (tiny("gemma3_text", sliding_window=4, use_bidirectional_attention=True), "is an encoder"),
        (tiny("phi3", sliding_window=1), "'sliding_window' must be at least 2"),
        (tiny("qwen3_moe", mlp_only_layers=[0, 1, 2]), "no MoE layer"),
        (tiny("qwen3_moe", mlp_only_layers="1"), "'mlp_only_layers' must be a list"),
        (tiny("qwen3_moe", num_experts_per_tok=5), "exceeds num_experts"),
    ],
)
def test_config_json_is_read_strictly(tmp_path, fields, message):
    from costmodel import CostModelError
    from costmodel import load as load_model

    with pytest.raises(CostModelError, match=message):
        load_model(write(tmp_path, fields))


MESSY_FIELDS = [
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "intermediate_size",
    "max_position_embeddings",
    "head_dim",
    "tie_word_embeddings",
    "attention_bias",
    "sliding_window",
    "layer_types",
    "sliding_window_pattern",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "use_sliding_window",
    "max_window_layers",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "norm_topk_prob",
    "use_bidirectional_attention",
]


@st.composite
def messy_configs(draw) -> dict:
    cfg = {"model_type": draw(st.sampled_from(TYPES))}
    for key in MESSY_FIELDS:
        choice = draw(st.integers(0, 12))
        if choice == 0:
            continue  # missing
        if choice == 1:  # anything JSON
            cfg[key] = draw(
                st.none()
                | st.booleans()
                | st.integers(-5, 10**20)
                | st.floats()
                | st.text(max_size=3)
                | st.lists(st.none() | st.integers(-1, 3) | st.sampled_from(["full_attention"]))
            )
        elif key in ("tie_word_embeddings", "attention_bias", "use_sliding_window", "norm_topk_prob"):
            cfg[key] = draw(st.booleans())
        else:  # small sizes, sometimes ones that do not divide
            cfg[key] = draw(st.sampled_from([2, 4, 8, 8, 8, 1, 3]))
    return cfg


@settings(max_examples=30, deadline=None)
@given(cfg=messy_configs())
def test_messy_configs_raise_only_costmodel_errors(tmp_path_factory, cfg):
    from costmodel import CostModelError

    path = write(tmp_path_factory.mktemp("messy"), cfg)
    try:
        params, forward, training = engine_counts(path, 1, 3)
    except CostModelError as exc:
        assert "\n" not in str(exc)
    else:
        assert params > 0 and training == 3 * forward > 0
