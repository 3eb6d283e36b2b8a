"""Published FLOP counts and activation bytes, reproduced from their sources' inputs (issue 14).

Each expected value is the source's own arithmetic, written out; the engine's number comes from the graph
under the named convention (:mod:`costmodel.conventions`), never from the same formula.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

import costmodel


def _compare(model: str, convention: str, settings=None, **options) -> dict:
    r = costmodel.compare(model, convention, settings=settings, options=costmodel.Options.make(**options))
    return r["conventions"][convention]


def test_gpt3_small_6nd_total():
    # Brown et al. 2020, Table D.1: GPT-3 Small, 125M parameters (embeddings included) × 300B tokens × 6 = 2.25e20
    row = _compare("gpt3-small", "6nd-total", tokens=300 * 10**9)
    assert row["flops.training_total"] == 6 * 125_226_240 * 300 * 10**9  # every parameter of the preset
    assert f"{row['flops.training_total']:.3g}" == "2.25e+20"


def test_llama3_405b_6nd_total():
    # Llama Team 2024, Sec. 3.1: 405B parameters × 15.6T tokens × 6 = 3.8e25 FLOPs
    row = _compare("llama3-405b", "6nd-total", tokens=15_600 * 10**9)
    assert row["flops.training_total"] == 6 * 405_853_388_800 * 15_600 * 10**9
    assert f"{row['flops.training_total']:.2g}" == "3.8e+25"


def test_palm_8b_flops_per_token():
    # Chowdhery et al. 2022, Appendix B / Table 22: PaLM 8B (L = 32, d = 4096, 16 heads of Q = 256, one kv head,
    # SwiGLU d_ff = 16384, V = 256k, tied unembedding) at T = 2048: 6N + 12·L·H·Q·T = 5.5e10 FLOPs per token,
    # N = 8.63B counting the shared embedding, which the logits matmul reads.
    settings = dict(tied="true", d_head="256", L="32", d="4096", h="16", n_kv="1", d_ff="16384", V="256000", T="2048")
    row = _compare("llama", "palm", settings=settings)
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 256 + 3 * 4096 * 16384 + 2 * 4096  # q, o; k, v; SwiGLU; norm gains
    N = 32 * per_layer + 4096 + 256000 * 4096  # + the final norm + the shared table
    assert f"{N:.3g}" == "8.63e+09"
    assert row["flops.training"] == 6 * N * 2048 + 12 * 32 * 16 * 256 * 2048 * 2048
    assert f"{row['flops.training'] / 2048:.2g}" == "5.5e+10"


def test_nanogpt_estimate_mfu_matches_transformers_count():
    # karpathy/nanoGPT model.py: estimate_mfu's flops_per_token = 6N + 12·L·H·Q·T, N = get_num_params() (every
    # parameter but the position table); N read off transformers' GPT-2 (tied), built on the meta device.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(cfg)
    N = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    row = _compare("gpt2-small", "nanogpt")
    assert row["flops.training"] == (6 * N + 12 * 12 * 12 * 64 * 1024) * 1024
    # nanoGPT's GPT.__init__ prints "number of parameters: %.2fM" % (get_num_params()/1e6): 123.65M for GPT-2
    assert row["params.convention"] == N == 123_653_376 and f"{N / 1e6:.2f}M" == "123.65M"
    # palm and nanogpt agree on a tied GPT-2 (N = non-embedding + the tied table = all but the positions)
    assert _compare("gpt2-small", "palm")["flops.training"] == row["flops.training"]


def test_kaplan_strict_table_1():
    # Kaplan et al. 2020, Table 1: N = 2·d_model·n_layer·(2·d_attn + d_ff) (no biases, no norm gains) and
    # C_forward = 2N + 2·n_layer·n_ctx·d_attn + 4·d_model (its Embed row) per token; training 3 × forward
    d, L, T = 768, 12, 1024
    N = 2 * d * L * (2 * d + 4 * d)
    assert N == 84_934_656
    row = _compare("gpt2-small", "kaplan-strict")
    assert row["flops.training"] == 3 * (2 * N + 2 * L * T * d + 4 * d) * T
    assert row["params.convention"] == N  # the convention's N, printed beside its count


def test_megatron_core_moe_formula():
    # NVIDIA/Megatron-LM training.py num_floating_point_operations (core_r0.8.0), Mixtral 8x7B at s = 4096:
    # 12·B·s·L·h²·((1 + g/a + s/h)·q/h + f/h·k·3/2 + V/(2·L·h)); no router term, the full attention square
    h, a, g, L, f, k, V, s = 4096, 32, 8, 32, 14336, 2, 32000, 4096
    ref = (
        12
        * s
        * L
        * h
        * h
        * ((1 + Fraction(g, a) + Fraction(s, h)) + Fraction(f, h) * k * Fraction(3, 2) + Fraction(V, 2 * L * h))
    )
    assert _compare("mixtral-8x7b", "megatron-core", seq=s)["flops.training"] == ref


def test_megatron_core_causal_formula():
    # NVIDIA/Megatron-LM training.py num_floating_point_operations at commit 001b00c2 (transformer_flops): the core
    # attention term is query_projection_size · seq_length / 2 · 2 ("causal mask (only half of the mask is
    # non-zero)"), no router term. Per token, 6 × (h·(q + k + v) + q·s/2·2 + q·h) per layer, the experts' 6·h·f·3·k,
    # the logits' 6·h·V; Mixtral 8x7B (q = 4096, k = v = 1024) at s = 4096, batch 1
    h, L, f, k, V, s, kv = 4096, 32, 14336, 2, 32000, 4096, 1024
    attn = 6 * (h * (h + kv + kv) + h * s // 2 * 2 + h * h)
    per_token = L * (attn + 6 * h * f * 3 * k) + 6 * h * V
    assert _compare("mixtral-8x7b", "megatron-core-causal", seq=s)["flops.training"] == s * per_token


def test_korthikanti_table_2_per_layer_activations():
    # Korthikanti et al. 2022, Table 2 (16-bit activations, 1-byte dropout masks, no norm statistics):
    # no parallelism sbh(34 + 5as/h); tensor parallel t: sbh(10 + 24/t + 5as/(ht)); with sequence parallel
    # sbh(34/t + 5as/(ht))
    s, b, h, a = 1024, 2, 768, 12
    settings = {"dropout_p": "true", "L": "4", "d": str(h), "h": str(a), "V": "64", "T": str(s), "T_max": str(s)}

    def per_layer(**kw) -> int:
        r = costmodel.estimate(
            "gpt", settings=settings, options=costmodel.Options.make(batch=b, norm_stats=False, **kw)
        )
        return r["memory_bytes"]["activations_per_layer"]

    assert per_layer() == s * b * h * (34 + 5 * a * s // h)
    for t in (2, 4):
        assert per_layer(tp=t) == s * b * h * (10 + 24 // t) + 5 * a * s * s * b // t
        assert per_layer(tp=t, megatron_sp=True) == s * b * h * 34 // t + 5 * a * s * s * b // t
