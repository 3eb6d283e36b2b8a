"""costmodel: derive FLOPs, bytes, parameters and memory of neural networks from op graphs.

A model is a ``networkx.DiGraph`` of ops, each declared by its einops pattern;
costs are derived symbolically (sympy) and stay exact until numbers are
substituted.

>>> from costmodel import GraphBuilder, totals, symbols as s
>>> b = GraphBuilder("linear", b=s.B, t=s.T, d=s.d, f=s.d_ff)
>>> y = b.matmul("fc", b.input("x", "b t d", dtype="bf16"), "b t d, d f -> b t f")
>>> totals(b.graph).training.matmul_flops
6*B*T*d*d_ff
"""

from . import symbols
from .analysis import (
    Totals,
    breakdown,
    evaluate,
    intensity,
    leading_term,
    limit,
    totals,
)
from .builder import GraphBuilder, Tensor
from .cost import Cost, OpCost, Saved
from .errors import CostModelError
from .models import Family, Model, Preset, load
from .ops import Conventions, Op, rule

__version__ = "0.1.0"

__all__ = [
    "Conventions",
    "Cost",
    "CostModelError",
    "Family",
    "GraphBuilder",
    "Model",
    "Op",
    "OpCost",
    "Preset",
    "Saved",
    "Tensor",
    "Totals",
    "breakdown",
    "evaluate",
    "intensity",
    "leading_term",
    "limit",
    "load",
    "rule",
    "symbols",
    "totals",
]
