"""PaLM 540B's MFU (45.7 % without attention, 46.2 % with) and HFU (57.8 %) from the paper's inputs.

Chowdhery et al. 2022 (PaLM), Sec. 4 / Table 3 and Appendix B: 6144 TPU v4 chips (275 TFLOP/s bf16 peak,
the hardware table's ``tpu-v4``), 238.3K tokens/s at 2048 tokens per sequence, batch 2048; the model: 118
layers, d = 18432, 48 heads of 256, one key/value head (multi-query), SwiGLU d_ff = 4d = 73728, a tied 256k
vocabulary (N = 540.35B). The MFU counts 6N per token (the tied table included: the logits matmul reads it),
plus 12·L·H·Q·T for attention in the 46.2 %; the HFU adds what rematerialisation computes again: every
layer's attention and 75 % of the rest.
"""

from fractions import Fraction

import costmodel

PALM = dict(tied="true", d_head="256", L="118", d="18432", h="48", n_kv="1", d_ff="73728", V="256000")
RUN = dict(batch=2048, seq=2048, hardware="tpu-v4", devices=6144, tokens_per_s=238_300)
PEAK = 6144 * 275 * 10**12  # FLOP/s of the whole job


def _run(**kw):
    return costmodel.estimate("llama", settings=PALM, **RUN, **kw)


def test_mfu_without_and_with_attention():
    r = _run(mfu_basis="6n")
    assert r["params"]["total"] == 540_358_649_856  # PaLM: 540.35B
    assert f"{r['mfu']:.3f}" == "0.457"  # 6N · 238.3K / (6144 · 275e12)
    attn = 12 * 118 * 48 * 256 * 2048  # 12·L·H·Q·T per token
    with_attention = _run(mfu_basis="6n-attention")["mfu"]
    assert abs(with_attention - r["mfu"] - attn * 238_300 / PEAK) < 1e-12
    assert f"{with_attention:.3f}" == "0.462"  # PaLM Table 3


def test_hfu_with_attention_and_three_quarters_of_the_rest_recomputed():
    r = _run(mfu_basis="6n-attention", recompute="selective", recompute_fraction="0.75")
    # PaLM's 57.8 % counts 75 % of the whole 2N forward again, the tied unembedding's 2·V·d per token too;
    # the engine recomputes the layers only (the logits matmul is not rematerialised): 2·V·d·3/4 per token less
    unembedding = Fraction(3, 4) * 2 * 256_000 * 18_432 * 238_300 / PEAK
    assert f"{r['hfu']:.4f}" == "0.5773"
    assert f"{r['hfu'] + float(unembedding):.3f}" == "0.578"
    assert r["mfu"] == _run(mfu_basis="6n-attention")["mfu"]  # recompute is hardware FLOPs, not model FLOPs
