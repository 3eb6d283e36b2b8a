"""State-space families (``mamba``, ``jamba``), cross-checked against transformers.

As in ``test_hf.py``, each tiny config is written to a ``config.json``, read by costmodel and built by
transformers on the ``meta`` device (Jamba's experts with ``experts_implementation="batched_mm"``). Exact:

* ``params.total`` = the sum of ``numel()``;
* ``flops.matmul.forward`` and ``.training`` = ``FlopCounterMode`` over forward and forward + backward,
  less what it counts of the depthwise convolution beyond what the architecture computes (:func:`conv_extra`);
* the cache after a prefill: ``memory_bytes.kv_cache`` = the attention layers' keys and values,
  ``memory_bytes.state_cache`` = the Mamba layers' convolution and SSM states, bytes of the transformers
  cache object, in fp32 and bf16 models;
* one decode step's matmul FLOPs = ``FlopCounterMode`` over transformers' step, less its convolution's
  extra output.

Counting on meta: Jamba's mask helpers call ``.item()`` without a cache, so a Jamba with attention layers
runs with ``use_cache=True`` (the same counts when ``T ≥ d_conv``, which every shape here meets). A Jamba
without attention layers fails on meta both ways (its cache has no attention layer to size): it runs as a
tiny real model on CPU tensors (no attention: no SDPA, which ``FlopCounterMode`` misses on CPU).
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
from costmodel.graph.analysis import evaluate, totals
from costmodel.graph.decode import decode_graph
from costmodel.symbols import B, C, T
from costmodel.verbs.estimate import estimate


def mamba(**over) -> dict:
    base = {
        "model_type": "mamba",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "vocab_size": 64,
        "state_size": 6,
        "expand": 2,
        "conv_kernel": 4,
        "time_step_rank": 4,
    }
    return {**base, **over}


def jamba(**over) -> dict:
    base = {
        "model_type": "jamba",
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 16,
        "vocab_size": 64,
        "max_position_embeddings": 64,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 3,
        "expert_layer_offset": 0,
        "mamba_dt_rank": 4,
        "mamba_d_state": 6,
        "mamba_d_conv": 3,
        "mamba_expand": 2,
    }
    return {**base, **over}


HAND_PICKED = {
    "mamba": mamba(),
    "mamba-biases-untied-expand3-auto-rank": mamba(
        use_bias=True,
        use_conv_bias=False,
        tie_word_embeddings=False,
        expand=3,
        time_step_rank="auto",
        hidden_size=40,
        conv_kernel=3,
    ),
    # layers: mamba + MoE, attention + MLP, mamba + MLP, attention + MoE (L = 4 is not a multiple of lcm(2, 3))
    "jamba-four-kinds": jamba(),
    # a period of 2 layers (attention + MLP, mamba + MoE) repeated twice; MQA
    "jamba-period-2-twice": jamba(
        attn_layer_period=2, attn_layer_offset=0, expert_layer_period=2, expert_layer_offset=1, num_key_value_heads=1
    ),
    "jamba-one-expert-tied-biases": jamba(
        num_experts=1, tie_word_embeddings=True, mamba_proj_bias=True, mamba_conv_bias=False, num_key_value_heads=4
    ),
    "jamba-all-mamba-period-6": jamba(
        num_hidden_layers=6,
        attn_layer_period=8,
        attn_layer_offset=7,
        expert_layer_period=2,
        expert_layer_offset=0,
        mamba_dt_rank="auto",
    ),
}


def hf_model(fields: dict, dtype: torch.dtype | None = None, device: str = "meta"):
    fields = dict(fields)
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    extra = {"experts_implementation": "batched_mm"} if cfg.model_type == "jamba" else {}
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype, **extra)


def attention_free_jamba(fields: dict) -> bool:
    return fields["model_type"] == "jamba" and "attention" not in hf_model(fields).config.layers_block_type


def mamba_layers(cfg) -> tuple[int, int, int]:
    """(Mamba layers, d_inner, d_conv) of a transformers config."""
    if cfg.model_type == "mamba":
        return cfg.num_hidden_layers, cfg.intermediate_size, cfg.conv_kernel
    return cfg.layers_block_type.count("mamba"), cfg.mamba_expand * cfg.hidden_size, cfg.mamba_d_conv


def conv_extra(cfg, batch: int, seq: int) -> tuple[int, int]:
    """What ``FlopCounterMode`` counts of the depthwise convolutions beyond the rule (forward, training).

    Per Mamba layer, with U = d_inner and W = d_conv: transformers' ``conv1d`` pads ``W − 1`` on both sides
    and drops the last ``W − 1`` outputs, so forward and the input gradient each count ``2·B·U·(W−1)·W``
    more than the ``T`` causal outputs; the weight gradient is counted as if the convolution were dense
    (torch's ``conv_backward_flop`` ignores groups): ``2·B·U²·(T+W−1)·W`` for the rule's ``2·B·U·T·W``.
    """
    layers, u, w = mamba_layers(cfg)
    pad = 2 * batch * u * (w - 1) * w
    return layers * pad, layers * (2 * pad + 2 * batch * u * w * (u * (seq + w - 1) - seq))


def hf_counts(fields: dict, batch: int, seq: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward + backward FLOPs), the convolution's extra taken off."""
    device = "cpu" if attention_free_jamba(fields) else "meta"  # see the module docstring
    model = hf_model(fields, device=device)
    ids = torch.zeros(batch, seq, dtype=torch.long, device=device)
    cache = model.config.model_type == "jamba" and device == "meta"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny CPU ops: a thread pool only waits (5× slower on a busy machine)
    try:
        with FlopCounterMode(display=False) as forward:
            model(input_ids=ids, use_cache=cache)
        with FlopCounterMode(display=False) as training:
            model(input_ids=ids, labels=ids, use_cache=cache).loss.backward()
    finally:
        torch.set_num_threads(threads)
    fwd, train = conv_extra(model.config, batch, seq)
    return (
        sum(p.numel() for p in model.parameters()),
        forward.get_total_flops() - fwd,
        training.get_total_flops() - train,
    )


def config_path(tmp_path, fields: dict) -> str:
    path = tmp_path / f"{fields['model_type']}-config.json"
    path.write_text(json.dumps(fields))
    return str(path)


def check(tmp_path, fields: dict, shapes: tuple[tuple[int, int], ...]) -> None:
    """The config.json read by costmodel (``params.total``, ``flops.matmul.*`` of ``estimate``, evaluated
    here from the one graph at each shape) against transformers."""
    m = load(config_path(tmp_path, fields))
    t = totals(m.graph)
    for batch, seq in shapes:
        values = {**m.values, B: batch, T: seq}
        engine = tuple(evaluate(e, values) for e in (t.params, t.forward.matmul_flops, t.training.matmul_flops))
        assert engine == hf_counts(fields, batch, seq), (fields, batch, seq)


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_hand_picked_config_matches_transformers(tmp_path, name):
    check(tmp_path, HAND_PICKED[name], ((2, 5), (3, 7)))


def test_estimate_gives_the_same_counts(tmp_path):
    fields = HAND_PICKED["jamba-four-kinds"]
    r = estimate(config_path(tmp_path, fields), batch=2, seq=5)
    engine = r["params"]["total"], r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]
    assert engine == hf_counts(fields, 2, 5)


def test_conv_extra_by_hand():
    # the tiny Mamba at B = 2, T = 5: FlopCounterMode 354,304 forward, 2,095,104 forward + backward
    # (both measured); U = 64, W = 4, 2 layers: forward pad 2 · 2·2·64·3·4 = 6,144; training adds the
    # input gradient's pad again and the weight gradient 2·2·64·4·(64·8 − 5) = 519,168 per layer
    fwd, train = conv_extra(hf_model(mamba(state_size=4)).config, 2, 5)
    assert (fwd, train) == (6_144, 2 * (2 * 3_072 + 519_168))
    assert (354_304 - fwd, 2_095_104 - train) == hf_counts(mamba(state_size=4), 2, 5)[1:]


def hf_cache_bytes(fields: dict, batch: int, seq: int, dtype: torch.dtype) -> tuple[int, int]:
    """(keys and values, conv and SSM states) bytes of transformers' cache after a prefill of ``seq``."""
    model = hf_model(fields, dtype)
    out = model(input_ids=torch.zeros(batch, seq, dtype=torch.long, device="meta"), use_cache=True)
    kv = states = 0
    for layer in out.cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            kv += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        for name in ("conv_states", "recurrent_states"):
            states += sum(t.numel() * t.element_size() for t in (getattr(layer, name, None) or {}).values())
    return kv, states


@pytest.mark.parametrize("name", ["mamba", "jamba-four-kinds", "jamba-period-2-twice"])
@pytest.mark.parametrize("dtype, precision", [(torch.float32, "fp32"), (torch.bfloat16, "bf16")])
def test_cache_bytes_equal_transformers_cache(tmp_path, name, dtype, precision):
    fields, batch, seq = HAND_PICKED[name], 2, 9
    r = estimate(
        config_path(tmp_path, fields), settings={"dtype": precision}, batch=batch, seq=seq, inference=True, context=seq
    )
    m = r["memory_bytes"]
    assert (m["kv_cache"], m["state_cache"]) == hf_cache_bytes(fields, batch, seq, dtype)
    assert m["total"] == m["params"] + m["kv_cache"] + m["state_cache"] + m["activations"]
    # the states do not grow with the context; the attention layers' keys and values do
    longer = estimate(
        config_path(tmp_path, fields),
        settings={"dtype": precision},
        batch=batch,
        seq=seq,
        inference=True,
        context=2 * seq,
    )["memory_bytes"]
    assert (longer["kv_cache"], longer["state_cache"]) == (2 * m["kv_cache"], m["state_cache"])


@pytest.mark.parametrize("name", ["mamba", "jamba-four-kinds"])
def test_decode_step_matches_transformers(tmp_path, name):
    fields, batch, prompt = HAND_PICKED[name], 2, 6
    model = hf_model(fields).eval()
    ids = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
    cache = model(input_ids=ids, use_cache=True).cache
    with FlopCounterMode(display=False) as step:
        model(input_ids=ids[:, :1], cache=cache, use_cache=True)
    m = load(config_path(tmp_path, fields))
    # the new token attends to the prompt and itself: C = prompt + 1 keys
    engine = evaluate(
        totals(decode_graph(m.graph)).forward.matmul_flops, {**m.values, B: batch, C: prompt + 1, T: prompt}
    )
    # transformers' conv update convolves the W cached inputs and the new one: 2 outputs, the rule 1
    layers, u, w = mamba_layers(model.config)
    assert step.get_total_flops() == engine + layers * 2 * batch * u * w


def test_published_parameter_counts():
    # Gu & Dao 2023 name the models by size: 130M, 370M, 790M, 1.4B, 2.8B (the counts of the -hf models)
    for name, published in (
        ("mamba-130m", 13),
        ("mamba-370m", 37),
        ("mamba-790m", 79),
        ("mamba-1.4b", 14),
        ("mamba-2.8b", 28),
    ):
        n = estimate(name)["params"]["total"]
        assert round(n / 10 ** (len(str(n)) - 2)) == published, (name, n)
    # Jamba v0.1 (Lieber et al. 2024, section 3): 52B total, 12B active; Jamba 1.5 Large (AI21 2024): 398B, 94B
    v01, large = estimate("jamba-v0.1")["params"], estimate("jamba-1.5-large")["params"]
    assert (round(v01["total"] / 1e9), round(v01["active"] / 1e9)) == (52, 12)
    assert (round(large["total"] / 1e9), round(large["active"] / 1e9)) == (399, 94)  # 398.56B
    # the inactive part is 14 of 16 experts in each MoE layer (every other one): 16 · 14 · 3·4096·14336
    assert v01["total"] - v01["active"] == 16 * 14 * 3 * 4096 * 14336


@st.composite
def ssm_configs(draw) -> dict:
    common = {
        "hidden_size": draw(st.sampled_from([16, 24, 32])),
        "vocab_size": draw(st.integers(8, 48)),
        "tie_word_embeddings": draw(st.booleans()),
    }
    if draw(st.booleans()):
        return mamba(
            **common,
            num_hidden_layers=draw(st.integers(1, 2)),
            state_size=draw(st.integers(1, 8)),
            expand=draw(st.integers(1, 3)),
            conv_kernel=draw(st.integers(2, 4)),
            time_step_rank=draw(st.sampled_from(["auto", 1, 3])),
            use_bias=draw(st.booleans()),
            use_conv_bias=draw(st.booleans()),
        )
    experts = draw(st.integers(1, 4))
    attn_period, expert_period = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return jamba(
        **common,
        num_hidden_layers=draw(st.integers(1, 4)),
        num_attention_heads=4,
        num_key_value_heads=draw(st.sampled_from([1, 2, 4])),
        num_experts=experts,
        num_experts_per_tok=draw(st.integers(1, experts)),
        intermediate_size=draw(st.integers(4, 24)),
        attn_layer_period=attn_period,
        attn_layer_offset=draw(st.integers(0, attn_period - 1)),
        expert_layer_period=expert_period,
        expert_layer_offset=draw(st.integers(0, expert_period - 1)),
        mamba_d_state=draw(st.integers(1, 6)),
        mamba_d_conv=draw(st.integers(2, 4)),
        mamba_expand=draw(st.integers(1, 2)),
        mamba_dt_rank=draw(st.sampled_from(["auto", 2])),
    )


@settings(max_examples=6, deadline=None)
@given(fields=ssm_configs(), batch=st.integers(1, 2), seq=st.integers(4, 6))
def test_generated_configs_match_transformers(tmp_path_factory, fields, batch, seq):
    check(tmp_path_factory.mktemp("cfg"), fields, ((batch, seq),))
