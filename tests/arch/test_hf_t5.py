"""T5 (original and v1.1) cross-checked against transformers' ``T5ForConditionalGeneration`` on ``meta``.

Exact equalities, for tiny configs written to a ``config.json`` and read by costmodel:

* ``params.total`` = the ``numel()`` sum. transformers 5.24 always ties the LM head when it builds T5 from a
  config (``T5Config.__post_init__`` forces ``tie_word_embeddings``; ``false`` only turns off the d^-½
  rescale), while a v1.1 checkpoint loaded with ``from_pretrained`` keeps its own head. costmodel reads
  ``tie_word_embeddings: false`` as the checkpoint does, so for those configs we give the built model its own
  ``lm_head.weight``, as loading does;
* ``flops.matmul.forward`` / ``.training`` = ``FlopCounterMode`` at several (B, T_src, T);
* the decoder's cache (self-attention k, v over T and cross-attention k, v over T_src, per layer) = the bytes of
  the ``EncoderDecoderCache`` after a forward with ``use_cache=True``;
* one decode step (a new token against the cache) = ``FlopCounterMode`` over that step.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from costmodel.families import load
from costmodel.graph.analysis import evaluate, totals
from costmodel.graph.decode import decode_graph
from costmodel.symbols import C
from costmodel.verbs.estimate import estimate

CHECKED_TYPES = {"t5"}


def t5(**over) -> dict:
    base = {
        "model_type": "t5",
        "vocab_size": 50,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 40,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 16,
        "decoder_start_token_id": 0,
        "feed_forward_proj": "relu",
    }
    return {**base, **over}


def build(fields: dict):
    fields = dict(fields)
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    cfg._attn_implementation = "eager"
    with torch.device("meta"):
        model = transformers.T5ForConditionalGeneration(cfg)
        if fields.get("tie_word_embeddings") is False:  # what from_pretrained leaves of a v1.1 checkpoint
            model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    return model.eval()


def ids(batch: int, n: int) -> torch.Tensor:
    return torch.zeros(batch, n, dtype=torch.long, device="meta")


def hf_counts(fields: dict, batch: int, source: int, target: int) -> tuple[int, int, int]:
    model = build(fields)
    src, labels = ids(batch, source), ids(batch, target)
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model(input_ids=src, labels=labels, use_cache=False)
    with FlopCounterMode(display=False) as training:
        model(input_ids=src, labels=labels, use_cache=False).loss.backward()
    return sum(p.numel() for p in model.parameters()), forward.get_total_flops(), training.get_total_flops()


def config_json(tmp_path, fields: dict) -> str:
    path = tmp_path / "t5-config.json"
    path.write_text(json.dumps(fields))
    return str(path)


def check(tmp_path, fields: dict, batch: int, source: int, target: int) -> None:
    m = load(config_json(tmp_path, fields))
    t = totals(m.graph)
    values = {**m.values, "B": batch, "T_src": source, "T": target}
    ours = tuple(int(evaluate(e, values)) for e in (t.params, t.forward.matmul_flops, t.training.matmul_flops))
    assert ours == hf_counts(fields, batch, source, target), (fields, batch, source, target)


CONFIGS = {
    "relu": t5(),
    "gated-gelu-untied": t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_heads=6),
    "odd-sizes": t5(
        vocab_size=99,
        d_model=40,
        d_kv=6,
        d_ff=30,
        num_layers=3,
        num_decoder_layers=2,
        num_heads=5,
        relative_attention_num_buckets=16,
    ),
    "gated-silu-tied": t5(feed_forward_proj="gated-silu", num_decoder_layers=3),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("batch, source, target", [(1, 9, 5), (2, 6, 11)])
def test_t5_matches_transformers(tmp_path, name, batch, source, target):
    check(tmp_path, CONFIGS[name], batch, source, target)


def test_estimate_of_a_config_json(tmp_path):
    r = estimate(config_json(tmp_path, CONFIGS["odd-sizes"]), batch=2, seq=11, settings={"T_src": 6})
    assert r["tokens"]["per_step"] == 2 * (6 + 11)  # the encoder's tokens and the decoder's
    assert (r["params"]["total"], r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]) == hf_counts(
        CONFIGS["odd-sizes"], 2, 6, 11
    )


def test_built_from_config_transformers_ties_the_head():
    # transformers 5.24: T5 built from a config shares lm_head with the embedding even when the config says
    # tie_word_embeddings false; costmodel's tied=True is that model
    fields = t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    cfg = transformers.AutoConfig.for_model("t5", **{k: v for k, v in fields.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.T5ForConditionalGeneration(cfg)
    assert model.lm_head.weight is model.shared.weight
    r = estimate(
        "t5",
        settings={
            "L": 2,
            "L_dec": 2,
            "d": 32,
            "d_head": 8,
            "d_ff": 40,
            "h": 4,
            "V": 50,
            "n_buckets": 8,
            "gated": True,
            "act": "gelu",
            "tied": True,
        },
        seq=3,
    )
    assert r["params"]["total"] == sum(p.numel() for p in model.parameters())
    # read from the config.json, the checkpoint's own V × d head is counted
    assert (
        estimate("t5", settings={**r["config"], "gated": True, "act": "gelu", "tied": False}, seq=3)["params"]["total"]
        == r["params"]["total"] + 50 * 32
    )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoder_cache_and_decode_step_match_transformers(name):
    fields = CONFIGS[name]
    batch, source, target = 2, 7, 5
    model = build(fields)
    src = ids(batch, source)
    with torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=ids(batch, target), use_cache=True)
    cache = out.past_key_values
    layers = [*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers]
    cache_bytes = sum(t.numel() * t.element_size() for layer in layers for t in (layer.keys, layer.values))
    with torch.no_grad(), FlopCounterMode(display=False) as step:  # one new token against the cache
        model(
            encoder_outputs=(out.encoder_last_hidden_state,),
            decoder_input_ids=ids(batch, 1),
            cache=cache,
            use_cache=True,
        )

    config = {
        "L": fields["num_layers"],
        "L_dec": fields.get("num_decoder_layers", fields["num_layers"]),
        "d": fields["d_model"],
        "d_head": fields["d_kv"],
        "d_ff": fields["d_ff"],
        "h": fields["num_heads"],
        "V": fields["vocab_size"],
        "n_buckets": fields["relative_attention_num_buckets"],
        "T_src": source,
    }
    proj = fields["feed_forward_proj"]
    options = {
        "gated": proj.startswith("gated"),
        "act": proj.split("-")[-1],
        "tied": fields.get("tie_word_embeddings", True),
    }
    r = estimate("t5", settings={**config, **options}, batch=batch, seq=target, inference=True, kv_dtype="fp32")
    assert r["memory_bytes"]["kv_cache"] == cache_bytes  # fp32 on meta: 4 bytes each
    m = load("t5", options)
    one = totals(decode_graph(m.graph)).forward.matmul_flops  # the step sees the T cached keys and its own
    assert evaluate(one, {**config, "B": batch, C: target + 1}) == step.get_total_flops()


@st.composite
def configs(draw) -> dict:
    layers = draw(st.integers(1, 2))
    return t5(
        vocab_size=draw(st.integers(8, 64)),
        d_model=draw(st.sampled_from([8, 16, 24])),
        d_kv=draw(st.integers(2, 8)),
        d_ff=draw(st.integers(4, 32)),
        num_layers=layers,
        num_decoder_layers=draw(st.integers(1, 2)),
        num_heads=draw(st.integers(1, 4)),
        relative_attention_num_buckets=draw(st.sampled_from([4, 8, 32])),
        feed_forward_proj=draw(st.sampled_from(["relu", "gelu", "gated-gelu", "gated-relu"])),
        tie_word_embeddings=draw(st.booleans()),
    )


@settings(max_examples=6, deadline=None)
@given(fields=configs(), batch=st.integers(1, 2), source=st.integers(1, 9), target=st.integers(1, 9))
def test_generated_t5_configs_match_transformers(tmp_path_factory, fields, batch, source, target):
    check(tmp_path_factory.mktemp("cfg"), fields, batch, source, target)
