"""The kit for writing architectures and op rules: everything a family in ``graphs/`` (or your own
package) builds with. Users of the verbs need none of it.

>>> from costmodel.kit import GraphBuilder, totals, symbols as s
>>> b = GraphBuilder("mlp", b=s.B, t=s.T, d=s.d, f=s.d_ff)
>>> x = b.input("x", "b t d", dtype="bf16")
>>> with b.repeat("layers", s.L):                       # one subgraph with a count, never unrolled
...     u = b.elementwise("act", "gelu", b.matmul("up", x, "b t d, d f -> b t f"), "b t f")
...     x = b.matmul("down", u, "b t f, f d -> b t d")
>>> totals(b.graph).training.matmul_flops
12*B*L*T*d*d_ff
"""

from __future__ import annotations

from . import symbols
from .errors import CostModelError
from .families import Family, Model, Preset
from .families.hf import field
from .graph.analysis import Totals, breakdown, evaluate, intensity, leading_term, limit, subgraph_cost, totals
from .graph.builder import GraphBuilder, Tensor
from .graph.cost import Cost, OpCost, Param, Saved, dtype_bytes
from .graph.finetune import freeze, lora
from .graph.passes import flash_attention, fuse_elementwise
from .graph.registry import Kind, Op, data_operands, kind_of, op_cost, rule, weight_operand
from .graph.rules import (
    ELEMENTWISE,
    Elementwise,
    contraction,
    elements_of,
    elementwise_cost,
    matrix,
    register_elementwise,
    vector,
)
from .options import Counting
from .symbols import symbol

__all__ = [
    "ELEMENTWISE",
    "Cost",
    "CostModelError",
    "Counting",
    "Elementwise",
    "Family",
    "GraphBuilder",
    "Kind",
    "Model",
    "Op",
    "OpCost",
    "Param",
    "Preset",
    "Saved",
    "Tensor",
    "Totals",
    "breakdown",
    "contraction",
    "data_operands",
    "dtype_bytes",
    "elements_of",
    "elementwise_cost",
    "evaluate",
    "field",
    "flash_attention",
    "freeze",
    "fuse_elementwise",
    "intensity",
    "kind_of",
    "leading_term",
    "limit",
    "lora",
    "matrix",
    "op_cost",
    "register_elementwise",
    "rule",
    "subgraph_cost",
    "symbol",
    "symbols",
    "totals",
    "vector",
    "weight_operand",
]
