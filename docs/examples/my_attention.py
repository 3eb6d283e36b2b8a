"""A new attention variant, twice: as a costmodel builder (``build``) and as a PyTorch module (``torch_module``).

Multi-query attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need"): h query
heads share one key head and one value head of width d/h. A small pre-LayerNorm decoder around it: token
embedding, L layers of MQA and a GELU MLP (4d), a final LayerNorm, an untied unembedding, the loss.

    costmodel derive docs/examples/my_attention.py:build
    costmodel check docs/examples/my_attention.py:build --against docs/examples/my_attention.py:torch_module

``check`` draws valid sizes (h divides d), builds the module at each on the ``meta`` device and compares
parameters (``numel``), matmul FLOPs (``FlopCounterMode``, forward and forward + backward) and the bytes
saved for backward (``saved_tensors_hooks``, fp32 on CPU). docs/verify.md plants a bug and shows the shrunk
counterexample. The builder imports no torch; ``torch_module`` imports it when called.
"""

from costmodel.kit import GraphBuilder
from costmodel.symbols import B, L, T, V, d, h


def multi_query_attention(b: GraphBuilder, x, *, shared_kv: bool = True):
    """q: ``b t d -> b h t k``; one key and one value head ``b t d -> b s k`` (``shared_kv``; else one per
    query head, which is plain multi-head attention); scores, softmax over s, context, output ``h k -> d``."""
    heads = "" if shared_kv else "h "
    kv = f"b {heads}s k"  # the keys' and values' axes: no head axis when one head is shared
    q = b.matmul("q", x, "b t d, d h k -> b h t k")
    k = b.tag(b.matmul("k", x, f"b s d, d {heads}k -> {kv}"), "kv_cache")
    v = b.tag(b.matmul("v", x, f"b s d, d {heads}k -> {kv}"), "kv_cache")
    scores = b.contract("scores", q, k, f"b h t k, {kv} -> b h t s", causal=True)
    scores = b.elementwise("scale", "scale", scores, "b h t s")
    scores = b.elementwise("mask", "mask", scores, "b h t s")
    probs = b.softmax("softmax", scores, "b h t s", axis="s")
    context = b.contract("context", probs, v, f"b h t s, {kv} -> b h t k", causal=True)
    return b.matmul("proj", context, "b h t k, h k d -> b t d")


def build(*, shared_kv: bool = True, dtype: str = "fp32"):
    """The decoder with multi-query attention (``shared_kv=False``: multi-head), in ``dtype``."""
    b = GraphBuilder("my_attention", dtype=dtype, b=B, t=T, s=T, d=d, v=V, h=h, k=d / h, f=4 * d)
    x = b.gather("embed", b.input("ids", "b t"), "b t, v d -> b t d")
    with b.repeat("layers", L):
        with b.scope("attn"):
            y = multi_query_attention(b, b.norm("ln", x, "b t d", rms=False), shared_kv=shared_kv)
        x = b.elementwise("attn_residual", "add", [x, y], "b t d, b t d -> b t d")
        with b.scope("mlp"):
            u = b.matmul("fc", b.norm("ln", x, "b t d", rms=False), "b t d, d f -> b t f", bias="f")
            u = b.elementwise("gelu", "gelu", u, "b t f")
            y = b.matmul("proj", u, "b t f, f d -> b t d", bias="d")
        x = b.elementwise("mlp_residual", "add", [x, y], "b t d, b t d -> b t d")
    x = b.norm("ln_f", x, "b t d", rms=False)
    b.loss("loss", b.matmul("lm_head", x, "b t d, v d -> b t v"), "b t v -> b t")
    return b.graph


def torch_module(B: int, T: int, d: int, h: int, L: int, V: int, shared_kv: bool = True):
    """The same decoder in PyTorch at the given sizes: ``(module, (ids, targets))``."""
    import torch  # deferred: the builder above needs no torch
    import torch.nn.functional as F
    from torch import nn

    k = d // h

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            kv = k if shared_kv else d
            self.k, self.v = nn.Linear(d, kv, bias=False), nn.Linear(d, kv, bias=False)
            self.register_buffer("causal", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

        def forward(self, x):
            heads = 1 if shared_kv else h
            q = self.q(x).view(B, T, h, k).transpose(1, 2)  # b h t k
            key = self.k(x).view(B, T, heads, k).transpose(1, 2)  # b 1 s k (shared) or b h s k
            value = self.v(x).view(B, T, heads, k).transpose(1, 2)
            if shared_kv:  # the query heads folded into its rows: no broadcast copy of the shared key and value
                q, key, value = q.reshape(B, h * T, k), key[:, 0], value[:, 0]  # b (h t) k; b s k
            scores = (q @ key.transpose(-2, -1)) * (1 / k**0.5)
            scores = scores.view(B, h, T, T).masked_fill(self.causal, float("-inf"))  # b h t s
            probs = F.softmax(scores, dim=-1)
            context = probs.view(B, h * T, T) @ value if shared_kv else probs @ value
            return self.proj(context.view(B, h, T, k).transpose(1, 2).reshape(B, T, d))  # b t (h k)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.ln1, self.ln2 = Attention(), nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc, self.mproj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.layers = nn.Embedding(V, d), nn.ModuleList(Layer() for _ in range(L))
            self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, V, bias=False)

        def forward(self, ids, targets):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))

    ids = torch.randint(0, V, (B, T))
    return Decoder(), (ids, torch.roll(ids, -1, dims=1))
