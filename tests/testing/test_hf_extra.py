"""What transformers' modules compute beyond the architecture (``costmodel/testing/hf_extra.py``), against hand
counts and FlopCounterMode itself: the surplus is what FlopCounterMode counts less what the architecture computes.

The architecture's side here is written by hand from the module's shapes (never the engine's numbers).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from costmodel import CostModelError
from costmodel.testing.hf_extra import EXTRAS, conventions, extra, surplus


def build(model_type: str, **fields):
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")


def counted(model, batch: int, seq: int) -> tuple[int, int]:
    """FlopCounterMode over a forward, and over a forward + backward, on meta."""
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    mask = torch.ones(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        model(input_ids=ids, attention_mask=mask)
    with FlopCounterMode(display=False) as training:
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    return forward.get_total_flops(), training.get_total_flops()


MAMBA = {"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 64, "state_size": 4, "expand": 2}
MAMBA.update(conv_kernel=4, time_step_rank=4)


def test_mamba_padded_conv_by_hand():
    # U = expand · d = 64, W = 4, 2 layers, B = 2, T = 5. Forward: the W - 1 = 3 outputs past T,
    # 2 · B · U · W · (W - 1) = 2·2·64·4·3 = 3,072 a layer, 6,144 in all. Forward + backward adds that again
    # (the input gradient) and the weight gradient counted as dense: 2·B·U·W·(U·(T + W - 1) - T) =
    # 2·2·64·4·(64·8 - 5) = 519,168 a layer (tests/arch/test_hf_ssm.py measures the same)
    got = surplus(build("mamba", **MAMBA), {"B": 2, "T": 5})
    assert got == {"flops.matmul.forward": 6_144, "flops.matmul.training": 2 * (2 * 3_072 + 519_168)}


def test_mamba_surplus_is_what_flopcountermode_counts_beyond_a_causal_conv():
    # with the conv's surplus taken off, FlopCounterMode's forward is the architecture's matmuls by hand:
    # per layer in_proj 2·B·T·d·2U, x_proj 2·B·T·U·(R + 2N), dt_proj 2·B·T·R·U, out_proj 2·B·T·U·d,
    # the causal conv 2·B·T·U·W, the scan's readout 2·B·T·U·N; and the LM head 2·B·T·d·V
    model = build("mamba", **MAMBA)
    b, t, d, u, n, r, w, v = 2, 5, 32, 64, 4, 4, 4, 64
    layer = 2 * b * t * (d * 2 * u + u * (r + 2 * n) + r * u + u * d + u * w + u * n)
    forward, _ = counted(model, b, t)
    assert forward - surplus(model, {"B": b, "T": t})["flops.matmul.forward"] == 2 * layer + 2 * b * t * d * v


LLAMA4 = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 16,
    "intermediate_size_mlp": 48,
    "num_local_experts": 4,
    "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 1,
    "vocab_size": 64,
    "max_position_embeddings": 64,
}


def test_llama4_idle_experts_by_hand():
    # 2 MoE layers, E - k = 3 experts no token was routed to, each 3 matrices of d × d_expert = 32 × 16:
    # forward 2 layers · 3 · 6·B·T·d·i = 2·3·6·2·5·32·16 = 184,320; forward + backward 3× that
    got = surplus(build("llama4_text", **LLAMA4), {"B": 2, "T": 5})
    assert got == {"flops.matmul.forward": 184_320, "flops.matmul.training": 3 * 184_320}


def test_llama4_surplus_is_the_difference_top_k_makes():
    # FlopCounterMode counts every expert whatever top_k is: with the surplus taken off, going from top-1 to
    # top-2 adds exactly one expert's 6·B·T·d·i a MoE layer (2·6·2·5·32·16 = 61,440 for the two layers)
    one, two = build("llama4_text", **LLAMA4), build("llama4_text", **{**LLAMA4, "num_experts_per_tok": 2})
    sizes = {"B": 2, "T": 5}
    net = [counted(m, 2, 5)[0] - surplus(m, sizes)["flops.matmul.forward"] for m in (one, two)]
    assert counted(one, 2, 5)[0] == counted(two, 2, 5)[0]
    assert net[1] - net[0] == 2 * 6 * 2 * 5 * 32 * 16


def test_conventions_are_stated_only_where_they_apply():
    assert conventions(build("llama", hidden_size=32, intermediate_size=40, num_hidden_layers=1)) == ()
    assert [c.split(" ")[0] for c in conventions(build("llama4_text", **LLAMA4))] == ["Llama4TextMoe"]
    assert surplus(build("llama", hidden_size=32, num_hidden_layers=1), {"B": 2, "T": 3}) == {
        "flops.matmul.forward": 0,
        "flops.matmul.training": 0,
    }


def test_an_extra_registered_twice_raises():
    name = next(iter(EXTRAS))
    with pytest.raises(CostModelError, match="registered twice"):
        extra(name, "again", lambda m: iter(()))(lambda part, b, t: (0, 0))
