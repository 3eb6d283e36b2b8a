"""Memory cross-checked against real PyTorch and transformers state (CPU, tiny sizes, no downloads).

The reference below mirrors ``graphs/gpt.py`` op for op in torch + einops
(separate q, k, v projections, tied unembedding, the causal mask a buffer), so
the engine's counts can be compared exactly with:

* model states: bytes of the parameters, ``.grad`` tensors and optimizer
  state tensors after one optimizer step;
* activations: bytes of the distinct storages autograd saves for backward
  (``torch.autograd.graph.saved_tensors_hooks``), parameters and buffers left
  out, under no recompute, selective (``torch.utils.checkpoint`` of the
  attention core) and full (checkpoint of every layer) recompute, and with
  ``F.scaled_dot_product_attention`` for FlashAttention;
* the KV cache: bytes of the ``DynamicCache`` transformers fills.
"""

import functools
import math

import pytest
import torch  # the test extra pins torch and transformers: a missing one fails, never skips
import torch.nn.functional as F
import transformers
from einops import rearrange
from torch import nn
from torch.utils.checkpoint import checkpoint

from costmodel import load
from costmodel.graph.finetune import lora
from costmodel.graph.passes import flash_attention
from costmodel.kit import GraphBuilder, evaluate
from costmodel.kit import symbols as s
from costmodel.memory.activations import activations
from costmodel.memory.inference import kv_cache
from costmodel.memory.peak import peak
from costmodel.memory.states import model_state
from costmodel.verbs.estimate import estimate

SIZES = dict(B=2, T=8, d=16, h=4, L=2, V=40, T_max=12)


def dropout(x, p):
    """Dropout as CUDA runs it (``native_dropout``, a saved bool mask). On CPU ``F.dropout`` multiplies
    by a noise tensor of the input's dtype instead, which it saves: 4 bytes per element in fp32."""
    return torch.native_dropout(x, p, True)[0] if p > 0 else x


class Block(nn.Module):
    def __init__(self, d, h, t_max, dropout, flash, recompute, rank=0):
        super().__init__()
        self.h, self.p, self.flash, self.recompute = h, (0.1 if dropout else 0.0), flash, recompute
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.mproj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.triu(torch.ones(t_max, t_max, dtype=torch.bool), 1))
        self.lora = nn.ModuleDict()
        if rank:
            for name in ("q", "v"):
                self.lora[name] = nn.Sequential(nn.Linear(d, rank, bias=False), nn.Linear(rank, d, bias=False))

    def _proj(self, name, x):
        y = getattr(self, name)(x)
        return y + self.lora[name](x) if name in self.lora else y

    def core(self, q, k, v):
        t = q.shape[2]
        scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]))
        probs = F.softmax(scores.masked_fill(self.mask[:t, :t], float("-inf")), dim=-1)
        return dropout(probs, self.p) @ v

    def forward(self, x):
        a = self.ln1(x)
        q, k, v = (rearrange(self._proj(n, a), "b t (h k) -> b h t k", h=self.h) for n in ("q", "k", "v"))
        if self.flash:
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.recompute == "selective":
            ctx = checkpoint(self.core, q, k, v, use_reentrant=True)
        else:
            ctx = self.core(q, k, v)
        x = x + dropout(self.proj(rearrange(ctx, "b h t k -> b t (h k)")), self.p)
        u = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
        return x + dropout(self.mproj(u), self.p)


class GPT(nn.Module):
    def __init__(self, *, B, T, d, h, L, V, T_max, dropout=False, flash=False, recompute="none", rank=0):
        super().__init__()
        self.p, self.recompute = (0.1 if dropout else 0.0), recompute
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(T_max, d)
        self.blocks = nn.ModuleList(Block(d, h, T_max, dropout, flash, recompute, rank) for _ in range(L))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = dropout(self.wte(ids) + self.wpe(torch.arange(t)), self.p)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True) if self.recompute == "full" else block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied unembedding
        return F.cross_entropy(rearrange(logits, "b t v -> (b t) v"), rearrange(targets, "b t -> (b t)"))


def _graph(dropout=False, flash=False, dtype="fp32"):
    G = load("gpt", {"dropout_p": dropout, "dtype": dtype}).graph
    return flash_attention(G) if flash else G


def _values():
    return {getattr(s, k): v for k, v in SIZES.items()}


def _batch():
    torch.manual_seed(0)
    return torch.randint(0, SIZES["V"], (SIZES["B"], SIZES["T"])), torch.randint(
        0, SIZES["V"], (SIZES["B"], SIZES["T"])
    )


def saved_bytes(model, *inputs):
    """Bytes of the distinct storages autograd saves in one forward (parameters and buffers excluded)."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen, keep = {}, []

    def pack(t):
        keep.append(t)  # keep storages alive so an address is never reused within the pass
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(*inputs)
    loss.backward()  # the graph was complete and usable
    return sum(seen.values())


@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activation_bytes_equal_torch_saved_tensors(dropout, recompute):
    torch.manual_seed(0)
    model = GPT(**SIZES, dropout=dropout, recompute=recompute)
    measured = saved_bytes(model, *_batch())
    engine = evaluate(activations(_graph(dropout), recompute).bytes, _values())
    assert engine == measured


def test_flash_attention_activation_bytes_equal_sdpa():
    torch.manual_seed(0)
    measured = saved_bytes(GPT(**SIZES, flash=True), *_batch())
    engine = evaluate(activations(_graph(flash=True)).bytes, _values())
    assert engine == measured


def test_bf16_activations_equal_torch():
    torch.manual_seed(0)
    model = GPT(**SIZES, dropout=True).to(torch.bfloat16)
    measured = saved_bytes(model, *_batch())
    engine = evaluate(activations(_graph(dropout=True, dtype="bf16")).bytes, _values())
    # A bf16 model without autocast keeps three small things in bf16 where the engine (autocast, CUDA
    # LayerNorm) keeps fp32: LayerNorm mean and rstd (2 per row, 2L + 1 norms), the log-probs of the
    # loss, and nll_loss's 0-dim total_weight. Each differs by 4 - 2 = 2 bytes per element.
    rows = SIZES["B"] * SIZES["T"]
    fp32_only = 2 * rows * (2 * SIZES["L"] + 1) + rows * SIZES["V"] + 1
    assert engine - (4 - 2) * fp32_only == measured


def _state_bytes(model, opt):
    params = sum(p.nbytes for p in model.parameters())
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    state = sum(t.nbytes for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
    return {"params": params, "grads": grads, "optimizer": state}


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps),
    "adamw": lambda ps: torch.optim.AdamW(ps),
    "adamw-amsgrad": lambda ps: torch.optim.AdamW(ps, amsgrad=True),
    "adafactor": lambda ps: torch.optim.Adafactor(ps),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_model_state_equals_torch_after_one_step(name):
    torch.manual_seed(0)
    model = GPT(**SIZES)
    opt = OPTIMIZERS[name](model.parameters())
    model(*_batch()).backward()
    opt.step()
    engine = model_state(_graph(), "fp32", name, scalars=True)  # torch keeps a 0-dim step per tensor
    assert {k: evaluate(engine[k], _values()) for k in ("params", "grads", "optimizer")} == _state_bytes(model, opt)


def test_lora_state_equals_torch():
    rank = 3
    torch.manual_seed(0)
    model = GPT(**SIZES, rank=rank)
    for n, p in model.named_parameters():
        p.requires_grad_(".lora." in n)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    model(*_batch()).backward()
    opt.step()
    engine = model_state(lora(_graph(), ["attn.q", "attn.v"], rank), "fp32", "adamw", scalars=True)
    assert {k: evaluate(engine[k], _values()) for k in ("params", "grads", "optimizer")} == _state_bytes(model, opt)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert evaluate(engine["trainable"], _values()) == trainable  # 2 layers × 2 × (d·r + r·d)


def test_lora_activation_bytes_equal_torch():
    """Frozen weights: a frozen linear keeps no input, ops before the first adapter keep nothing, and
    the first layer's q·kᵀ keeps only k (q needs no gradient there): all derived, matched exactly."""
    rank = 3
    torch.manual_seed(0)
    model = GPT(**SIZES, rank=rank)
    for n, p in model.named_parameters():
        p.requires_grad_(".lora." in n)
    measured = saved_bytes(model, *_batch())
    G = lora(_graph(), ["attn.q", "attn.v"], rank)
    assert evaluate(activations(G).bytes, _values()) == measured


def _cache_bytes(out):
    cache = getattr(out, "cache", None) or out.past_key_values
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def gqa_graph():
    """A small GQA attention stack written with GraphBuilder: k and v have n_kv heads of d_head."""
    b = GraphBuilder("gqa", dtype="fp32", b=s.B, t=s.T, d=s.d, h=s.h, g=s.n_kv, k=s.d_head)
    x = b.elementwise("embed", "scale", b.input("x", "b t d", dtype="fp32"), "b t d")
    with b.repeat("layers", s.L):
        b.matmul("q", x, "b t d, d h k -> b h t k")
        b.tag(b.matmul("k", x, "b t d, d g k -> b g t k"), "kv_cache")
        b.tag(b.matmul("v", x, "b t d, d g k -> b g t k"), "kv_cache")
    return b.graph


def test_kv_cache_equals_transformers_gqa():
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    batch, context = 3, 11
    with torch.no_grad():
        out = model(torch.randint(0, 64, (batch, context)), use_cache=True)
    engine = kv_cache(gqa_graph())
    values = {s.L: 3, s.B: batch, s.C: context, s.n_kv: 2, s.d_head: 32 // 4}
    assert evaluate(engine, values) == _cache_bytes(out)  # 2 · L · B · C · n_kv · d_head · 4 bytes
    assert evaluate(engine, values) == 2 * 3 * batch * context * 2 * 8 * 4


def test_kv_cache_equals_transformers_gpt2():
    cfg = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 40, (2, 9)), use_cache=True)
    values = {s.L: 2, s.B: 2, s.C: 9, s.d: 16, s.h: 4}
    assert evaluate(kv_cache(_graph()), values) == _cache_bytes(out)


_PEAK_SCRIPT = """
import importlib.util, json, sys
import torch
from torch.profiler import ProfilerActivity, profile
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
sizes = json.loads(sys.argv[3])
out = {}
for recompute in sys.argv[2].split(","):
    torch.manual_seed(0)
    model = ref.GPT(**sizes, dropout=True, recompute=recompute)
    ids = torch.randint(0, sizes["V"], (sizes["B"], sizes["T"]))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(ids, ids).backward()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    out[recompute] = {"peak": peak, "grads": sum(p.nbytes for p in model.parameters())}
print(json.dumps(out))
"""
_PEAK_SIZES = dict(B=4, T=64, d=64, h=4, L=4, V=512, T_max=64)


@functools.cache
def _measured_peaks() -> dict:
    """The CPU allocator's peak of each recompute mode, measured in one fresh process (one torch start-up)."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, __file__, "none,selective,full", json.dumps(_PEAK_SIZES)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_peak_brackets_the_measured_cpu_peak(recompute):
    """The engine's peak activations vs the CPU allocator's peak (torch profiler, a fresh process).

    The measurement also holds the parameter gradients torch has allocated so far (the engine counts all of
    them in the model states from the start), so: engine ≤ measured ≤ engine + gradients, within 1% for
    the profiler's and allocator's own bytes.
    """
    measured = _measured_peaks()[recompute]
    values = {getattr(s, k): v for k, v in _PEAK_SIZES.items()}
    engine, _ = peak(load("gpt", {"dropout_p": True, "dtype": "fp32"}).graph, recompute).at(values)
    assert 0.99 * engine <= measured["peak"] <= 1.01 * (engine + measured["grads"])


def test_kv_cache_equals_transformers_sliding_window(tmp_path):
    # transformers keeps the last sliding_window − 1 tokens per layer (the new token's key makes the window)
    cfg = transformers.MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=16,
    )
    model = transformers.MistralForCausalLM(cfg).eval()
    batch, context = 2, 40
    with torch.no_grad():
        out = model(torch.randint(0, 64, (batch, context)), use_cache=True)
    path = tmp_path / "config.json"
    cfg.to_json_file(path)
    r = estimate(str(path), batch=batch, seq=context, inference=True, context=context, kv_dtype="fp32")
    # 2 (k, v) · L · B · (W − 1) · n_kv · d_head · 4 bytes
    assert r["memory_bytes"]["kv_cache"] == _cache_bytes(out) == 2 * 2 * batch * 15 * 2 * 8 * 4
