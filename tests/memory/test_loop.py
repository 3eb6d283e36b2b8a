"""The training loop's tensors (``costmodel.memory.loop``) and the peak's categories, from the graph (no torch).

MemTracker's side of each rule is in ``test_memtracker.py`` (what torch allocates) and ``test_peak_memtracker.py``.
"""

import pytest
import sympy

import costmodel
from costmodel import Options, load
from costmodel.memory.loop import grads_by_op, step_temporary
from costmodel.symbols import L, V, d

GPT = {"L": 2, "d": 64, "h": 4, "V": 512, "T_max": 128}


def test_a_tied_gradient_is_born_at_the_unembedding():
    """GPT's unembedding reads the token table through a tie: its gradient (V·d × 2 bytes in bf16) appears at
    ``lm_head``'s backward, the first of the table's two users backward reaches, not at ``wte``'s."""
    G = load("gpt").graph
    g = grads_by_op(G, "bf16-mixed")
    assert g["lm_head"] == 2 * V * d
    assert "wte" not in g  # its whole gradient moved to the unembedding
    assert sympy.expand(g["layers.mlp.fc"] - 2 * L * (4 * d * d + 4 * d)) == 0  # weight and bias, every layer


def test_the_step_temporary_by_path():
    G = load("gpt").graph
    n = costmodel.estimate("gpt", settings=GPT, seq=64)["params"]["total"]
    values = {sympy.Symbol(k, positive=True, integer=True): v for k, v in GPT.items()}
    foreach = step_temporary(G, "bf16-mixed", "adamw", "foreach")
    assert foreach.xreplace(values) == 4 * n  # one fp32 copy of a state
    assert step_temporary(G, "bf16-mixed", "adamw", "fused") == 0
    assert step_temporary(G, "bf16-pure", "adamw", "forloop").xreplace(values) == 2 * 2 * 512 * 64  # 2 × wte, bf16
    assert step_temporary(G, "bf16-mixed", "sgd", "foreach") == 0  # no state, nothing to divide


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"implementation": "transformers"},
        {"implementation": "transformers", "precision": "bf16-autocast", "recompute": "full"},
        {"implementation": "transformers", "optimizer_impl": "forloop", "batch": 1, "seq": 8},
        {"implementation": "transformers", "grads_resident": True},
    ],
)
def test_the_breakdown_sums_to_the_peak_and_names_its_phase(options):
    r = costmodel.estimate("gpt", settings=GPT, **{"batch": 2, "seq": 64, **options})
    mem = r["memory_bytes"]
    assert sum(mem["peak_breakdown"].values()) == mem["peak"]
    at, phase = r["memory"]["peak_at"], r["memory"]["peak_phase"]
    assert phase == at or at.startswith(phase + " of ")
    if options.get("implementation") == "transformers" and not options.get("grads_resident"):
        # no gradient in forward; all of them at the step
        expected = {"forward": 0, "optimizer step": mem["grads"]}.get(phase, mem["peak_breakdown"]["grads"])
        assert mem["peak_breakdown"]["grads"] == expected


def test_the_fused_implementation_keeps_its_reading():
    """``fused``: gradients resident, a fused step: the peak is the states plus the walk's activations, as before."""
    r = costmodel.estimate("gpt", settings=GPT, batch=2, seq=64)
    mem = r["memory_bytes"]
    assert mem["peak_breakdown"]["grads"] == mem["grads"]
    assert r["memory"]["peak_phase"] in ("forward", "backward")


def test_options_take_the_implementations_defaults():
    assert Options.make().optimizer_impl == "fused" and Options.make().grads_kept
    t = Options.make(implementation="transformers")
    assert t.optimizer_impl == "foreach" and not t.grads_kept
    assert Options.make(t, implementation="fused").optimizer_impl == "fused"  # the default follows
    assert Options.make(t, micro_batch=1).grads_kept  # accumulation
    assert Options.make(implementation="transformers", optimizer_impl="forloop").optimizer_impl == "forloop"
    with pytest.raises(costmodel.CostModelError):
        Options.make(optimizer_impl="loop")
