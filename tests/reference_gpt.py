"""A small GPT written directly in PyTorch + einops, independent of costmodel.

It mirrors the architecture of ``graphs/gpt.py`` (learned positions, pre-LN,
multi-head causal attention, GELU MLP, optional biases, tied or untied
unembedding) so that real counting (``FlopCounterMode``, ``numel``) can be
compared with the engine's derivation. Shapes are written as einops patterns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, d, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.fc = nn.Linear(d, d_ff, bias=bias)
        self.fc_out = nn.Linear(d_ff, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.ln_1(x)
        q, k, v = (rearrange(f(a), "b t (h k) -> b h t k", h=self.heads) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # b h t k
        x = x + self.proj(rearrange(y, "b h t k -> b t (h k)"))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class ReferenceGPT(nn.Module):
    def __init__(
        self,
        *,
        layers: int,
        d: int,
        heads: int,
        vocab: int,
        context: int,
        d_ff: int | None = None,
        bias: bool = True,
        tied: bool = True,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff or 4 * d, bias) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, bias=bias)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # b t v
        return F.cross_entropy(rearrange(logits, "b t v -> (b t) v"), rearrange(ids, "b t -> (b t)"))


def count(model: nn.Module, ids: torch.Tensor) -> tuple[int, int, int]:
    """(parameters, forward FLOPs, forward+backward FLOPs) counted by PyTorch."""
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for p in model.parameters())  # a tied weight is listed once
    with FlopCounterMode(display=False) as counter:
        model(ids)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        model(ids).backward()
    return params, forward, counter.get_total_flops()
