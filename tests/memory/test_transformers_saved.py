"""Bytes saved for backward by transformers' LLaMA and GPT-2 (tiny configs in code, CPU, no downloads) against
the engine's ``memory_bytes.activations`` of the same config.json, under eager and SDPA attention, in fp32, in
bf16 and under ``torch.autocast(bf16)``.

Measured: the distinct storages ``torch.autograd.graph.saved_tensors_hooks`` sees over one training forward
(labels given), parameters and buffers left out; under autocast the bf16 casts of weights are set apart (a
saved 2-D low-precision tensor shaped as a weight): they are the engine's ``memory_bytes.parts.compute_copy``.

Where they differ, the difference is exact and has a reason, written in each test (N = B·T tokens):

* transformers' ``LlamaRMSNorm`` is written as separate ops, ``weight * (x * rsqrt(mean(x²) + eps))``: the
  gain's multiply keeps the normalised tensor before the gain (4 bytes an element: it runs in fp32) where a
  fused norm, as the engine counts it, keeps only its input and 1/rms; and the rotary ``cos`` and ``sin``
  tables (T × d_head, in the activations' dtype, one pair shared by the layers) are kept by RoPE's multiplies.
* GPT-2's ``gelu_new`` is written as Python ops: it keeps ``tanh(...)``, ``0.5·x`` and ``1 + tanh(...)``
  besides its input (3 tensors of N × d_ff); in a bf16 model without autocast, CPU LayerNorm keeps its mean
  and 1/std in bf16 (the engine: fp32, as CUDA and autocast do).
* Under autocast the residual stream and the norms run in fp32, and autocast casts a norm's output to bf16
  once per matmul that reads it (LLaMA's q, k, v: three casts; gate and up: two) where the engine's bf16
  graph keeps one bf16 tensor.

SDPA on CPU runs the flash kernel (q, k, v, output and a log-sum-exp per row): as the engine's ``sdpa``; GPT-2's
key is a view into its fused q‖k‖v projection, which therefore stays alive whole (2·N·d more per layer).
"""

import contextlib

import pytest
import torch
import transformers

import costmodel

B, T, L, D, H, F, V = 2, 7, 2, 32, 4, 64, 100
N = B * T
K = D // H  # head dim


def _model(kind: str, attn: str, dtype):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=V,
            hidden_size=D,
            intermediate_size=F,
            num_hidden_layers=L,
            num_attention_heads=H,
            num_key_value_heads=H,
            max_position_embeddings=64,
        )
    elif kind == "qwen3":  # GQA (2 KV heads), q/k norms, a tied unembedding
        cfg = transformers.Qwen3Config(
            vocab_size=V,
            hidden_size=D,
            intermediate_size=F,
            num_hidden_layers=L,
            num_attention_heads=H,
            num_key_value_heads=2,
            head_dim=K,
            max_position_embeddings=64,
            tie_word_embeddings=True,
        )
    else:
        cfg = transformers.GPT2Config(
            vocab_size=V,
            n_positions=64,
            n_embd=D,
            n_layer=L,
            n_head=H,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=1,
            eos_token_id=2,
        )
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).to(dtype).train()
    return cfg, model


def _measured(model, autocast: bool) -> tuple[int, int]:
    """(activation bytes, bytes of the weights' low-precision casts) autograd saves over one forward."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    acts, casts, alive = {}, {}, []

    def pack(t):
        alive.append(t)  # no storage freed and its address reused within the pass
        ptr, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        if ptr in own:
            return t
        weight = t.dim() == 2 and (tuple(t.shape) in shapes or tuple(t.shape[::-1]) in shapes)
        (casts if autocast and weight and t.dtype == torch.bfloat16 else acts)[ptr] = size
        return t

    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), cast:
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()  # the graph was complete
    return sum(acts.values()), sum(casts.values())


def _engine(cfg, tmp_path, precision: str, attention: str) -> dict:
    path = tmp_path / "config.json"
    cfg.to_json_file(path)
    return costmodel.estimate(str(path), batch=B, seq=T, precision=precision, attention=attention)["memory_bytes"]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype, precision, size", [(torch.float32, "fp32", 4), (torch.bfloat16, "bf16-pure", 2)])
def test_llama(tmp_path, attn, dtype, precision, size):
    cfg, model = _model("llama", attn, dtype)
    measured, _ = _measured(model, autocast=False)
    engine = _engine(cfg, tmp_path, precision, attn)["activations"]
    # 2L + 1 RMSNorms keep their fp32 normalised tensor (N × d × 4); RoPE keeps cos and sin (2 × T × d_head)
    assert measured - engine == (2 * L + 1) * N * D * 4 + 2 * T * K * size


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_autocast(tmp_path, attn):
    cfg, model = _model("llama", attn, torch.float32)
    measured, casts = _measured(model, autocast=True)
    engine = _engine(cfg, tmp_path, "bf16-autocast", attn)
    # per norm: an fp32 copy of its input and the fp32 normalised tensor (8) where the engine keeps a bf16
    # input (2): 6·N·d, 2L + 1 norms; per layer 3 extra bf16 casts (q, k, v read one norm output; gate, up
    # another): 6·N·d; cos and sin in fp32: 2 × T × d_head × 4
    assert measured - engine["activations"] == (18 * L + 6) * N * D + 8 * T * K
    # every matmul weight cast to bf16 once and kept: 2 bytes × (L·(4d² + 3·d·d_ff) + V·d)
    assert casts == engine["parts"]["compute_copy"] == 2 * (L * (4 * D * D + 3 * D * F) + V * D)


def test_gpt2_fp32(tmp_path):
    cfg, model = _model("gpt2", "eager", torch.float32)
    measured, _ = _measured(model, autocast=False)
    engine = _engine(cfg, tmp_path, "fp32", "eager")["activations"]
    assert engine == _engine(cfg, tmp_path, "fp32", "unfused")["activations"]  # fp32: nothing to cast
    assert measured - engine == 3 * L * N * (4 * D) * 4  # gelu_new's tanh, 0.5·x, 1 + tanh (d_ff = 4d)


def test_gpt2_bf16_softmaxes_in_bf16(tmp_path):
    """GPT-2's eager attention softmaxes in the scores' dtype: a bf16 GPT-2 without autocast is ``unfused``."""
    cfg, model = _model("gpt2", "eager", torch.bfloat16)
    measured, _ = _measured(model, autocast=False)
    engine = _engine(cfg, tmp_path, "bf16-pure", "unfused")["activations"]
    # gelu_new's 3 tensors in bf16; LayerNorm's mean and 1/std in bf16 (2 per row, 2L + 1 norms, 2 bytes less)
    assert measured - engine == 3 * L * N * (4 * D) * 2 - 2 * (2 * L + 1) * N * 2


def test_gpt2_autocast(tmp_path):
    """Under autocast the fp32 causal mask promotes the scores to fp32: the softmax keeps fp32 and the
    context its bf16 cast, as ``eager``."""
    cfg, model = _model("gpt2", "eager", torch.float32)
    measured, casts = _measured(model, autocast=True)
    engine = _engine(cfg, tmp_path, "bf16-autocast", "eager")
    # gelu_new's 3 tensors in bf16; each LayerNorm keeps an fp32 input (4) where the engine keeps bf16 (2)
    assert measured - engine["activations"] == 3 * L * N * (4 * D) * 2 + (2 * L + 1) * N * D * 2
    # c_attn, c_proj, c_fc, mlp c_proj of each layer, and the tied unembedding's cast of the table
    assert casts == engine["parts"]["compute_copy"] == 2 * (L * (3 * D * D + D * D + 2 * 4 * D * D) + V * D)


@pytest.mark.parametrize("dtype, precision, size", [(torch.float32, "fp32", 4), (torch.bfloat16, "bf16-pure", 2)])
def test_gpt2_sdpa(tmp_path, dtype, precision, size):
    """SDPA keeps q, k, v, its output and a log-sum-exp per row, as the engine's ``sdpa``; but GPT-2's key is a
    view into the fused ``c_attn`` output (q and v are copies), so the whole q‖k‖v storage (3·N·d) stays alive
    where the engine counts the key alone (N·d): 2·N·d more per layer."""
    cfg, model = _model("gpt2", "sdpa", dtype)
    measured, _ = _measured(model, autocast=False)
    engine = _engine(cfg, tmp_path, precision, "sdpa")["activations"]
    gelu = 3 * L * N * (4 * D) * size  # gelu_new's tanh, 0.5·x, 1 + tanh
    norm_stats = 0 if dtype == torch.float32 else -2 * (2 * L + 1) * N * 2  # CPU keeps bf16 LayerNorm statistics
    assert measured - engine == gelu + 2 * L * N * D * size + norm_stats


def _engine_transformers(cfg, tmp_path, precision: str, attention: str) -> int:
    path = tmp_path / "config.json"
    cfg.to_json_file(path)
    r = costmodel.estimate(
        str(path), batch=B, seq=T, precision=precision, attention=attention, implementation="transformers"
    )
    return r["memory_bytes"]["activations"]


CASES = [
    ("llama", "eager", torch.float32, "fp32", False),
    ("llama", "sdpa", torch.float32, "fp32", False),
    ("llama", "eager", torch.bfloat16, "bf16-pure", False),
    ("llama", "sdpa", torch.bfloat16, "bf16-pure", False),
    ("llama", "eager", torch.float32, "bf16-autocast", True),
    ("llama", "sdpa", torch.float32, "bf16-autocast", True),
    ("qwen3", "eager", torch.float32, "fp32", False),
    ("qwen3", "sdpa", torch.bfloat16, "bf16-pure", False),
    ("qwen3", "eager", torch.bfloat16, "bf16-pure", False),
    ("qwen3", "eager", torch.float32, "bf16-autocast", True),
    ("qwen3", "sdpa", torch.float32, "bf16-autocast", True),
    ("gpt2", "eager", torch.float32, "fp32", False),
    ("gpt2", "eager", torch.float32, "bf16-autocast", True),
    ("gpt2", "sdpa", torch.float32, "fp32", False),
]


@pytest.mark.parametrize("kind, attn, dtype, precision, autocast", CASES)
def test_the_transformers_implementation_keeps_what_the_modules_save(tmp_path, kind, attn, dtype, precision, autocast):
    """``--implementation transformers``: every difference above is one of its rules
    (:mod:`costmodel.memory.implementation`), and the weights' casts are activations: the engine's activations
    are the saved storages exactly."""
    cfg, model = _model(kind, attn, dtype)
    measured, casts = _measured(model, autocast=autocast)
    attention = attn
    if kind == "gpt2" and attn == "eager" and precision != "bf16-autocast":
        attention = "unfused"  # GPT-2 softmaxes in the scores' dtype (fp32: the same)
    assert _engine_transformers(cfg, tmp_path, precision, attention) == measured + casts
