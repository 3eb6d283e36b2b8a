"""Inference of a state-space model: the recurrent state is the cache, and a decode step reads and writes it.

(transformers' cache objects are compared with these numbers in ``tests/arch/test_hf_ssm.py``.)
"""

import sympy

from costmodel import estimate, load, roofline
from costmodel.graph.analysis import evaluate, op_nodes, totals
from costmodel.graph.decode import decode_graph
from costmodel.graph.passes import fuse_elementwise
from costmodel.graph.registry import op_cost, state_bytes
from costmodel.sections.decode import kv_cache_bytes, state_cache_bytes
from costmodel.symbols import B, C, L, d_conv, d_inner, d_state


def test_mamba_state_cache_by_hand():
    G = load("mamba").graph
    # per layer and sequence: the conv's last d_conv inputs in bf16 and the scan's d_state states in fp32
    assert sympy.expand(state_cache_bytes(G) - L * B * d_inner * (2 * d_conv + 4 * d_state)) == 0
    assert kv_cache_bytes(G) == 0  # no attention layer, no KV cache
    # mamba-130m, B = 1, bf16: 24 layers × 1536 channels × (4 inputs × 2 bytes + 16 states × 4 bytes)
    m = estimate("mamba-130m", inference=True, context=4096)["memory_bytes"]
    assert (m["kv_cache"], m["state_cache"]) == (0, 24 * 1536 * (4 * 2 + 16 * 4))


def test_decode_step_reads_and_writes_the_state_whatever_the_context():
    G = load("mamba").graph
    step = totals(decode_graph(G)).forward
    assert not step.bytes.has(C) and not step.flops.has(C)  # nothing of a step grows with the context
    # the state is read and written once per step: the per-sequence bytes hold twice the state cache
    per_sequence = sympy.expand(step.bytes).coeff(B, 1)
    assert sympy.expand(per_sequence - 2 * state_cache_bytes(G) / B).is_positive  # and the activations
    small = estimate("mamba-130m", inference=True, context=1024, hardware="h100-sxm")["time"]
    large = estimate("mamba-130m", inference=True, context=65536, hardware="h100-sxm")["time"]
    assert small["decode_step_s"] == large["decode_step_s"]


def test_decode_summary_reports_the_state():
    r = roofline("mamba-130m", "h100-sxm", decode=True, batch=4, context=8192)["decode"]
    memory = estimate("mamba-130m", inference=True, batch=4, context=8192)["memory_bytes"]
    assert (r["kv_cache_bytes"], r["state_cache_bytes"]) == (0, memory["state_cache"])
    assert r["critical_batch"] is None  # each sequence's state traffic alone is below the ridge
    hybrid = roofline("jamba-v0.1", "h100-sxm", decode=True, batch=2, context=1000)["decode"]
    # Jamba: 4 attention layers keep 2·8·128 bf16 numbers per token; 28 Mamba layers a state
    assert hybrid["kv_cache_bytes"] == 4 * 2 * 2 * 1000 * 8 * 128 * 2
    assert hybrid["state_cache_bytes"] == 28 * 2 * 8192 * (4 * 2 + 16 * 4)


def test_a_fused_decode_step_still_writes_the_state_back():
    m = load("mamba-130m")
    H = fuse_elementwise(decode_graph(m.graph), training=False)
    fused = {name: data["op"] for name, data in op_nodes(H) if state_bytes(data["op"]) != 0}
    assert set(fused) == {"layers.mixer.conv_act", "layers.mixer.gated"}  # conv → silu, scan → gate
    scan = fused["layers.mixer.gated"]
    written = op_cost(scan).forward.bytes_written
    # the gate's output (B·U in bf16) and the scan's state (B·U·N in fp32)
    assert sympy.expand(written - (2 * B * d_inner + state_bytes(scan))) == 0
    assert evaluate(state_bytes(scan), {**m.values, B: 1}) == 1536 * 16 * 4
