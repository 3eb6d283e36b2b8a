"""Issue 29, item 4: attention efficiency per fused kernel (--attention-kernel flash2|flash3|cudnn|sdpa), from
published measurements: on an H100 FlashAttention-2 reaches 35 % of the dense peak, FlashAttention-3 75 %, cuDNN
60 % (Shah et al. 2024, arXiv:2407.08608: abstract and Fig. 5). Hand arithmetic below."""

from __future__ import annotations

from fractions import Fraction

import pytest

import costmodel
from costmodel import CostModelError
from costmodel.devices.attention import with_attention
from costmodel.devices.table import device

# llama3-8b at T = 8192, one sequence per device: a causal fused kernel does half the square. Per layer:
# forward 2·h·T²·d_h (scores and context, halved) = 2 · 32 · 8192² · 128 = 549,755,813,888 FLOPs; backward twice
# that, 1,099,511,627,776, plus the scores recomputed (274,877,906,944) and their softmax (14 FLOPs a score
# over 32 · 8192² / 2 scores: 15,032,385,536), 289,910,292,480 — all at the attention rate. 32 layers.
ATTENTION_FLOPS = 32 * (549_755_813_888 + 1_099_511_627_776 + 289_910_292_480)
PEAK, SUSTAINED = Fraction("989.4e12"), Fraction("0.72")


def compute(kernel=None, hardware="h100-sxm"):
    o = dict(batch=8, dp=8, seq=8192, flash=True, hardware=hardware)
    r = costmodel.estimate("llama3-8b", **o, **({"attention_kernel": kernel} if kernel else {})).to_dict()
    return r["time"]


def test_each_kernel_at_its_measured_share_of_peak():
    fa2, fa3, cudnn, default = compute("flash2"), compute("flash3"), compute("cudnn"), compute()
    # compute-bound at this length, so only the attention kernels' time moves: F · (1/η₂ − 1/η₃) / (P · sustained)
    expected = ATTENTION_FLOPS * (1 / Fraction("0.35") - 1 / Fraction("0.75")) / (PEAK * SUSTAINED)
    assert fa2["compute_s"] - fa3["compute_s"] == pytest.approx(float(expected), rel=1e-9)  # 0.1327 s
    expected = ATTENTION_FLOPS * (1 / Fraction("0.55") - 1 / Fraction("0.60")) / (PEAK * SUSTAINED)
    assert default["compute_s"] - cudnn["compute_s"] == pytest.approx(float(expected), rel=1e-9)  # the table's 0.55
    assert fa3["attention_kernel"] == "flash3" and "Shah et al. 2024" in fa3["attention_source"]
    assert "attention_kernel" not in default  # the default keeps the device's share and says nothing new
    assert compute("sdpa")["compute_s"] == fa2["compute_s"]  # PyTorch's flash backend is FlashAttention-2


def test_where_a_kernel_was_not_measured_or_does_not_run():
    dev, why = with_attention(device("b200"), "flash2")
    assert dev.attained.attention == device("b200").attained.attention and "not measured on b200" in why
    with pytest.raises(CostModelError, match="does not run on a100-80gb"):
        compute("flash3", "a100-80gb")


def test_a_fused_kernel_implies_fused_attention():
    o = costmodel.Options.make(attention_kernel="flash3", hardware="h100-sxm")
    assert o.attention == "flash" and o.flash
    with pytest.raises(CostModelError, match="fused kernel"):
        costmodel.Options.make(attention_kernel="flash3", attention="unfused", hardware="h100-sxm")
    with pytest.raises(CostModelError, match="attention_kernel"):
        costmodel.Options.make(attention_kernel="flash4", hardware="h100-sxm")
