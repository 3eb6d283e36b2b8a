"""The `flopcounter` convention is what PyTorch's FlopCounterMode counts (meta device, forward + backward)."""

import pytest
import torch  # the test extra pins torch and transformers: a missing one fails, never skips
import transformers
from torch.utils.flop_counter import FlopCounterMode

from costmodel.families import load
from costmodel.graph.analysis import evaluate
from costmodel.verbs.compare import CONVENTIONS, training_flops


@pytest.mark.parametrize("L, d, h, V, T, B", [(2, 64, 4, 100, 32, 2), (3, 96, 6, 257, 48, 1)])
def test_flopcounter_convention_matches_flopcountermode(L, d, h, V, T, B):
    cfg = transformers.GPT2Config(
        n_layer=L,
        n_embd=d,
        n_head=h,
        vocab_size=V,
        n_positions=T,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.zeros((B, T), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(ids, labels=ids).loss.backward()
    m = load("gpt", {"L": L, "d": d, "h": h, "V": V, "T_max": T, "T": T})
    ours = evaluate(training_flops(m.graph, CONVENTIONS["flopcounter"]), {**m.values, "B": B})
    assert ours == counter.get_total_flops()
