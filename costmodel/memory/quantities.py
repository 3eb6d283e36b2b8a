"""The memory section of a run: training memory (:mod:`.device`) or inference memory (:mod:`.serving`)."""

from __future__ import annotations

import networkx as nx

from ..formulas.quantities import Quantities
from ..options import Options
from .device import training_memory
from .serving import inference_memory


def memory_quantities(G: nx.DiGraph, options: Options, *, every_point: bool = True) -> Quantities:
    """Training or (``options.inference``) inference memory keys for one device (``every_point``: see
    :func:`training_memory`)."""
    if options.inference:
        return inference_memory(G, options)
    return training_memory(G, options, every_point=every_point)


__all__ = ["memory_quantities"]
