"""The GPT graph against real counting: PyTorch FlopCounterMode and parameter numel.

Counting runs on the ``meta`` device: shapes only, and (unlike CPU tensors in
torch 2.13) scaled_dot_product_attention's matmuls are counted. Causal attention
is counted over the full T×T square there, which is the engine's default.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GPT2Config, GPT2LMHeadModel

from costmodel.verbs.estimate import estimate
from tests.reference_gpt import ReferenceGPT, count


def assert_engine_matches(
    counted: tuple[int, int, int], batch: int, seq: int, d_ff: int | None, **config: object
) -> None:
    """The engine's params and matmul FLOPs equal what PyTorch counted, exactly."""
    if d_ff is not None:
        config["d_ff"] = d_ff
    r = estimate("gpt", batch=batch, seq=seq, settings=config)
    params, forward, forward_backward = counted
    assert r["params"]["total"] == params
    assert r["flops"]["matmul"]["forward"] == forward
    assert r["flops"]["matmul"]["training"] == forward_backward


def hf_gpt2(layers: int, d: int, heads: int, vocab: int, context: int, d_ff: int | None, tied: bool):
    cfg = GPT2Config(
        n_layer=layers,
        n_embd=d,
        n_head=heads,
        vocab_size=vocab,
        n_positions=context,
        n_inner=d_ff,
        tie_word_embeddings=tied,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.device("meta"):
        return GPT2LMHeadModel(cfg)


def hf_count(model, batch: int, seq: int, vocab: int) -> tuple[int, int, int]:
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.randint(0, vocab, (batch, seq), device="meta")
    params = sum(p.numel() for p in model.parameters())
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return params, forward, counter.get_total_flops()


CASES = [  # (layers, d, heads, vocab, context, d_ff, tied, batch, seq)
    (2, 64, 4, 100, 32, None, True, 3, 16),
    (1, 48, 3, 97, 20, 80, False, 2, 20),
    (3, 32, 8, 50, 64, None, False, 1, 7),
]


@pytest.mark.parametrize("layers,d,heads,vocab,context,d_ff,tied,batch,seq", CASES)
def test_hf_gpt2_exact(layers, d, heads, vocab, context, d_ff, tied, batch, seq):
    counted = hf_count(hf_gpt2(layers, d, heads, vocab, context, d_ff, tied), batch, seq, vocab)
    assert_engine_matches(counted, batch, seq, d_ff, L=layers, d=d, h=heads, V=vocab, T_max=context, tied=tied)


@settings(max_examples=6)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 4),
    head_dim=st.integers(1, 16),
    vocab=st.integers(2, 128),
    batch=st.integers(1, 4),
    seq=st.integers(1, 24),
    bias=st.booleans(),
    tied=st.booleans(),
    ff_mult=st.sampled_from([None, 2, 3]),
)
def test_reference_gpt_exact(layers, heads, head_dim, vocab, batch, seq, bias, tied, ff_mult):
    d = heads * head_dim
    d_ff = None if ff_mult is None else ff_mult * d
    with torch.device("meta"):
        model = ReferenceGPT(layers=layers, d=d, heads=heads, vocab=vocab, context=seq, d_ff=d_ff, bias=bias, tied=tied)
    counted = count(model, torch.randint(0, vocab, (batch, seq), device="meta"))
    assert_engine_matches(counted, batch, seq, d_ff, L=layers, d=d, h=heads, V=vocab, T_max=seq, bias=bias, tied=tied)
    assert counted[2] == 3 * counted[1]  # PyTorch too: backward = 2 × forward for matmuls


@pytest.mark.parametrize(
    "name,layers,d,heads",
    [
        ("gpt2-small", 12, 768, 12),
        ("gpt2-medium", 24, 1024, 16),
        ("gpt2-large", 36, 1280, 20),
        ("gpt2-xl", 48, 1600, 25),
    ],
)
def test_gpt2_presets_match_hf_numel(name, layers, d, heads):
    model = hf_gpt2(layers, d, heads, 50257, 1024, None, True)
    assert estimate(name)["params"]["total"] == sum(p.numel() for p in model.parameters())
