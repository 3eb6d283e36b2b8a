"""Derive with sympy, evaluate without it: formulas emitted as plain Python arithmetic.

:func:`source` writes expressions as the body of a Python function of the symbols' values, with common
subexpressions shared. The same text runs in two modes, chosen by the helpers it is given
(:data:`costmodel.formulas.compiled.EXACT`, :func:`costmodel.formulas.compiled.float_mode`): exact (Python ints and ``fractions.Fraction``: the numbers ``estimate``
gives) and vectorised (numpy float64 arrays: a sweep of millions of configs). ``max``, ``min``, ceilings,
floors, ``Mod`` and piecewise choices are helpers, so both modes are the same formula.

>>> import sympy
>>> from costmodel.formulas.compiled import EXACT
>>> from costmodel.symbols import B, d
>>> f = compile_exprs([B * d**2 / 3, sympy.ceiling(B / 2)], (B, d))
>>> f(EXACT, 2, 3)
[6, 1]
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence

import sympy
from sympy.printing.pycode import PythonCodePrinter

from .compiled import run_source
from .printer import ExactPrinter, Shared, hash_consed


class _Printer(ExactPrinter, PythonCodePrinter):
    """Python source with exact constants (``_F(p, q)``) and the mode's helpers for non-arithmetic functions
    (the walk: :class:`~costmodel.formulas.printer.ExactPrinter`)."""

    TARGET = "codegen"
    _print_Float = PythonCodePrinter._print_Float  # noqa: N815  (a float mode's formula keeps its floats)

    def integer(self, p: int) -> str:
        return str(p)

    def rational(self, p: int, q: int) -> str:
        return f"_F({p}, {q})"

    def power(self, base: str, n: int) -> str:
        return f"({base})**{n}"

    def product(self, numerator: list[str], denominator: list[str]) -> str:
        top = "*".join(f"({n})" for n in numerator) or "1"
        return f"_div({top}, {'*'.join(f'({d})' for d in denominator)})" if denominator else top

    def total(self, terms: list[str]) -> str:
        return "(" + " + ".join(terms) + ")"

    def call(self, fn: str, args: list[str]) -> str:
        if fn == "mod":
            return f"(({args[0]}) % ({args[1]}))"
        return f"_{fn}({', '.join(args)})"

    def where(self, condition: str, then: str, otherwise: str) -> str:
        return f"_where({condition}, {then}, {otherwise})"

    def relation(self, op: str, lhs: str, rhs: str) -> str:
        return f"(({lhs}) {op} ({rhs}))"

    def symbol(self, s: sympy.Symbol) -> str:
        return _name(s)


@functools.lru_cache(maxsize=4096)
def _name(s: sympy.Symbol) -> str:
    return "v_" + "".join(c if c.isalnum() else "_" for c in str(s))


class _Shared(Shared, _Printer):
    """The printer of :func:`_hash_consed`: Python with shared subexpressions by name."""


#: Up to this many expressions, sympy's ``cse`` writes the source (it also pulls common sub-sums out of
#: sums, which costs more than the derivation for thousands of liveness points); above it, shared
#: subtrees are named by hash-consing only (:func:`~costmodel.formulas.printer.hash_consed`). Both give the
#: same exact numbers; float mode may differ in the last bit where ``cse`` regrouped a sum.
SYMPY_CSE_LIMIT = 1000


def _hash_consed(exprs: Sequence[sympy.Basic]) -> tuple[list[str], list[str]]:
    """(definitions ``_xN = ...``, printed expressions): every subexpression met more than once computed once."""
    printer = _Shared({}, {"fully_qualified_modules": False})
    return hash_consed(exprs, printer, lambda name, text: f"    {name} = {text}")


def free_symbols(exprs: Iterable[object]) -> set[sympy.Symbol]:
    """The symbols of ``exprs`` (anything without ``free_symbols`` has none): one walk over the distinct
    subtrees, where ``e.free_symbols`` walks every occurrence again (thousands of liveness points sharing
    their terms).

    >>> from costmodel.symbols import B, d
    >>> sorted(free_symbols([B * d + 1, 2 * d, 3]), key=str)
    [B, d]
    """
    exprs = list(exprs)
    out: set[sympy.Symbol] = set()
    for e in _distinct(exprs, lambda e: _unites_args(type(e))):
        if not _unites_args(type(e)):  # a symbol, or a node that binds its own (sympy's answer)
            out |= e.free_symbols
    out |= {s for e in exprs if not isinstance(e, sympy.Basic) for s in getattr(e, "free_symbols", ())}
    return out


def contains(expr: object, types: tuple[type, ...]) -> bool:
    """Whether a node of one of ``types`` is anywhere in ``expr``: ``expr.has(*types)`` over the distinct
    subtrees only (a shared term is not walked again).

    >>> from costmodel.symbols import B, d
    >>> contains(sympy.Max(B, d) + 1, (sympy.Max,)), contains(B * d, (sympy.Function,))
    (True, False)
    """
    return any(isinstance(e, types) for e in _distinct([expr], lambda e: True))


def _has_float(exprs: Iterable[object]) -> bool:
    """Whether a float (``sympy.Float``) is anywhere in ``exprs``."""
    return any(e.is_Float for e in _distinct(exprs, lambda e: True))


def _distinct(exprs: Iterable[object], descend) -> Iterator[sympy.Basic]:
    """Each distinct subtree of the sympy ``exprs`` once (a shared term is not walked again), entering the
    arguments of the nodes where ``descend`` says so."""
    seen: set[sympy.Basic] = set()
    stack = [e for e in exprs if isinstance(e, sympy.Basic)]
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        yield e
        if descend(e):
            stack.extend(a for a in e.args if isinstance(a, sympy.Basic))


_BASIC_FREE_SYMBOLS = sympy.Basic.__dict__["free_symbols"]


@functools.cache
def _unites_args(cls: type) -> bool:
    """Whether an instance of ``cls`` has Basic's ``free_symbols`` (the union over its arguments). Looked up in
    the class's own MRO: ``type(e).free_symbols`` would find a function class's metaclass property instead."""
    for k in cls.__mro__:
        if "free_symbols" in k.__dict__:
            return k.__dict__["free_symbols"] is _BASIC_FREE_SYMBOLS
    return False


def source(
    exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol], name: str = "f", *, exact: bool = False
) -> str:
    """``def name(h, <symbols>): ...; return [<exprs>]`` (``h``: the helpers of a mode).

    ``exact``: the source only ever runs in exact mode (:data:`costmodel.formulas.compiled.EXACT`): without a float
    among the expressions, shared subtrees are named by hash-consing whatever their number (ints and
    Fractions give the same numbers however a sum is grouped; ``cse`` is most of the time of a few hundred).
    """
    args = ", ".join(_name(s) for s in symbols)
    lines = [f"def {name}(h{', ' if args else ''}{args}):", "    _F, _div, _max, _min, _ceil, _floor, _where, _and = h"]
    if len(exprs) > SYMPY_CSE_LIMIT or (exact and not _has_float(exprs)):
        defined, printed = _hash_consed(exprs)
        lines += defined
    else:
        printer = _Printer({"fully_qualified_modules": False})
        replacements, reduced = sympy.cse(list(exprs), symbols=sympy.numbered_symbols("_x"), optimizations=None)
        lines += [f"    {_name(sym)} = {printer.text(expr)}" for sym, expr in replacements]
        printed = [printer.text(e) for e in reduced]
    lines.append("    return [" + ", ".join(printed) + "]")
    return "\n".join(lines) + "\n"


def compile_exprs(exprs: Sequence[sympy.Basic], symbols: Sequence[sympy.Symbol], *, exact: bool = False):
    """A Python function ``f(mode, *values)`` returning the expressions' values (see the module notes);
    ``exact``: it will only run in exact mode (:func:`source`)."""
    return run_source(source(exprs, symbols, exact=exact))  # our own generated source


# The modes (EXACT, float_mode, object_mode) live with the sympy-free formulas (:mod:`costmodel.formulas.compiled`), which
# evaluate the same generated source without importing this module.
