"""The measurement harness (``memtracker.py``): what MemTracker reports for a step of a small model, in closed
form, so that the engine's comparisons below read a known instrument.

torch is optional here: without it the module is skipped (CI has it).
"""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.memtracker import Setting, config, measure

# llama(): V 512, d 64, d_ff 160, L 2, 4 heads of 16, 2 KV heads, untied: the parameter count
# embed + lm_head 2·512·64 + L·(q 64·64 + k, v 2·64·32 + o 64·64 + 3·64·160 + 2 norms 64) + final norm 64
PARAMS = 2 * 512 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 160 + 2 * 64) + 64
TENSORS = 2 + 2 * 9 + 1  # embed, lm_head; per layer q k v o gate up down and 2 norms; the final norm


def test_states_under_autocast_are_fp32():
    r = measure(config("llama"), Setting())
    assert PARAMS == 151_872
    assert r["breakdown"]["PARAM"] == 4 * PARAMS
    # AdamW: fp32 m and v, and torch's 0-dim fp32 step per tensor
    assert r["breakdown"]["OPT"] == 8 * PARAMS + 4 * TENSORS
    # the peak is the second iteration's backward: no gradient yet (zero_grad sets them to None)
    assert r["phase"][:2] == (1, "backward") and r["breakdown"]["GRAD"] == 0


def test_pure_bf16_keeps_bf16_moments():
    r = measure(config("llama"), Setting(precision="pure"))
    assert r["breakdown"]["PARAM"] == 2 * PARAMS
    assert r["breakdown"]["OPT"] == 4 * PARAMS + 4 * TENSORS  # m and v in bf16, the step counters fp32


def test_resident_gradients():
    """set_to_none=False and gradient accumulation keep every gradient through the next backward."""
    for s in (Setting(set_to_none=False), Setting(micro_batches=2)):
        r = measure(config("llama"), s)
        assert r["breakdown"]["GRAD"] == 4 * PARAMS and r["phase"][:2] == (1, "backward")


GPT2_TENSORS = 2 + 2 * 12 + 2  # wte, wpe; per layer 6 weights and 6 biases; ln_f's weight and bias


@pytest.mark.parametrize("impl, temporary", [("foreach", 4), ("fused", 0)])
def test_the_step_temporary(impl, temporary):
    """GPT-2 with 4096 positions: a large wpe table and small activations (T = 8) put the peak in ``step()``
    under foreach, which allocates one fp32 copy of a state (4 bytes × N) there; fused allocates nothing."""
    r = measure(config("gpt2"), Setting(optimizer_impl=impl, seq=8))
    n = r["breakdown"]["PARAM"] // 4
    assert r["breakdown"]["OPT"] == 8 * n + 4 * GPT2_TENSORS + temporary * n
    assert r["phase"][1] == ("optimizer step" if impl == "foreach" else "backward")
