"""Check your own model: property tests of a model's formulas, for your pytest suite or ``costmodel check``.

* :func:`sizes` — a hypothesis strategy of valid sizes for a model's free symbols (heads divide the width,
  KV heads divide the heads, experts ≥ top-k, ``T <= T_max``...);
* :func:`assert_matches_numeric` — every derived term equals the graph counted op by op at drawn sizes;
* :func:`assert_invariants` — linear in B, grows with L, backward = 2 × forward for matmuls, training =
  forward + backward, parts sum to totals, the peak holds the states, the KV cache affine in C;
* :func:`assert_matches_torch` — against a PyTorch module a factory builds at the same sizes
  (``FlopCounterMode`` on meta, ``numel``, ``saved_tensors_hooks`` bytes);
* :func:`check` — all of them, as a :class:`Report` (what ``costmodel check`` prints).

Each ``assert_*`` raises ``AssertionError`` naming the property, the smallest failing sizes hypothesis shrank
to and each differing term; bad input (a missing file, a factory that raises) is a ``CostModelError``.
hypothesis comes with the ``verify`` extra (``pip install 'costmodel[verify]'``), torch with ``torch``.

>>> from costmodel.testing import assert_matches_numeric, assert_invariants
>>> assert_matches_numeric("gpt", examples=3)
>>> assert_invariants("llama", examples=3)
"""

from __future__ import annotations

from collections.abc import Mapping

from .pytorch import TERMS
from .results import Difference, Property, Report
from .run import check, invariant_properties, numeric_property, run_property, torch_properties
from .strategies import sizes
from .subject import Subject, subject

__all__ = [
    "sizes",
    "assert_matches_numeric",
    "assert_invariants",
    "assert_matches_torch",
    "check",
    "Report",
    "Property",
    "Difference",
    "Subject",
    "run_property",
    "TERMS",
]


def _raise(properties: list[Property], s: Subject) -> None:
    failed = [p for p in properties if not p.passed]
    if failed:
        raise AssertionError(f"{s.name}: " + "\n".join(p.text() for p in failed))


def assert_matches_numeric(
    model: object,
    *,
    examples: int = 20,
    seed: int = 0,
    settings: Mapping[str, object] | None = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> None:
    """Every derived term (parameters, FLOPs, matmul FLOPs, bytes) of ``model`` equals its graph counted op by
    op at up to ``examples`` drawn sizes; else ``AssertionError`` with the shrunk sizes and the ops that differ.
    ``settings`` shapes or pins the model as ``--set`` does, ``ranges`` bounds the draws (``{"d": (8, 64)}``)."""
    s = subject(model, settings)
    _raise([numeric_property(s, examples=examples, seed=seed, ranges=ranges)], s)


def assert_invariants(
    model: object,
    *,
    examples: int = 20,
    seed: int = 0,
    settings: Mapping[str, object] | None = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> None:
    """Every invariant of :mod:`costmodel.testing.invariants` holds for ``model`` at up to ``examples`` drawn
    sizes; else ``AssertionError`` naming the invariant, the shrunk sizes and the terms that break it."""
    s = subject(model, settings)
    _raise(invariant_properties(s, examples=examples, seed=seed, ranges=ranges), s)


def assert_matches_torch(
    model: object,
    factory: object,
    *,
    examples: int = 10,
    seed: int = 0,
    terms: tuple[str, ...] = TERMS,
    settings: Mapping[str, object] | None = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> None:
    """``model`` equals the PyTorch module ``factory(**sizes)`` builds (a function or ``file.py:function``
    returning ``(module, example_inputs)``) at up to ``examples`` drawn sizes, on each of ``terms``
    (parameters by ``numel``, matmul FLOPs by ``FlopCounterMode`` on meta, forward and forward + backward,
    activation bytes by ``saved_tensors_hooks``); else ``AssertionError`` with the shrunk sizes and the terms."""
    s = subject(model, settings)
    _raise(torch_properties(s, factory, examples=examples, seed=seed, terms=tuple(terms), ranges=ranges), s)
