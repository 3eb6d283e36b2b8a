"""A restricted parser for numbers and expressions typed by users.

Strings from the command line or a config file never reach ``eval`` or
``sympify``. This parser admits only numbers (``4096``, ``3e11``, ``1.5e9``),
declared symbol names, ``+ - * / ^ **`` and parentheses, and builds the sympy
expression itself. Everything else is a :class:`CostModelError`.

>>> parse_expr("8*d/3")
8*d/3
>>> parse_expr("3e11")
300000000000
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import sympy

from . import sizes
from .errors import CostModelError, closest
from .symbols import SYMBOLS

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>\*\*|[-+*/^()]))",
    re.ASCII,
)
MAX_LENGTH = 200
#: What a user's expression may cost once its known numbers are in: the totals multiply it by other sizes and
#: expand, so a short string such as ``(d+h+V+T+B)**64`` must be refused before any of that starts.
MAX_DEGREE = 4
MAX_TERMS = 32
#: While parsing, before any number is known: a bound on degree and on the bits of every coefficient
#: (10^120: far above any size, far below the towers ``((9**64)**64)**64`` that take minutes to build).
MAX_PARSE_DEGREE = 64
#: An architecture's own sizes (GraphBuilder: axis sizes, repeat counts, tokens per step) are written by
#: people who know the model, so their budget is wider (a ViT's B·((r_img/r_patch)² + 1) is degree 5).
MAX_GRAPH_DEGREE = 16
MAX_GRAPH_TERMS = 256
MAX_BITS = 400


def parse_number(text: str, what: str = "number") -> sympy.Rational:
    """An exact number from decimal text: ``"3e11"`` → 300000000000, ``"0.5"`` → 1/2 (see :mod:`costmodel.sizes`)."""
    value = sizes.parse_number(text, what)
    return sympy.Rational(value.numerator, value.denominator)


def parse_int(text: str, what: str, minimum: int = 1) -> int:
    """A whole number ≥ ``minimum`` from text (``"3e11"`` and ``"300B"`` are allowed; ``"0.5"`` is not)."""
    return sizes.parse_count(text, what, minimum=minimum)


def parse_expr(text: str, symbols: Mapping[str, sympy.Symbol] = SYMBOLS, what: str = "expression") -> sympy.Expr:
    """Parse ``text`` with the grammar: expr := term (('+'|'-') term)*, term := unary
    (('*'|'/') unary)*, unary := '-' unary | power, power := atom (('^'|'**') unary)?,
    atom := number | symbol | '(' expr ')'."""
    if not isinstance(text, str) or not text.strip():
        raise CostModelError(f"{what}: expected an expression such as 8*d/3, received {text!r}")
    if len(text) > MAX_LENGTH:
        raise CostModelError(f"{what}: expression longer than {MAX_LENGTH} characters")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CostModelError(
                f"{what}: unexpected {text[pos:].strip()[:20]!r} in {text!r}; "
                f"expected numbers, symbols and + - * / ^ ( )"
            )
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    tokens.append(("end", ""))
    i = 0

    def peek() -> tuple[str, str]:
        return tokens[i]

    def take() -> tuple[str, str]:
        nonlocal i
        i += 1
        return tokens[i - 1]

    depth = 0

    def expr() -> sympy.Expr:
        value = term()
        while peek() in (("op", "+"), ("op", "-")):
            value = value + term() if take()[1] == "+" else value - term()
        return value

    def term() -> sympy.Expr:
        value = unary()
        while peek() in (("op", "*"), ("op", "/")):
            if take()[1] == "*":
                value = value * unary()
            else:
                divisor = unary()
                if divisor == 0:
                    raise CostModelError(f"{what}: division by zero in {text!r}")
                value = value / divisor
        return value

    def unary() -> sympy.Expr:
        if peek() == ("op", "-"):
            take()
            return -unary()
        if peek() == ("op", "+"):
            take()
            return unary()
        return power()

    def power() -> sympy.Expr:
        base = atom()
        if peek() in (("op", "^"), ("op", "**")):
            take()
            exponent = unary()
            if not (exponent.is_Integer and abs(exponent) <= 64):
                raise CostModelError(
                    f"{what}: exponents must be whole numbers up to 64, received {exponent} in {text!r}"
                )
            degree, _, bits = cost(base)  # bounded before sympy builds it: a tower 9**64**64 is never computed
            n = abs(int(exponent))
            if degree * n > MAX_PARSE_DEGREE:
                raise CostModelError(
                    f"{what}: degree {degree * n} in {text!r}; expected expressions of degree "
                    f"at most {MAX_PARSE_DEGREE}"
                )
            if bits * n > MAX_BITS:
                raise CostModelError(
                    f"{what}: a number of about 10^{int(bits * n * 0.30103)} in {text!r}; "
                    f"expected numbers under 10^{int(MAX_BITS * 0.30103)}"
                )
            return base**exponent
        return base

    def atom() -> sympy.Expr:
        nonlocal depth
        token, value = take()
        if token == "num":
            return parse_number(value, what)
        if token == "name":
            if value not in symbols:
                raise CostModelError(
                    f"{what}: unknown symbol {value!r} in {text!r}{closest(value, symbols)}; "
                    f"known: {', '.join(sorted(symbols))}"
                )
            return symbols[value]
        if (token, value) == ("op", "("):
            depth += 1
            if depth > 32:
                raise CostModelError(f"{what}: parentheses nested too deeply in {text!r}")
            inner = expr()
            if take() != ("op", ")"):
                raise CostModelError(f"{what}: unbalanced parentheses in {text!r}")
            depth -= 1
            return inner
        raise CostModelError(f"{what}: unexpected {value or 'end of input'!r} in {text!r}")

    result = expr()
    if peek()[0] != "end":
        raise CostModelError(f"{what}: unexpected {peek()[1]!r} in {text!r}")
    if cost(result)[2] > MAX_BITS:
        raise CostModelError(f"{what}: a number over 10^{int(MAX_BITS * 0.30103)} in {text!r}")
    return result


def cost(e: sympy.Expr) -> tuple[int, int, int]:
    """A bound on what expanding ``e`` costs, read from its unexpanded tree: (total degree, terms, bits).

    The degree of a quotient by a non-constant counts the divisor's degree (a generous proxy for a
    rational function); terms bound the monomials of the expansion (a power of a sum of ``t`` terms to
    the ``n`` has at most C(t+n-1, n)); bits bound the numerator's and denominator's bit lengths of
    the coefficients.

    >>> from costmodel.symbols import SYMBOLS as S
    >>> cost((S["d"] + S["h"] + S["V"]) ** 3)
    (3, 10, 6)
    """
    if e.is_Rational:
        return 0, 1, int(e.p).bit_length() + int(e.q).bit_length() - 1
    if e.is_Symbol:
        return 1, 1, 0
    if e.is_Add:
        parts = [cost(a) for a in e.args]
        return max(p[0] for p in parts), sum(p[1] for p in parts), max(p[2] for p in parts) + len(parts).bit_length()
    if e.is_Mul:
        degree, terms, bits = 0, 1, 0
        for a in e.args:
            d, t, b = cost(a)
            degree, terms, bits = degree + d, terms * t, bits + b
        return degree, terms, bits
    if e.is_Pow and e.exp.is_Integer:
        d, t, b = cost(e.base)
        n = abs(int(e.exp))
        return d * n, math.comb(t + n - 1, n) if t > 1 else 1, b * n
    return sum(cost(a)[0] for a in e.args) or 1, 1, 0  # not built by this parser (a caller's own expression)


def check_budget(e: object, what: str, *, max_degree: int = MAX_DEGREE, max_terms: int = MAX_TERMS) -> None:
    """Refuse an expression whose expansion would exceed ``max_degree`` or ``max_terms`` (a user's
    expression: :data:`MAX_DEGREE`, :data:`MAX_TERMS`; substitute the numbers you know first: a power of
    numbers is one number)."""
    if not isinstance(e, sympy.Expr) or e.is_Number:
        return
    degree, terms, bits = cost(e)
    if degree > max_degree or terms > max_terms or bits > MAX_BITS:
        raise CostModelError(
            f"{what}: {e if len(str(e)) < 60 else str(e)[:57] + '...'} expands to degree "
            f"{degree} with up to {terms:,} terms; expected at most degree {max_degree} and "
            f"{max_terms} terms once the known sizes are substituted"
        )


def parse_setting(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` from ``--set``: VALUE is true/false, a bare name (``fp32``) or a restricted expression."""
    name, eq, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name, re.ASCII) or not value:
        raise CostModelError(f"--set: expected NAME=VALUE such as d_ff=8*d/3, received {text!r}")
    return name, parse_value(name, value)


def parse_value(name: str, value: str) -> object:
    """The value of a setting typed as text: ``true``/``false``, a bare name (``fp32``), or a restricted
    expression (whole numbers become ints)."""
    value = value.strip()
    if not value:
        raise CostModelError(f"setting {name}: expected a value, received an empty string")
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if re.fullmatch(r"[A-Za-z_][A-Za-z_0-9-]*", value, re.ASCII) and value not in SYMBOLS:
        return value  # a name (dtype=fp32); options that take sizes refuse it
    expr = parse_expr(value, what=f"--set {name}")
    return int(expr) if expr.is_Integer else expr
