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

import re
from collections.abc import Mapping

import sympy

from . import sizes
from .errors import CostModelError, closest
from .symbols import SYMBOLS

_TOKEN = re.compile(r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>\*\*|[-+*/^()]))", re.ASCII)
MAX_LENGTH = 200


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
            raise CostModelError(f"{what}: unexpected {text[pos:].strip()[:20]!r} in {text!r}; "
                                 f"expected numbers, symbols and + - * / ^ ( )")
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
                raise CostModelError(f"{what}: exponents must be whole numbers up to 64, received {exponent} in {text!r}")
            return base ** exponent
        return base

    def atom() -> sympy.Expr:
        nonlocal depth
        token, value = take()
        if token == "num":
            return parse_number(value, what)
        if token == "name":
            if value not in symbols:
                raise CostModelError(f"{what}: unknown symbol {value!r} in {text!r}{closest(value, symbols)}; "
                                     f"known: {', '.join(sorted(symbols))}")
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
    return result


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
