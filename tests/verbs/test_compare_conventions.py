"""Named conventions, derived from one graph, against each paper's own published formula."""

import pytest
import sympy

from costmodel import CostModelError, Counting
from costmodel.cli import main
from costmodel.families import load
from costmodel.symbols import B, L, T, T_max, V, d, h
from costmodel.verbs.compare import CONVENTIONS, compare, convention, difference, training_flops

G = load("gpt").graph  # GPT-2/3: learned positions, biases, tied unembedding; head dim k = d/h
N = sympy.expand(12 * L * d**2 + 13 * L * d + 2 * d)  # non-embedding params: 12d² + 13d per layer, final LN 2d


def flops(name):
    return training_flops(G, CONVENTIONS[name])


def test_non_embedding_params_are_what_the_formulas_call_n():
    from costmodel.kit import totals

    assert totals(G).params_non_embedding == N


def test_6nd():
    # Kaplan et al. 2020, Sec. 2.1: C ≈ 6N per training token
    assert flops("6nd") == sympy.expand(6 * N * B * T)


def test_kaplan_table_1():
    # Kaplan et al. 2020, Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn per token (d_attn = d), training = 3×
    assert flops("kaplan") == sympy.expand(3 * (2 * N + 2 * L * T * d) * B * T)


def test_palm_appendix_b():
    # Chowdhery et al. 2022, Appendix B: 6N + 12·L·H·Q·T per token, H·Q = d (also torchtitan, nanoGPT). PaLM's
    # N counts its shared input-output embedding, which the logits matmul reads: GPT's tied table V·d is in it
    # (issue 14: without it PaLM's 8B count comes out 11 % low)
    H, Q = h, d / h
    assert flops("palm") == sympy.expand((6 * (N + V * d) + 12 * L * H * Q * T) * B * T)


def test_megatron_appendix_with_recompute():
    # Narayanan et al. 2021, Appendix: 96·B·s·l·h²(1 + s/6h + V/16lh) with activation recomputation;
    # without it the same count is 72·B·s·l·h²(1 + s/6h + V/12lh)
    assert flops("megatron") == sympy.expand(96 * B * T * L * d**2 * (1 + T / (6 * d) + V / (16 * L * d)))
    no_recompute = CONVENTIONS["flopcounter"]
    assert training_flops(G, no_recompute) == sympy.expand(72 * B * T * L * d**2 * (1 + T / (6 * d) + V / (12 * L * d)))


def test_megatron_with_causal_attention_halved():
    # the same count with the T/6d attention term halved: 96·B·T·L·d²(1 + T/12d + V/16Ld)
    assert flops("megatron-causal") == sympy.expand(96 * B * T * L * d**2 * (1 + T / (12 * d) + V / (16 * L * d)))


def test_chinchilla_appendix_f():
    # Hoffmann et al. 2022, Appendix F, forward FLOPs of one sequence (key_size × heads = d, ffw_size = 4d):
    k, ff = d / h, 4 * d
    embeddings = 2 * T * V * d
    attention = (
        2 * 3 * T * d * (k * h) + 2 * T * T * (k * h) + 3 * h * T * T + 2 * T * T * (k * h) + 2 * T * (k * h) * d
    )
    dense = 2 * T * (d * ff + d * ff)
    logits = 2 * T * d * V
    forward = embeddings + L * (attention + dense) + logits
    paper = 3 * forward * B  # backward = 2 × forward
    # GPT also has a learned position table: as a one-hot matmul (t, p d -> t d) it adds 3 × 2·T·T_max·d per step
    assert sympy.expand(flops("chinchilla") - paper) == 6 * T * T_max * d


def test_engine_is_the_default_count_and_differences_are_exact():
    from costmodel.kit import totals

    assert flops("engine") == totals(G).training.flops
    # the attention term (full square) and the tied unembedding's 6·V·d per token, which 6ND leaves out
    assert difference(G, "palm", "6nd") == 12 * B * L * T**2 * d + 6 * B * T * V * d
    assert difference(G, "palm", "kaplan") == 6 * B * L * T**2 * d + 6 * B * T * V * d  # Kaplan: causal half
    rows = compare(G, ["6nd", "palm"])
    assert rows["palm"]["per_token_minus_first"] == 12 * L * T * d + 6 * V * d


def test_recompute_keeps_only_block_inputs():
    q = compare(G, ["megatron"])["megatron"]
    # each layer keeps its input (B·T·d in bf16); what lies outside the layers is kept as without recompute
    outside = sympy.expand(q["memory_bytes.activations"] - 2 * B * T * d * L)
    assert not outside.has(L)


def test_conventions_validate():
    with pytest.raises(CostModelError, match="elementwise must be one of"):
        Counting(elementwise="some")
    with pytest.raises(CostModelError, match="softmax_flops"):
        Counting(softmax_flops=(5,))
    with pytest.raises(CostModelError, match="did you mean 'kaplan'"):
        convention("kaplen")


def test_cli_compare(capsys):
    assert main(["compare", "gpt3-175b", "--tokens", "3e11", "--conventions", "6nd,palm,megatron"]) == 0
    out = capsys.readouterr().out
    assert "palm" in out and "12*L*T*d" in out
    assert main(["compare", "gpt3-175b", "--conventions", "6nd,nope"]) == 2
    assert "unknown convention 'nope'" in capsys.readouterr().err


def test_cli_compare_json_numbers(capsys):
    import json

    assert main(["compare", "gpt3-175b", "--tokens", "3e11", "--conventions", "6nd", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["conventions"]["6nd"]
    assert r["flops.training_total"] == 6 * 173_961_535_488 * 300_000_000_000  # 6 N D, N non-embedding


@pytest.mark.parametrize("name", list(CONVENTIONS))
def test_fusing_attention_changes_no_convention(name):
    # FlashAttention computes the same FLOPs (its score recompute is kept out of flops)
    from costmodel.graph.passes import flash_attention

    assert training_flops(flash_attention(G), CONVENTIONS[name]) == flops(name)
