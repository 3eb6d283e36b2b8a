"""The symbols of costmodel, declared once.

All sizes are positive integers. Names are chosen to print well in LaTeX
(``d_ff`` prints as ``d_{ff}``) and to avoid the names sympy's parser gives a
meaning to (``E``, ``I``, ``N``, ``O``, ``Q``, ``S``).

==========  =========================================================
symbol      meaning
==========  =========================================================
B           batch size (sequences per step)
T           sequence length (tokens per sequence)
d           model width (d_model, hidden size)
L           number of layers (repeated blocks)
V           vocabulary size
h           attention (query) heads
d_head      head dimension (often d / h)
n_kv        key/value heads (GQA; n_kv = h is MHA, n_kv = 1 is MQA)
d_ff        feed-forward (MLP) hidden width
T_max       maximum context of learned position embeddings (not T)
W           sliding-window width
n_experts   routed experts of a mixture-of-experts layer
top_k       experts each token is routed to
n_shared    shared (always active) experts
d_expert    hidden width of one expert's MLP
r_q, r_kv   low-rank (latent) widths of multi-head latent attention
d_rope      decoupled RoPE head dimension of multi-head latent attention
d_nope      non-RoPE part of a query/key head (MLA)
d_v         value head dimension (MLA)
L_dense     leading dense layers before the MoE layers
C           context length of a KV cache (inference)
T_src       source length of an encoder–decoder (tokens the encoder reads; T is the target)
L_dec       decoder layers of an encoder–decoder (L is the encoder's)
n_buckets   relative-position buckets of T5's attention bias
n_types     token types (segments) of BERT's type embedding
r_img       image resolution: pixels per side of a square image (ViT)
r_patch     patch resolution: pixels per side of a square patch (ViT)
c_in        input channels of an image (ViT: 3)
n_labels    classes of a classifier head
d_inner     inner width of a Mamba mixer (expand · d)
d_state     state size per channel of a selective scan (Mamba's N)
d_conv      taps of a Mamba mixer's causal convolution
dt_rank     rank of a Mamba mixer's step (Δ) projection
==========  =========================================================
"""

from __future__ import annotations

import sympy

_DESCRIPTIONS = {
    "B": "batch size (sequences per step)",
    "T": "sequence length (tokens per sequence)",
    "d": "model width (d_model)",
    "L": "number of layers",
    "V": "vocabulary size",
    "h": "attention heads",
    "d_head": "head dimension",
    "n_kv": "key/value heads",
    "d_ff": "feed-forward hidden width",
    "T_max": "maximum context of learned position embeddings",
    "W": "sliding-window width",
    "n_experts": "routed experts per MoE layer",
    "top_k": "experts each token is routed to",
    "n_shared": "shared experts per MoE layer",
    "d_expert": "hidden width of one expert",
    "r_q": "query latent rank (MLA)",
    "r_kv": "key/value latent rank (MLA)",
    "d_rope": "decoupled RoPE head dimension (MLA)",
    "d_nope": "non-RoPE part of a query/key head (MLA)",
    "d_v": "value head dimension (MLA)",
    "L_dense": "leading dense layers of an MoE model",
    "C": "context length of the KV cache",
    "T_src": "source length of an encoder-decoder (encoder tokens)",
    "L_dec": "decoder layers of an encoder-decoder",
    "n_buckets": "relative-position buckets (T5)",
    "n_types": "token types of BERT's type embedding",
    "r_img": "image resolution (pixels per side)",
    "r_patch": "patch resolution (pixels per side)",
    "c_in": "input channels of an image",
    "n_labels": "classes of a classifier head",
    "d_inner": "inner width of a Mamba mixer (expand · d)",
    "d_state": "state size per channel of a selective scan",
    "d_conv": "taps of the causal convolution (Mamba)",
    "dt_rank": "rank of the step (Δ) projection (Mamba)",
}

#: Every declared symbol, by name.
SYMBOLS: dict[str, sympy.Symbol] = {name: sympy.Symbol(name, positive=True, integer=True) for name in _DESCRIPTIONS}

B = SYMBOLS["B"]
T = SYMBOLS["T"]
d = SYMBOLS["d"]
L = SYMBOLS["L"]
V = SYMBOLS["V"]
h = SYMBOLS["h"]
d_head = SYMBOLS["d_head"]
n_kv = SYMBOLS["n_kv"]
d_ff = SYMBOLS["d_ff"]
T_max = SYMBOLS["T_max"]
W = SYMBOLS["W"]
n_experts = SYMBOLS["n_experts"]
top_k = SYMBOLS["top_k"]
n_shared = SYMBOLS["n_shared"]
d_expert = SYMBOLS["d_expert"]
r_q = SYMBOLS["r_q"]
r_kv = SYMBOLS["r_kv"]
d_rope = SYMBOLS["d_rope"]
d_nope = SYMBOLS["d_nope"]
d_v = SYMBOLS["d_v"]
L_dense = SYMBOLS["L_dense"]
C = SYMBOLS["C"]
T_src = SYMBOLS["T_src"]
L_dec = SYMBOLS["L_dec"]
n_buckets = SYMBOLS["n_buckets"]
n_types = SYMBOLS["n_types"]
r_img = SYMBOLS["r_img"]
r_patch = SYMBOLS["r_patch"]
c_in = SYMBOLS["c_in"]
n_labels = SYMBOLS["n_labels"]
d_inner = SYMBOLS["d_inner"]
d_state = SYMBOLS["d_state"]
d_conv = SYMBOLS["d_conv"]
dt_rank = SYMBOLS["dt_rank"]


def describe(name: str) -> str:
    """The one-line meaning of a declared symbol."""
    return _DESCRIPTIONS[name]


def symbol(name: str) -> sympy.Symbol:
    """A declared symbol by name, or a new positive-integer symbol for a new architecture.

    >>> symbol("d") is d
    True
    >>> symbol("r_lora")
    r_lora
    """
    if name in SYMBOLS:
        return SYMBOLS[name]
    return sympy.Symbol(name, positive=True, integer=True)
