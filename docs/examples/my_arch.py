"""A builder of your own: a GPT-J-style decoder (parallel attention and MLP, one shared LayerNorm).

``costmodel derive docs/examples/my_arch.py:build`` prints its formulas; ``costmodel estimate
docs/examples/my_arch.py:build --set L=28 --set d=4096 --set h=16 --set V=50400 --set T=2048`` its numbers.
"""

from costmodel.kit import GraphBuilder
from costmodel.symbols import B, L, T, V, d, h
from costmodel_graphs.blocks import causal_self_attention, decoder, gelu_mlp, parallel_layer


def build(*, dtype: str = "bf16"):
    b = GraphBuilder("my_arch", dtype=dtype, b=B, t=T, s=T, d=d, v=V, h=h, k=d / h, f=4 * d)

    def layer(b, x):
        return parallel_layer(
            b,
            x,
            lambda b, x: causal_self_attention(b, x, bias=False, dropout_p=False),
            lambda b, x: gelu_mlp(b, x, bias=True, dropout_p=False),
        )

    return decoder(b, [("layers", L, layer)], tied=False, rms=False)
