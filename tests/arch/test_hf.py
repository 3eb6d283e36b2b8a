"""Every supported Hugging Face model_type, cross-checked against transformers.

For each config (hand-picked and hypothesis-generated, all tiny) we write a
``config.json``, let costmodel read it (``estimate(path)``), and build the same
config with ``transformers`` on the ``meta`` device. Exact equalities:

* ``params.total`` = the sum of ``numel()`` of the real parameters;
* ``flops.matmul.forward`` = ``FlopCounterMode`` over a forward pass;
* ``flops.matmul.training`` = ``FlopCounterMode`` over forward + backward.

Counting on ``meta``: on real CPU tensors torch 2.13 counts 0 FLOPs for SDPA, so
we use the eager attention path on meta tensors (same matmuls as SDPA counts).
Mixtures of experts use ``experts_implementation="batched_mm"``: the default
``grouped_mm`` is not seen by ``FlopCounterMode``. ``batched_mm`` copies each
token ``top_k`` times and multiplies each copy by the weights of the expert it
was routed to (one ``bmm`` per projection over ``tokens·top_k`` rows), so its
FLOPs are exactly "top_k of n_experts per token" whatever the routing picks,
which makes the count on meta (where routing has no data) deterministic.
"""

from __future__ import annotations

import json

import pytest
import torch  # the test extra pins torch and transformers: a missing one fails, never skips
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from costmodel.verbs.estimate import estimate

MOE_TYPES = ("mixtral", "deepseek_v3")


def hf_counts(fields: dict, batch: int, seq: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward + backward FLOPs) of the transformers model."""
    fields = dict(fields)
    model_type = fields.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    extra = {"experts_implementation": "batched_mm"} if model_type in MOE_TYPES else {}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
    params = sum(p.numel() for p in model.parameters())
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        model(input_ids=ids)
    with FlopCounterMode(display=False) as training:
        model(input_ids=ids, labels=ids).loss.backward()
    return params, forward.get_total_flops(), training.get_total_flops()


def engine_counts(tmp_path, fields: dict, batch: int, seq: int) -> tuple[int, int, int]:
    path = tmp_path / f"{fields['model_type']}-config.json"
    path.write_text(json.dumps(fields))
    r = estimate(str(path), batch=batch, seq=seq)
    return r["params"]["total"], r["flops"]["matmul"]["forward"], r["flops"]["matmul"]["training"]


def check(tmp_path, fields: dict, batch: int = 2, seq: int = 5) -> None:
    assert engine_counts(tmp_path, fields, batch, seq) == hf_counts(fields, batch, seq), fields


def llama_like(model_type: str, **over) -> dict:
    base = {
        "model_type": model_type,
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 50,
        "max_position_embeddings": 64,
        "tie_word_embeddings": False,
    }
    return {**base, **over}


def deepseek(**over) -> dict:
    base = {
        "model_type": "deepseek_v3",
        "hidden_size": 32,
        "intermediate_size": 48,
        "moe_intermediate_size": 12,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 40,
        "max_position_embeddings": 64,
        "q_lora_rank": 16,
        "kv_lora_rank": 8,
        "qk_rope_head_dim": 4,
        "qk_nope_head_dim": 6,
        "v_head_dim": 5,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "tie_word_embeddings": False,
    }
    return {**base, **over}


HAND_PICKED = {
    "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 50, "n_positions": 16},
    "llama-mha": llama_like("llama"),
    "llama-gqa": llama_like("llama", num_key_value_heads=2),
    "llama-mqa-tied": llama_like("llama", num_key_value_heads=1, tie_word_embeddings=True),
    "llama-head-dim-biases": llama_like(
        "llama", head_dim=12, num_key_value_heads=2, attention_bias=True, mlp_bias=True
    ),
    "llama-no-kv-field": {k: v for k, v in llama_like("llama").items() if k != "num_key_value_heads"},
    "mistral-gqa-window": llama_like("mistral", num_key_value_heads=2, sliding_window=3),
    "mistral-head-dim": llama_like("mistral", head_dim=16, num_key_value_heads=1),
    "qwen2-gqa": llama_like("qwen2", num_key_value_heads=2),
    "qwen2-tied-head-dim": llama_like("qwen2", num_key_value_heads=1, head_dim=6, tie_word_embeddings=True),
    "mixtral-e4-top2": llama_like("mixtral", num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "mixtral-e8-top2-tied": llama_like("mixtral", num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=True),
    "deepseek-v3": deepseek(),
    "deepseek-v3-e8-top2-bias": deepseek(n_routed_experts=8, attention_bias=True, n_shared_experts=2),
    "deepseek-v3-no-q-latent-no-dense": deepseek(q_lora_rank=None, first_k_dense_replace=0, num_hidden_layers=2),
    "deepseek-v3-no-shared-tied": deepseek(n_shared_experts=0, tie_word_embeddings=True),
}


@pytest.mark.parametrize("name", sorted(HAND_PICKED))
def test_hand_picked_config_matches_transformers(tmp_path, name):
    check(tmp_path, HAND_PICKED[name])


def sibling_tables(pattern: str, name: str) -> list[dict]:
    """The dict ``name`` of every ``tests/arch`` file matching ``pattern`` (each family group keeps its own)."""
    import importlib.util
    import pathlib

    tables = []
    for path in sorted(pathlib.Path(__file__).parent.glob(pattern)):
        if path == pathlib.Path(__file__):
            tables.append(globals().get(name, {}))
            continue
        spec = importlib.util.spec_from_file_location(f"_checked_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tables.append(getattr(module, name, {}))
    return tables


def test_every_supported_model_type_is_checked():
    """Each family group checks its model types in its own file: ``HAND_PICKED`` configs or ``CHECKED_TYPES``."""
    from costmodel.families import families

    checked = {
        fields["model_type"] for table in sibling_tables("test_hf*.py", "HAND_PICKED") for fields in table.values()
    }
    for types in sibling_tables("test_hf*.py", "CHECKED_TYPES"):
        checked |= set(types)
    supported = {t for fam in families().values() for t in fam.hf_model_types}
    assert supported == checked


@st.composite
def llama_like_configs(draw, model_type: str) -> dict:
    kv = draw(st.sampled_from([1, 2, 4]))
    h = kv * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([2, 4, 6]))
    fields = llama_like(
        model_type,
        num_attention_heads=h,
        num_key_value_heads=kv,
        hidden_size=h * head_dim if draw(st.booleans()) else 24,
        intermediate_size=draw(st.integers(4, 48)),
        num_hidden_layers=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(8, 64)),
        tie_word_embeddings=draw(st.booleans()),
    )
    if fields["hidden_size"] != h * head_dim or draw(st.booleans()):
        fields["head_dim"] = head_dim
    if model_type == "llama":
        fields.update(attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    if model_type == "mixtral":
        experts = draw(st.integers(2, 8))
        fields.update(num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)))
    return fields


@st.composite
def deepseek_configs(draw) -> dict:
    experts = draw(st.integers(2, 8))
    layers = draw(st.integers(1, 3))
    heads = draw(st.integers(1, 4))  # MLA has no separate KV heads: HF wants num_key_value_heads = heads
    return deepseek(
        num_hidden_layers=layers,
        first_k_dense_replace=draw(st.integers(0, layers - 1)),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        n_routed_experts=experts,
        num_experts_per_tok=draw(st.integers(1, experts)),
        n_shared_experts=draw(st.integers(0, 2)),
        q_lora_rank=draw(st.sampled_from([None, 4, 16])),
        kv_lora_rank=draw(st.integers(2, 12)),
        qk_rope_head_dim=draw(st.sampled_from([2, 4])),
        qk_nope_head_dim=draw(st.integers(1, 8)),
        v_head_dim=draw(st.integers(1, 8)),
        moe_intermediate_size=draw(st.integers(2, 16)),
        attention_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
    )


CONFIGS = st.one_of(*(llama_like_configs(t) for t in ("llama", "mistral", "qwen2", "mixtral")), deepseek_configs())


@settings(max_examples=20, deadline=None)
@given(fields=CONFIGS, batch=st.integers(1, 2), seq=st.integers(1, 6))
def test_generated_configs_match_transformers(tmp_path_factory, fields, batch, seq):
    check(tmp_path_factory.mktemp("cfg"), fields, batch, seq)


@pytest.mark.parametrize("model_type", sorted(__import__("costmodel.families.hf", fromlist=["x"]).SAME_STRUCTURE))
def test_same_structure_hint_is_true(tmp_path, model_type):
    """A type without a family of its own that has a supported type's structure: read by that family, a note
    saying so, and transformers' own numbers for the real model type."""
    from costmodel.families.hf import SAME_STRUCTURE

    like = SAME_STRUCTURE[model_type][0]
    fields = llama_like(model_type, num_key_value_heads=2, head_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    assert any(f"counted as '{like}'" in n for n in estimate(str(path))["notes"])
    assert engine_counts(tmp_path, fields, 2, 5) == hf_counts(fields, 2, 5)
    assert engine_counts(tmp_path, {**fields, "model_type": like}, 2, 5) == hf_counts(fields, 2, 5)
