"""Memory formulas derived by the engine: Korthikanti et al. 2022, the ZeRO paper, policies, layouts, fit.

Golden numbers are written as arithmetic with their reasons; relations are
checked as properties.
"""

import json

import sympy

from costmodel import estimate, load
from costmodel.cli import main
from costmodel.formulas.quantities import roundup
from costmodel.graph.passes import flash_attention
from costmodel.kit import evaluate
from costmodel.kit import symbols as s
from costmodel.memory.activations import activations, per_iteration
from costmodel.memory.inference import inference_weights
from costmodel.memory.parallel import activation_share, communication, weight_share, zero_shard
from costmodel.memory.peak import peak
from costmodel.memory.states import bytes_per_param, model_state, model_state_bytes, weights
from costmodel.options import Layout
from costmodel.sizes import parse_memory as parse_size
from costmodel.verbs.fit import fit

B, T, d, h, L, V = s.B, s.T, s.d, s.h, s.L, s.V
GPT3 = load("gpt", {"dropout_p": True}).graph  # the GPT-3 recipe: bf16 activations, dropout on


def layer_bytes(G, recompute="none"):
    """(activations + dropout masks, LayerNorm statistics) one layer keeps."""
    parts = per_iteration(G, "layers", recompute)
    return sympy.expand(parts.get("activation", 0) + parts.get("mask", 0)), parts.get("stats", 0)


# --- Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), eq. 1-2 --------
# s = T, b = B, h = d, a = heads. Per layer: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorm inputs 4sbh.


def test_korthikanti_per_layer_no_recompute():
    kept, stats = layer_bytes(GPT3)
    assert kept == sympy.expand(T * B * d * (34 + 5 * h * T / d))
    assert stats == 2 * (2 * B * T) * 4  # two LayerNorms × (mean, rstd) × fp32, which the paper leaves out


def test_korthikanti_selective_and_full():
    assert layer_bytes(GPT3, "selective")[0] == 34 * T * B * d  # the 5as²b term recomputed
    assert layer_bytes(GPT3, "full") == (2 * T * B * d, 0)  # only the layer input, 2sbh


def test_korthikanti_without_dropout_and_with_flash():
    no_dropout = load("gpt").graph
    # no masks: 3 × sbh (two residual dropouts + ... ) gone, and the attention keeps only the softmax output
    assert layer_bytes(no_dropout)[0] == sympy.expand(32 * T * B * d + 2 * h * T**2 * B)
    kept, stats = layer_bytes(flash_attention(GPT3))
    assert kept == 34 * T * B * d  # FlashAttention: no T² term, the dropout mask regenerated
    assert stats == 16 * B * T + 4 * B * h * T  # + one fp32 log-sum-exp per query row and head


def test_korthikanti_tensor_and_sequence_parallel():
    t = 8
    tensors = [k for k in activations(GPT3).tensors.values() if k.savers[0].startswith("layers.")]
    for megatron_sp, expected in ((False, 10 + sympy.Rational(24, t)), (True, sympy.Rational(34, t))):
        layout = Layout(tp=t, megatron_sp=megatron_sp)
        kept = sum(
            k.bytes / L * activation_share(GPT3, k, layout, "first", 1)
            for k in tensors
            if k.saved.role in ("activation", "mask")
        )
        assert sympy.expand(kept - T * B * d * (expected + sympy.Rational(5, t) * h * T / d)) == 0


# --- model states -----------------------------------------------------------------------------------------


def test_bytes_per_param_policies():
    assert sum(bytes_per_param("bf16-mixed", "adamw").values()) == 2 + 2 + 4 + 4 + 4  # 16
    assert sum(bytes_per_param("bf16-mixed-fp32-grads", "adamw").values()) == 2 + 4 + 4 + 4 + 4  # 18
    assert sum(bytes_per_param("bf16-pure-fp32-moments", "adamw").values()) == 2 + 2 + 4 + 4  # 12, the lecture's
    # a bf16 model under torch.optim: the moments take the parameters' dtype (MemTracker: test_memtracker.py)
    assert sum(bytes_per_param("bf16-pure", "adamw").values()) == 2 + 2 + 2 + 2  # 8
    assert sum(bytes_per_param("fp32", "adamw").values()) == 4 + 4 + 4 + 4
    assert sum(bytes_per_param("fp8-mixed", "adamw").values()) == 2 + 1 + 2 + 4 + 4 + 4  # + the fp8 copy
    assert sum(bytes_per_param("bf16-mixed", "sgd").values()) == 2 + 2 + 4
    assert sum(bytes_per_param("bf16-mixed", "adam-8bit").values()) == 2 + 2 + 4 + 2 * (1 + sympy.Rational(4, 2048))


def test_adafactor_state_from_the_axes():
    st_ = model_state(load("gpt").graph, "fp32", "adafactor", scalars=True)
    T_max = s.T_max
    matrices = 4 * (d + d) + (d + 4 * d) + (4 * d + d)  # q, k, v, proj; fc; proj: rows + cols
    vectors = 3 * d + d + 4 * d + d + 2 * 2 * d  # biases of q, k, v, proj, fc, proj; two LayerNorms (gain + bias)
    expected = 4 * (L * (matrices + vectors) + (V + d) + (T_max + d) + 2 * d)  # + wte, wpe, ln_f; fp32
    assert sympy.expand(st_["v"] - expected) == 0
    assert st_["step"] == 4 * (16 * L + 2 + 2)  # one fp32 step per tensor: 16 per layer, wte, wpe, ln_f ×2


def test_model_state_from_graph_matches_parameter_count():
    G = load("gpt").graph
    from costmodel.kit import totals

    N = totals(G).params
    assert sympy.expand(sum(w.elements * w.count for w in weights(G)) - N) == 0
    st_ = model_state(G, "bf16-mixed", "sgd-momentum")
    assert sympy.expand(st_["params"] + st_["grads"] + st_["optimizer"] - (2 + 2 + 4 + 4) * N) == 0


# --- ZeRO (Rajbhandari et al. 2020, fig. 1): Ψ = 7.5B, N_d = 64, K = 12 (fp16 + Adam) ------------------------


def test_zero_worked_example():
    psi = sympy.Integer(7_500_000_000)
    states = model_state_bytes(psi, "fp16-mixed", "adam")
    gb = [sum(zero_shard(states, Layout(dp=64, zero=z)).values()) / 10**9 for z in range(4)]
    assert gb[0] == 120  # (2 + 2 + 12) Ψ
    psi_gb = sympy.Rational(15, 2)
    assert gb[1] == 4 * psi_gb + 12 * psi_gb / 64  # 2Ψ + 2Ψ + KΨ/N_d = 31.4
    assert gb[2] == 2 * psi_gb + 14 * psi_gb / 64  # 2Ψ + (2 + K)Ψ/N_d = 16.6
    assert gb[3] == sympy.Rational(120, 64)  # 1.9
    assert [round(float(x), 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


def test_peak_is_at_least_the_sum():
    m = load("gpt2-small", {"dropout_p": True})
    values = {**m.values, B: 2}
    for r in ("none", "selective", "full"):
        live, _ = peak(m.graph, r).at(values)
        assert live >= evaluate(activations(m.graph, r).bytes, values)


# --- communication, inference ------------------------------------------------------------------------------


def test_communication_volumes():
    G = load("gpt").graph
    grads = params = sympy.Symbol("P", positive=True)
    assert communication(G, Layout(dp=8), grads, params, 1)["dp"] == 2 * sympy.Rational(7, 8) * grads  # ≈ 2Ψ
    # ZeRO-3: a reduce-scatter and two all-gathers, each 7 shards of the buffer padded to ⌈P/8⌉ (≈ 3Ψ)
    assert communication(G, Layout(dp=8, zero=3), grads, params, 1)["dp"] == 3 * 7 * roundup(grads / 8)
    assert communication(G, Layout(dp=8, zero=3), grads, params, 1)["dp"].subs(grads, 8 * 10**9) == 3 * 7 * 10**9
    tp = communication(G, Layout(tp=4), grads, params, 1)["tp"]
    # per layer 2 all-reduces forward (attention and MLP outputs) + 2 backward (their inputs), each
    # 2(t-1)/t · B·T·d · 2 bytes; the vocab-parallel embedding (forward) and unembedding input (backward) add 2
    assert sympy.expand(tp - sympy.Rational(3, 2) * (4 * L + 2) * B * T * d * 2) == 0
    # with pipeline stages a device runs L/pp of the layers, so only the per-layer traffic divides
    tp4 = communication(G, Layout(tp=4, pp=4), grads, params, 1)["tp"]
    k = sympy.Symbol("k", integer=True, positive=True)  # L = 4k: pp divides the layers (else stage_layers)
    assert sympy.expand((tp4 - sympy.Rational(3, 2) * (4 * L / 4 + 2) * B * T * d * 2).subs(L, 4 * k)) == 0


def test_weight_share_tensor_parallel():
    G = load("gpt").graph
    share = weight_share(G, Layout(tp=4))
    split = {(w.node, w.name) for w in weights(G) if share(w) == sympy.Rational(1, 4)}
    assert ("layers.attn.q", "bias") in split and ("layers.mlp.fc", "weight") in split and ("wte", "weight") in split
    assert ("layers.attn.proj", "bias") not in split  # row-parallel bias over d: replicated
    assert ("wpe", "weight") not in split and ("layers.attn.ln", "gain") not in split


def test_int4_weights_with_group_scales():
    G = load("gpt", {"bias": False}).graph
    w = inference_weights(G, "int4")
    matmul = L * (4 * d * d + 8 * d * d)  # q, k, v, proj, fc, proj; lm_head is tied to wte
    assert sympy.expand(w["matmul_weights"] - matmul / 2) == 0  # 4 bits
    values = {d: 768, L: 12}
    scales = 12 * (4 * 768 * (768 // 128) + 3072 * 6 + 768 * 24) * 4  # rows × ceil(cols / 128) × (fp16 scale + zero)
    assert evaluate(w["scales"], values) == scales


# --- report, CLI, fit ----------------------------------------------------------------------------------------


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_zero3_divides_what_zero3_divides(capsys):
    one = run_json(capsys, "estimate", "gpt2-small", "--batch", "64")["memory_bytes"]
    z3 = run_json(capsys, "estimate", "gpt2-small", "--batch", "64", "--dp", "64", "--zero", "3")["memory_bytes"]
    for key in ("params", "grads", "optimizer"):
        assert z3[key] == -(-one[key] // 64)  # sharded over 64 devices (a fraction of a byte rounds up)
    micro = run_json(capsys, "estimate", "gpt2-small", "--batch", "1")["memory_bytes"]
    assert z3["activations"] == micro["activations"]  # each device runs a micro-batch of 64 / 64 = 1


def test_estimate_inference_kv_cache(capsys):
    r = run_json(capsys, "estimate", "gpt2-small", "--batch", "4", "--inference", "--context", "1024")
    assert r["memory_bytes"]["kv_cache"] == 2 * 12 * 4 * 1024 * 768 * 2  # 2 · L · B · C · d · bf16
    assert r["memory_bytes"]["total"] == sum(r["memory_bytes"][k] for k in ("params", "kv_cache", "activations"))


def test_estimate_text_names_every_convention(capsys):
    assert main(["estimate", "gpt2-small", "--recompute", "selective", "--flash"]) == 0
    out = capsys.readouterr().out
    for key in ("params", "grads", "optimizer", "activations", "total", "peak"):
        line = next(x for x in out.splitlines() if x.strip().startswith(key + " "))
        assert "GB" in line and len(line.split("GiB)")[1].strip()) > 10  # a convention follows the number


def test_cli_errors_are_one_line(capsys):
    assert main(["estimate", "gpt2-small", "--zero", "1"]) == 2
    assert main(["fit", "gpt2-small", "--memory", "lots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(x.startswith("costmodel: error:") for x in err)


def test_fit_largest_batch_and_overflow():
    r = fit("gpt2-small", parse_size("80GB"), by="total")
    at = lambda n: estimate("gpt2-small", batch=n)["memory_bytes"]["total"]  # noqa: E731
    assert at(r["largest"]) <= 80 * 10**9 < at(r["largest"] + 1)
    big = fit("gpt3-175b", parse_size("80GB"))
    assert not big["fits"] and big["overflow"] == "params"  # 175e9 × 2 B of bf16 weights alone exceed 80 GB


def test_pipeline_first_stage_holds_all_layers_of_one_micro_batch():
    """1F1B (Korthikanti sec. 4.2.3): stage 1 keeps pp micro-batches of L/pp layers = L layers' worth."""
    from costmodel.memory.parallel import stage_of

    tensors = activations(GPT3).tensors.values()
    where = {
        id(k): ("block" if all(stage_of(GPT3, x) == "block" for x in k.savers) else stage_of(GPT3, k.savers[0]))
        for k in tensors
    }
    part = {w: sum(k.bytes for k in tensors if where[id(k)] == w) for w in ("block", "first", "last")}
    layout = Layout(pp=4)
    first = sum(k.bytes * activation_share(GPT3, k, layout, "first", 4) for k in tensors)
    last = sum(k.bytes * activation_share(GPT3, k, layout, "last", 1) for k in tensors)
    k = sympy.Symbol("k", integer=True, positive=True)  # L = 4k: pp divides the layers (else stage_layers)
    assert sympy.expand((first - part["block"] - 4 * part["first"]).subs(L, 4 * k)) == 0
    assert sympy.expand((last - part["block"] / 4 - part["last"]).subs(L, 4 * k)) == 0


def test_a_pipeline_defaults_to_micro_batches_of_one_sequence():
    """With pp > 1 and no micro-batch, B / dp sequences are B / dp micro-batches of one (Korthikanti et al.'s
    Table 5 runs: micro-batch 1, 64 micro-batches), not one micro-batch of the whole batch; without a
    pipeline the replica's batch stays one micro-batch."""
    kw = dict(batch=64, seq=2048, hardware="a100-80gb", devices=64, tp=8, pp=8)
    default, given = estimate("gpt3-175b", **kw), estimate("gpt3-175b", micro_batch=1, **kw)
    assert default["memory"]["layout"]["micro_batch"] == 1 and default["memory"]["layout"]["micro_batches"] == 64
    assert default["time"]["step_s"] == given["time"]["step_s"]
    assert default["memory_bytes"]["peak"] == given["memory_bytes"]["peak"]
    flat = estimate("gpt2-small", batch=8, dp=2)["memory"]["layout"]
    assert (flat["micro_batch"], flat["micro_batches"]) == (4, 1)


def test_context_parallel_divides_every_per_token_tensor():
    layout = Layout(sp=4)
    tensors = activations(GPT3).tensors.values()
    shared = sum(k.bytes * activation_share(GPT3, k, layout, "first", 1) for k in tensors)
    total = activations(GPT3).bytes
    assert sympy.expand(shared - ((total - 4) / 4 + 4)) == 0  # all but nll_loss's 4-byte total_weight


def test_expert_parallel_and_zero_over_dp_over_ep(monkeypatch):
    """Experts (a routed matmul's stacked weights) are divided by ep and ZeRO-sharded over dp / ep."""
    import costmodel.memory.parallel as par
    from costmodel.kit import Param
    from costmodel.memory.states import Weight

    G = load("gpt").graph
    expert = Weight("layers.mlp.fc", Param("weight", (("e", 8), ("d", d), ("f", 4 * d)), 4 * d, d, 8), L, True)
    assert weight_share(G, Layout(dp=8, ep=4))(expert) == sympy.Rational(1, 4)
    monkeypatch.setattr(par, "is_expert", lambda w: w.node.startswith("layers.mlp.fc"))  # pretend fc is routed
    layout = Layout(dp=8, ep=4, zero=3)
    raw, states = par.device_states(G, "bf16-mixed", "sgd", layout)
    fc = L * (d * 4 * d + 4 * d)  # weight and bias
    rest = model_state(G, "bf16-mixed", "sgd")["params"] / 2 - fc
    # the rest sharded over dp = 8; fc divided by ep = 4, its shards over dp / ep = 2 replicas
    assert sympy.expand(states["params"] - 2 * (rest / 8 + fc / 4 / 2)) == 0


def test_derive_gives_memory_formulas():
    from costmodel import derive

    q = derive("gpt")["expressions"]
    C = s.C
    assert q["memory_bytes.kv_cache"] == 2 * L * B * C * d * 2  # k and v, d = h·d_head, bf16
    assert sympy.expand(q["memory_bytes.activations"] - q["memory_bytes.activations_selective"]) == 2 * B * L * T**2 * h
    assert not q["memory_bytes.activations_flash"].has(T**2)


def test_expert_parallel_all_to_all():
    """Dispatch and combine of top-k routed tokens: 2 all-to-alls forward + 2 backward per MoE layer."""
    from costmodel.graph.cost import Cost, OpCost
    from costmodel.graph.registry import KINDS, rule
    from costmodel.kit import GraphBuilder

    if "test_routed" not in KINDS:  # a stand-in with the routed matmul's attributes; no costs needed here
        rule("test_routed")(lambda op, conventions: OpCost(Cost(), Cost()))
    b = GraphBuilder("moe", b=B, t=T, d=d, e=s.n_experts, r=s.top_k, f=s.d_ff)
    x = b.input("x", "b t d", dtype="bf16")
    with b.repeat("layers", L):
        # the stand-in registers no weight operand, so its patterns leave out the expert weight
        b.op("gate", "test_routed", [x], "b t d -> b t r f", attrs={"experts": "e", "route": "r"})
        y = b.op("up", "test_routed", [x], "b t d -> b t r f", attrs={"experts": "e", "route": "r"})  # same dispatch
        b.op("down", "test_routed", [y], "b t r f -> b t d", attrs={"experts": "e", "route": "r"})
    zero = sympy.Integer(0)
    comm = communication(b.graph, Layout(dp=8, ep=8), zero, zero, 1)
    per_layer = 2 * 2 * sympy.Rational(7, 8) * B * T * s.top_k * d * 2  # (dispatch + combine) × (fwd + bwd), bf16
    assert sympy.expand(comm["ep"] - L * per_layer) == 0


def test_selective_recompute_finds_split_scores():
    """MLA-style scores, the sum of two contractions, are an attention core too: no T² tensor is kept."""
    from costmodel.kit import GraphBuilder

    b = GraphBuilder("split", b=B, t=T, s=T, h=h, k=s.d_head, p=s.d_rope, d=d)
    x = b.input("x", "b t d", dtype="bf16")
    with b.repeat("layers", L):
        x = b.norm("ln", x, "b t d")
        q, k, v = (b.matmul(n, x, "b t d, d h k -> b h t k") for n in ("q", "k", "v"))
        qr, kr = b.matmul("qr", x, "b t d, d h p -> b h t p"), b.matmul("kr", x, "b t d, d p -> b t p")
        nope = b.contract("nope", q, k, "b h t k, b h s k -> b h t s")
        rope = b.contract("rope", qr, kr, "b h t p, b s p -> b h t s")
        scores = b.elementwise("scores", "add", [nope, rope], "b h t s, b h t s -> b h t s")
        probs = b.softmax("softmax", b.elementwise("scale", "scale", scores, "b h t s"), "b h t s", axis="s")
        ctx = b.contract("context", probs, v, "b h t s, b h s k -> b h t k")
        x = b.matmul("o", ctx, "b h t k, h k d -> b t d")
    none, selective = (activations(b.graph, r).bytes for r in ("none", "selective"))
    assert sympy.expand(none - selective) == 2 * B * L * h * T**2  # the softmax output, bf16
    assert not selective.has(T**2)


def test_report_states_agree_with_the_parameter_count(capsys):
    """With no frozen weights the graph-derived states are the N-based ones: 2 + 2 + 12 bytes per parameter."""
    r = run_json(capsys, "estimate", "gpt2-small")
    n = r["params"]["total"]
    assert (r["memory_bytes"]["params"], r["memory_bytes"]["grads"], r["memory_bytes"]["optimizer"]) == (
        2 * n,
        2 * n,
        12 * n,
    )
