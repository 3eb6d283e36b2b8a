"""Which operand of an op is a weight is the op registry's knowledge (``rule(kind, weight_operand=...)``).

Regression tests for the mixture-of-experts ``routed_matmul``, whose expert weights analyses once missed
because each kept its own list of weighted kinds: element-wise fusion, quantisation scales, the inference
working set, the training peak, freezing and LoRA. Golden numbers are written as arithmetic.
"""

import json

import pytest
import sympy

from costmodel import load
from costmodel.cli import main
from costmodel.graph.analysis import evaluate, totals
from costmodel.graph.cost import OpCost, Saved
from costmodel.graph.finetune import freeze, lora
from costmodel.graph.passes import fuse_elementwise
from costmodel.graph.registry import KINDS, Op, data_operands, has_weight, op_cost, rule, weight_operand
from costmodel.graph.rules import contraction, elements_of, matrix
from costmodel.kit import GraphBuilder
from costmodel.kit import symbols as s
from costmodel.memory.inference import inference_weights, working_set
from costmodel.memory.states import model_state
from costmodel.options import Counting

B, T, d, h, L, V = s.B, s.T, s.d, s.h, s.L, s.V
E, K, F, n_kv = s.n_experts, s.top_k, s.d_ff, s.n_kv
MIXTRAL = load("mixtral").graph
ROUTE = (("experts", "e"), ("route", "r"))


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def routed(attrs=()):
    return Op(
        "routed_matmul",
        "b t d, e d f -> b t r f",
        (("b", B), ("t", T), ("d", d), ("e", E), ("r", K), ("f", F)),
        "bf16",
        tuple(sorted(ROUTE + attrs)),
    )


def test_registry_names_the_weight_operand():
    sizes = (("b", B), ("d", d), ("f", F), ("v", V))
    assert weight_operand(Op("matmul", "b d, d f -> b f", sizes)) == 1
    assert weight_operand(Op("gather", "b, v d -> b d", sizes)) == 1
    assert weight_operand(routed()) == 1
    assert not has_weight(Op("contraction", "b d, f d -> b f", sizes))
    assert not has_weight(Op("softmax", "b f -> b f", sizes))
    assert data_operands(routed()) == (("b", "t", "d"),)


# A kind registered with its weight *first*: every analysis finds the weight through the registry.
if "test_weight_first" not in KINDS:

    @rule("test_weight_first", weight_operand=0)
    def _weight_first(op, conventions):
        w, x = op.parsed.inputs
        y = op.parsed.output
        return OpCost(
            contraction(op, (x, w), y),
            contraction(op, (y, w), x) + contraction(op, (x, y), w),
            (matrix(op, w, y),),
            (Saved("input", "input0", elements_of(op, x), op.dtype),),
        )


def test_a_new_weighted_kind_is_a_weight_everywhere():
    b = GraphBuilder("weight-first", b=B, d=d, f=F)
    y = b.op("fc", "test_weight_first", [b.input("x", "b d", dtype="bf16")], "d f, b d -> b f")
    b.elementwise("relu", "relu", y, "b f")
    G = b.graph
    # relu reads and writes b·f = 1·8 bf16 elements; fc's 4×8 weight is no activation (fc: (4 + 8) × 2 = 24)
    cands, labels = working_set(G)
    sizes = [evaluate(c, {B: 1, d: 4, F: 8}) for c in cands]
    assert (max(sizes), labels[sizes.index(max(sizes))]) == (2 * (8 + 8), "relu")
    H = fuse_elementwise(G)
    assert totals(H).forward.flops == totals(G).forward.flops == 2 * B * d * F + B * F  # the matmul, then relu
    assert totals(H).params == d * F
    assert weight_operand(H.nodes["relu"]["op"]) == 0  # a fused op's weight is its first part's
    assert data_operands(H.nodes["relu"]["op"]) == (("b", "d"),)


def test_fused_moe_keeps_flops_params_and_active():
    for training in (True, False):
        fused, plain = totals(fuse_elementwise(MIXTRAL, training=training)), totals(MIXTRAL)
        assert sympy.expand(fused.forward.flops - plain.forward.flops) == 0
        assert sympy.expand(fused.backward.flops - plain.backward.flops) == 0
        assert fused.params == plain.params
        # what one token uses, per layer: q and o (d·d each), k and v (d·d·n_kv/h each), the router (d·n_e),
        # top_k of the SwiGLU experts (3·d·d_ff each), two RMSNorm gains; then the final norm, embedding, unembedding
        active = L * (2 * d**2 + 2 * d**2 * n_kv / h + d * E + 3 * d * F * K + 2 * d) + d + 2 * V * d
        assert sympy.expand(fused.params_active - active) == 0


def test_active_params_do_not_depend_on_which_flops_count():
    plain = totals(MIXTRAL).params_active
    for conventions in (Counting(elementwise="none"), Counting(elementwise="softmax")):
        assert totals(MIXTRAL, conventions).params_active == plain  # 6ND's N is the active N


@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v3"])
def test_fused_decode_roofline_of_moe_runs(capsys, model):
    plain = run_json(capsys, "roofline", model, "--hardware", "h100-sxm", "--decode", "--context", "4096")
    fused = run_json(capsys, "roofline", model, "--hardware", "h100-sxm", "--fuse", "--decode", "--context", "4096")
    assert fused["total"]["flops"] == plain["total"]["flops"]  # fusion moves bytes, never FLOPs
    assert fused["total"]["bytes"] < plain["total"]["bytes"]
    assert fused["decode"]["weights_bytes"] == plain["decode"]["weights_bytes"]  # every expert is still read


def test_quantised_scales_count_every_expert():
    # int8: one fp16 scale (2 bytes) per output row. Per layer: q and o have d rows, k and v d·n_kv/h each,
    # the router n_e; each of the n_e experts has gate and up (d_ff rows each) and down (d rows). Then lm_head: V.
    per_layer = 2 * d + 2 * d * n_kv / h + E + E * (2 * F + d)
    assert sympy.expand(inference_weights(MIXTRAL, "int8")["scales"] - 2 * (L * per_layer + V)) == 0


def test_scales_of_stacked_experts_are_n_experts_times_one_matrix():
    def scales(pattern, attrs):
        b = GraphBuilder("one", b=B, t=T, d=d, e=E, r=K, f=F)
        b.op("w", "routed_matmul" if attrs else "matmul", [b.input("x", "b t d", dtype="bf16")], pattern, attrs=attrs)
        return inference_weights(b.graph, "int4")["scales"]

    dense = scales("b t d, d f -> b t f", None)
    assert dense == F * sympy.ceiling(d / 128) * 4  # int4: 4 bytes (scale + zero point) per 128 inputs of each row
    assert scales("b t d, e d f -> b t r f", dict(ROUTE)) == E * dense


def test_moe_inference_activations_at_one_token_hold_no_weight(capsys):
    r = run_json(capsys, "estimate", "mixtral-8x7b", "--inference", "--seq", "1", "--context", "1")
    # the largest op at one token: SwiGLU's gated = silu(gate) · up, two inputs and one output of top_k · d_ff
    # bf16 elements: 3 × 2 × 14336 × 2 bytes (an expert stack e d i would be 8 × 4096 × 14336 × 2 = 939,524,096)
    assert r["memory_bytes"]["activations"] == 3 * 2 * 14336 * 2
    assert r["memory"]["working_set_at"] == "layers.mlp.gated"


def test_moe_training_peak_holds_no_expert_weight_transient(capsys):
    m = run_json(capsys, "estimate", "mixtral-8x7b", "--seq", "1")["memory_bytes"]
    assert m["peak"] - m["total"] < 4096 * 14336 * 2  # less than one expert matrix (the bug added eight)


def test_frozen_routed_matmul_has_no_weight_gradient():
    trainable, frozen = op_cost(routed()), op_cost(routed((("trainable", False),)))
    one = 2 * B * T * K * d * F  # a multiply-add per routed copy (r of them) of every token, per d × f
    assert (trainable.forward.flops, trainable.backward.flops) == (one, 2 * one)  # input and weight gradient
    assert (frozen.forward.flops, frozen.backward.flops) == (one, one)  # input gradient only
    assert frozen.params == trainable.params == E * d * F
    assert frozen.active == trainable.active == K * d * F
    matmul = Op("matmul", "b d, d f -> b f", (("b", B), ("d", d), ("f", F)), "bf16", (("trainable", False),))
    assert frozen.saved == op_cost(matmul).saved == ()  # the input is kept only for the weight gradient
    assert frozen.backward.bytes_written < trainable.backward.bytes_written  # no expert gradients written


def test_lora_and_freeze_leave_moe_experts_frozen():
    # per layer, the adapter of q: A is d × 8, B is 8 × (g·m·k = d); nothing else trains
    assert model_state(lora(MIXTRAL, ["*.q"], 8))["trainable"] == 16 * L * d
    frozen = model_state(freeze(MIXTRAL))
    assert frozen["trainable"] == 0 and frozen["frozen"] == totals(MIXTRAL).params
    experts = freeze(MIXTRAL, ["*.mlp.gate", "*.mlp.up", "*.mlp.down"])
    # the three expert matmuls lose their weight gradients: 2 · B·T·top_k · d·d_ff FLOPs each, per layer
    assert (
        sympy.expand(totals(MIXTRAL).backward.flops - totals(experts).backward.flops) == L * 3 * 2 * B * T * K * d * F
    )
    assert model_state(experts)["frozen"] == L * 3 * E * d * F
