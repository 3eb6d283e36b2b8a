"""What an implementation's modules keep for backward beyond the op rules (the ``fused`` implementation: nothing).

Placeholder: filled in by the transformers rules.
"""

from __future__ import annotations


def implementation_tensors(G, tensors, implementation, autocast):
    return dict(tensors)
