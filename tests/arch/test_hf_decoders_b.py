"""gpt_neox, falcon, starcoder2, gpt_oss and llama4_text, cross-checked against transformers.

As in ``test_hf.py``: each tiny config is written to a ``config.json``, read by costmodel (``load(path)``,
the graph's totals evaluated at each (B, T); ``estimate`` for the cache, and once per family with every
training quantity) and built by ``transformers`` on the ``meta`` device, eager attention. Exact
equalities, at two (B, T) and for hypothesis-drawn configs:

* ``params.total`` = the sum of ``numel()`` of the real parameters;
* ``flops.matmul.forward`` / ``flops.matmul.training`` = ``FlopCounterMode`` over forward / forward +
  backward (gpt-oss: ``experts_implementation="batched_mm"``, which multiplies each of the
  ``tokens·top_k`` routed copies by its expert's weights, so the count is top-k of E whatever the
  routing picks);
* ``memory_bytes.kv_cache`` (fp32, context T) = the bytes of the keys and values transformers' cache
  object holds after a prefill of T tokens (T = 9 runs past the windows and chunks of 4 below).

Llama 4 is the exception, stated exactly: transformers' ``Llama4TextMoe`` multiplies every token by
every expert (the ones not picked get a router score of 0; its experts take no
``experts_implementation``), so it counts ``n_experts`` experts where the model, and costmodel,
count ``top_k``: per MoE layer, forward, ``(n_experts − top_k) · 6·B·T·d·d_expert`` more (each
expert is three ``d × d_expert`` matmuls over ``B·T`` tokens), 3× that over forward + backward.

On meta the masks need ``attention_mask`` (transformers' packed-sequence check reads data otherwise).
"""

from __future__ import annotations

import json

import pytest
import torch  # the test extra pins torch and transformers: a missing one fails, never skips
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from costmodel import symbols
from costmodel.families import load
from costmodel.graph.analysis import evaluate, totals
from costmodel.verbs.estimate import estimate

SHAPES = ((2, 5), (3, 7))


def hf_model(fields: dict):
    fields = dict(fields)
    model_type = fields.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    extra = {"experts_implementation": "batched_mm"} if model_type == "gpt_oss" else {}
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)


def hf_counts(model, batch: int, seq: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward + backward FLOPs) of the transformers model."""
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    mask = torch.ones(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        model(input_ids=ids, attention_mask=mask)
    with FlopCounterMode(display=False) as training:
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    return sum(p.numel() for p in model.parameters()), forward.get_total_flops(), training.get_total_flops()


def hf_cache_bytes(model, batch: int, seq: int) -> int:
    """Bytes of every key and value tensor transformers' cache holds after a prefill of ``seq`` tokens."""
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def config_file(tmp_path, fields: dict) -> str:
    path = tmp_path / f"{fields['model_type']}-config.json"
    path.write_text(json.dumps(fields))
    return str(path)


def engine_counts(path: str, shapes) -> list[tuple[int, int, int]]:
    """(parameters, forward and training matmul FLOPs) at each (B, T): the totals ``estimate`` reports."""
    model = load(path)
    t = totals(model.graph)
    out = []
    for batch, seq in shapes:
        values = {**model.values, symbols.B: batch, symbols.T: seq}
        out.append(tuple(int(evaluate(x, values)) for x in (t.params, t.forward.matmul_flops, t.training.matmul_flops)))
    return out


def all_experts_surplus(fields: dict, batch: int, seq: int) -> int:
    """Forward FLOPs transformers' Llama 4 adds by running the experts no token was routed to."""
    if fields["model_type"] != "llama4_text":
        return 0
    layers, step = fields["num_hidden_layers"], fields.get("interleave_moe_layer_step", 1)
    moe_layers = len(range(step - 1, layers, step))
    idle = fields["num_local_experts"] - fields["num_experts_per_tok"]
    return moe_layers * idle * 6 * batch * seq * fields["hidden_size"] * fields["intermediate_size"]


def check(tmp_path, fields: dict, shapes=SHAPES) -> None:
    path, model = config_file(tmp_path, fields), hf_model(fields)
    for (batch, seq), ours in zip(shapes, engine_counts(path, shapes)):
        params, forward, training = hf_counts(model, batch, seq)
        surplus = all_experts_surplus(fields, batch, seq)
        assert ours == (params, forward - surplus, training - 3 * surplus), (fields, batch, seq)


def neox(**over) -> dict:
    return {
        "model_type": "gpt_neox",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "vocab_size": 64,
        "max_position_embeddings": 64,
        **over,
    }


def falcon(**over) -> dict:
    return {
        "model_type": "falcon",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 64,
        **over,
    }


def starcoder2(**over) -> dict:
    return {
        "model_type": "starcoder2",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 48,
        "vocab_size": 64,
        "max_position_embeddings": 64,
        **over,
    }


def gpt_oss(**over) -> dict:
    return {
        "model_type": "gpt_oss",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 16,
        "vocab_size": 64,
        "sliding_window": 4,
        "max_position_embeddings": 64,
        **over,
    }


def llama4(**over) -> dict:
    return {
        "model_type": "llama4_text",
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 16,
        "intermediate_size_mlp": 48,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
        "vocab_size": 64,
        "attention_chunk_size": 4,
        "max_position_embeddings": 64,
        **over,
    }


HAND_PICKED = {
    "gpt-neox-parallel-quarter-rope": neox(),
    "gpt-neox-sequential-full-rope-tied": neox(
        use_parallel_residual=False, attention_bias=False, rotary_pct=1.0, tie_word_embeddings=True
    ),
    "gpt-neox-half-rope-v5-field": neox(rope_parameters={"partial_rotary_factor": 0.5, "rope_theta": 10000.0}),
    "gpt-neox-no-rope": neox(rotary_pct=0.0, num_attention_heads=2),
    "falcon-7b-style-mqa": falcon(),
    "falcon-40b-style-copied-kv": falcon(new_decoder_architecture=True, num_kv_heads=2),
    "falcon-new-one-norm": falcon(
        new_decoder_architecture=True, num_kv_heads=1, num_ln_in_parallel_attn=1, bias=True, ffn_hidden_size=40
    ),
    "falcon-rw-style-alibi": falcon(alibi=True, bias=True, multi_query=False, parallel_attn=False),
    "falcon-mha-untied": falcon(multi_query=False, tie_word_embeddings=False, ffn_hidden_size=48),
    "starcoder2": starcoder2(),
    "starcoder2-window-no-bias-untied": starcoder2(sliding_window=4, use_bias=False, tie_word_embeddings=False),
    "gpt-oss": gpt_oss(),
    "gpt-oss-3-layers-no-bias-tied": gpt_oss(
        num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True, num_local_experts=3, num_experts_per_tok=3
    ),
    "llama4-interleaved-chunked": llama4(),
    "llama4-all-moe-top2-no-chunks": llama4(
        num_experts_per_tok=2, interleave_moe_layer_step=1, attention_chunk_size=None, use_qk_norm=False
    ),
    "llama4-no-temperature-bias": llama4(
        attn_temperature_tuning=False,
        attention_bias=True,
        num_hidden_layers=8,
        no_rope_layer_interval=2,
        interleave_moe_layer_step=4,
    ),
}


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_hand_picked_config_matches_transformers(tmp_path, name):
    check(tmp_path, HAND_PICKED[name])


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_kv_cache_bytes_match_transformers(tmp_path, name):
    fields = HAND_PICKED[name]
    path, model = config_file(tmp_path, fields), hf_model(fields)
    for batch, seq in ((2, 3), (2, 9)):
        r = estimate(path, batch=batch, seq=seq, inference=True, context=seq, kv_dtype="fp32")
        assert r["memory_bytes"]["kv_cache"] == hf_cache_bytes(model, batch, seq), (name, seq)


def test_kv_cache_golden_numbers(tmp_path):
    """The cache bounds, as arithmetic (fp32, B = 2, T = 9, windows and chunks of 4 keep 3 tokens)."""

    def kv(fields):
        return estimate(config_file(tmp_path, fields), batch=2, seq=9, inference=True, context=9, kv_dtype="fp32")[
            "memory_bytes"
        ]["kv_cache"]

    # Falcon-40B style: 2 groups copied to all 4 heads of 8 dims, cached at 4 heads: 2 layers × (k, v)
    assert kv(HAND_PICKED["falcon-40b-style-copied-kv"]) == 2 * 2 * 2 * 4 * 9 * 8 * 4
    # Falcon-7B style: one key/value head
    assert kv(HAND_PICKED["falcon-7b-style-mqa"]) == 2 * 2 * 2 * 1 * 9 * 8 * 4
    # gpt-oss: layer 0 slides (min(9, 4 − 1) = 3 tokens), layer 1 is full (9): 2 KV heads of 8
    assert kv(HAND_PICKED["gpt-oss"]) == 2 * 2 * 2 * 8 * (3 + 9) * 4
    # Llama 4: layers 0-2 chunked (3 tokens), layer 3 NoPE and full (9)
    assert kv(HAND_PICKED["llama4-interleaved-chunked"]) == 2 * 2 * 2 * 8 * (3 * 3 + 9) * 4


@pytest.mark.parametrize(
    "fields, message",
    [
        (neox(hidden_size=None), "hidden_size"),
        (neox(rotary_pct="0.25"), "rotary_pct"),
        (neox(rotary_pct=0.1875, hidden_size=64), "odd"),  # int(16 · 0.1875) = 3 rotary dims
        (falcon(n_head=4, num_attention_heads=None), "n_head"),
        (falcon(multi_query=False, num_kv_heads=2), "num_kv_heads"),
        (falcon(new_decoder_architecture=True, num_kv_heads=2, parallel_attn=False), "parallel_attn"),
        (falcon(num_ln_in_parallel_attn=2), "num_ln_in_parallel_attn"),
        (starcoder2(sliding_window="4096"), "sliding_window"),
        (starcoder2(num_key_value_heads=None), "num_key_value_heads"),
        (gpt_oss(layer_types=["full_attention", "sliding_attention"]), "layer_types"),
        (gpt_oss(head_dim=None), "head_dim"),
        (gpt_oss(num_hidden_layers=1), "no full-attention layer"),
        (gpt_oss(num_experts_per_tok=5), "num_experts_per_tok"),
        (llama4(moe_layers=[0, 1]), "moe_layers"),
        (llama4(attn_temperature_tuning=4), "attn_temperature_tuning"),
        (llama4(layer_types=["full_attention"] * 4), "layer_types"),
        (llama4(interleave_moe_layer_step=3, num_hidden_layers=5), "NoPE MoE"),
    ],
)
def test_config_json_is_read_strictly(tmp_path, fields, message):
    from costmodel.errors import CostModelError

    fields = {k: v for k, v in fields.items() if v is not None}
    with pytest.raises(CostModelError, match=message):
        estimate(config_file(tmp_path, fields))


# -- hypothesis: a few drawn configs per family ------------------------------------------------------


@st.composite
def neox_configs(draw) -> dict:
    heads, head_dim = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([8, 16]))
    return neox(
        num_attention_heads=heads,
        hidden_size=heads * head_dim,
        num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 48)),
        vocab_size=draw(st.integers(8, 64)),
        rotary_pct=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
        use_parallel_residual=draw(st.booleans()),
        attention_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
    )


@st.composite
def falcon_configs(draw) -> dict:
    heads = draw(st.sampled_from([2, 4]))
    layout = draw(st.sampled_from(["mqa", "copied", "rw", "mha"]))
    fields = falcon(
        num_attention_heads=heads,
        hidden_size=heads * draw(st.sampled_from([4, 8])),
        num_hidden_layers=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(8, 64)),
        bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        ffn_hidden_size=draw(st.one_of(st.none(), st.integers(4, 48))),
    )
    if layout == "copied":
        fields.update(
            new_decoder_architecture=True,
            num_kv_heads=draw(st.sampled_from([1, heads])),
            num_ln_in_parallel_attn=draw(st.sampled_from([1, 2])),
        )
    elif layout in ("rw", "mha"):
        fields.update(multi_query=False, alibi=layout == "rw", parallel_attn=layout == "mha")
    return {k: v for k, v in fields.items() if v is not None}


@st.composite
def starcoder2_configs(draw) -> dict:
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.sampled_from([1, 2]))
    return starcoder2(
        num_attention_heads=heads,
        num_key_value_heads=kv,
        hidden_size=heads * 8,
        intermediate_size=draw(st.integers(4, 48)),
        num_hidden_layers=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(8, 64)),
        use_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        sliding_window=draw(st.sampled_from([None, 2, 4])),
    )


@st.composite
def gpt_oss_configs(draw) -> dict:
    experts, kv = draw(st.integers(2, 6)), draw(st.sampled_from([1, 2]))
    return gpt_oss(
        num_hidden_layers=draw(st.integers(2, 3)),
        num_key_value_heads=kv,
        num_attention_heads=kv * draw(st.sampled_from([1, 2])),
        head_dim=draw(st.sampled_from([4, 8])),
        num_local_experts=experts,
        num_experts_per_tok=draw(st.integers(1, experts)),
        intermediate_size=draw(st.integers(2, 16)),
        vocab_size=draw(st.integers(8, 64)),
        attention_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        sliding_window=draw(st.integers(2, 6)),
    )


@st.composite
def llama4_configs(draw) -> dict:
    experts = draw(st.integers(2, 5))
    return llama4(
        num_hidden_layers=draw(st.sampled_from([2, 4])),
        num_local_experts=experts,
        num_experts_per_tok=draw(st.integers(1, experts)),
        interleave_moe_layer_step=draw(st.sampled_from([1, 2])),
        no_rope_layer_interval=draw(st.sampled_from([2, 4])),
        attention_chunk_size=draw(st.sampled_from([None, 3])),
        use_qk_norm=draw(st.booleans()),
        attention_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        intermediate_size=draw(st.integers(2, 16)),
        intermediate_size_mlp=draw(st.integers(2, 32)),
    )


@pytest.mark.parametrize(
    "configs",
    [neox_configs(), falcon_configs(), starcoder2_configs(), gpt_oss_configs(), llama4_configs()],
    ids=["gpt_neox", "falcon", "starcoder2", "gpt_oss", "llama4"],
)
def test_generated_configs_match_transformers(tmp_path_factory, configs):
    @settings(max_examples=4, deadline=None)
    @given(fields=configs, batch=st.integers(1, 2), seq=st.integers(1, 6))
    def run(fields, batch, seq):
        check(tmp_path_factory.mktemp("cfg"), fields, ((batch, seq),))

    run()
