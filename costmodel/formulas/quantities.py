"""Quantities: the numbers of a report as named expressions of a graph's symbols, derived once.

Every numeric key of an estimate (``flops.training``, ``memory_bytes.peak``, ``time.step_s``...) is an
expression; ``estimate`` substitutes numbers into it, ``sweep`` compiles it, ``derive`` prints it. One
derivation per number, so the doors cannot disagree.

Keys are shown as exact whole numbers unless listed in ``floats`` (seconds, rates, shares: a float) or
``numbers`` (an int when whole, else a float). A *choice* is a key whose value is the label of the largest
of several expressions (where the peak is, which pipeline stage is fuller); of equal ones the first wins,
or for keys in ``label_ties`` the alphabetically last label. ``info`` holds keys that are not numbers of
the model (strings, flags, the layout); a :class:`~costmodel.formulas.compiled.Text` there is filled in with the
evaluated keys and the values (a text that names a chosen stage). ``checks`` are relations that must hold
for a config (the global batch divides into micro-batches) with the message (a string or a ``Text``) to
give when one fails. Evaluation runs the generated :meth:`Quantities.formulas`, never sympy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from ..errors import CostModelError
from .compiled import Formulas, Text, verbatim
from .python import free_symbols, source


class maximum(sympy.Function):
    """The largest of its arguments, evaluated only when they are all numbers.

    sympy's ``Max`` compares symbolic arguments pairwise to drop dominated ones: quadratic, and slow for
    the hundred polynomials of a liveness peak. This one stays as written until numbers come in.
    """

    @classmethod
    def eval(cls, *args):
        if len(args) == 1:
            return args[0]
        if all(a.is_number for a in args):
            return max(args)
        return None

    def _latex(self, printer):
        return r"\max\left(" + ", ".join(printer._print(a) for a in self.args) + r"\right)"


class roundup(sympy.Function):
    """⌈x⌉, evaluated only for a number (a ZeRO shard or a per-iteration share rounded up to whole bytes)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_number:
            return sympy.ceiling(x)
        return None

    def _latex(self, printer):
        return r"\left\lceil " + printer._print(self.args[0]) + r" \right\rceil"


class choose(sympy.Function):
    """``choose(x, y, a, b)``: ``a`` where x ≥ y, else ``b`` (the fuller pipeline stage's numbers)."""

    nargs = 4

    @classmethod
    def eval(cls, x, y, a, b):
        if x.is_number and y.is_number:
            return a if x >= y else b
        return None


def whole(expr: sympy.Expr, *, force: bool = False) -> sympy.Expr:
    """Whole bytes: ``expr`` rounded up where a numeric fraction makes it fractional (a ZeRO shard of an odd
    count, 8-bit Adam's 513/512 bytes per parameter).

    A ratio of symbols (``d·n_kv/h``) is left as it is: it is a product of axis sizes, whole for every
    config ``check_values`` accepts. ``force``: round up whatever the expression (a per-iteration share
    ``(L − 1)/L`` of a tensor).
    """
    expr = sympy.expand(expr)
    if force:
        return expr if expr.is_Integer else roundup(expr)
    if any(not coeff.is_Integer for coeff in expr.as_coefficients_dict().values()):
        return roundup(expr)
    return expr


@dataclass
class Quantities:
    """Named expressions and how each is shown (see the module notes)."""

    exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    floats: set[str] = field(default_factory=set)
    numbers: set[str] = field(default_factory=set)
    choices: dict[str, tuple[tuple[sympy.Expr, ...], tuple[str, ...]]] = field(default_factory=dict)
    label_ties: set[str] = field(default_factory=set)
    info: dict[str, object] = field(default_factory=dict)
    checks: list[tuple[sympy.Basic, object]] = field(default_factory=list)
    #: False when the expressions are only evaluated (estimate), never printed: a section may then leave out what
    #: cannot change a number or a label (the points of a liveness peak another point always exceeds)
    shown: bool = True

    def add(self, key: str, expr: object, show: str = "int") -> None:
        """Add ``key``: ``show`` is ``"int"`` (exact whole number), ``"float"`` or ``"number"``."""
        self.exprs[key] = sympy.sympify(expr) if not isinstance(expr, sympy.Basic) else expr
        self.floats.discard(key)
        self.numbers.discard(key)
        if show == "float":
            self.floats.add(key)
        elif show == "number":
            self.numbers.add(key)
        elif show != "int":
            raise ValueError(f"show must be int, float or number, not {show!r}")
        self.info.pop(key, None)

    def update(self, other: Quantities) -> None:
        """Add every key of ``other`` (its keys win)."""
        for key in other.exprs:
            self.info.pop(key, None)
        for key in other.info:
            self.exprs.pop(key, None)
        self.exprs.update(other.exprs)
        self.floats = (self.floats - set(other.exprs)) | other.floats
        self.numbers = (self.numbers - set(other.exprs)) | other.numbers
        self.choices.update(other.choices)
        self.label_ties |= other.label_ties
        self.info.update(other.info)
        self.checks += other.checks

    # -- numbers ---------------------------------------------------------------------------------------

    def formulas(self) -> Formulas:
        """Every key as generated Python (:class:`~costmodel.formulas.compiled.Formulas`), written once: what
        ``estimate`` evaluates, what the disk cache keeps."""
        if "_formulas" in self.__dict__:
            return self.__dict__["_formulas"]
        checks = [(r, m if isinstance(m, Text) else Text(verbatim(str(m)))) for r, m in self.checks]
        texts = {k: v for k, v in self.info.items() if isinstance(v, Text)}
        exprs: list[sympy.Basic] = list(self.exprs.values())
        choices = []
        for key_, (cands, labels) in self.choices.items():
            exprs += cands
            choices.append((key_, list(labels), key_ in self.label_ties))
        exprs += [sympy.sympify(r) for r, _ in checks]
        for _, m in checks:
            exprs += list(m.fields.values())
        for t in texts.values():
            exprs += list(t.fields.values())
        symbols = tuple(sorted(free_symbols(exprs), key=str))
        order = [*self.exprs, *self.choices, *self.info]
        f = Formulas(
            source(exprs, symbols, exact=True),  # evaluate() runs it in exact mode only
            [str(s) for s in symbols],
            list(self.exprs),
            sorted(self.floats),
            sorted(self.numbers),
            choices,
            [(m.template, list(m.fields)) for _, m in checks],
            {k: (t.template, list(t.fields)) for k, t in texts.items()},
            {k: v for k, v in self.info.items() if not isinstance(v, Text)},
            order,
        )
        self.__dict__["_formulas"] = f
        return f

    def check(self, values: Mapping) -> None:
        """Raise the message of the first check that fails at ``values``."""
        self.evaluate(values)

    def value(self, key: str, values: Mapping) -> object:
        """The number (or label) of one key at ``values``."""
        return self.evaluate(values, keys=(key,))[key]

    def evaluate(self, values: Mapping, keys: tuple[str, ...] | None = None) -> dict[str, object]:
        """Every key (or ``keys``) at ``values`` (symbol → whole number), after the checks."""
        named = {}
        for s, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int) and not getattr(v, "is_Integer", False):
                raise CostModelError(f"cannot evaluate: {s} = {v!r}; expected a whole number")
            named[str(s)] = int(v)
        return self.formulas().evaluate(named, keys)
