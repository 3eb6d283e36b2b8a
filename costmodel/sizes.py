"""Numbers a user types, read exactly and without sympy: ``3e11``, ``300B``, ``8k``, ``80GB``.

Every value is a Python ``int`` or ``fractions.Fraction``, never a binary float. Suffixes:

* counts (``--tokens 300B``, ``--budget 3e23``, ``--batch 1k``): decimal, ``k`` = 10³, ``M`` = 10⁶,
  ``B``/``G`` = 10⁹, ``T`` = 10¹², ``P`` = 10¹⁵; ``Ki``/``Mi``/``Gi`` are powers of two;
* lengths (``--seq 8k``, ``--context 128k``): powers of two, as model cards write contexts
  (Llama 3.1's "128K" is 131,072): ``k``/``Ki`` = 2¹⁰, ``M``/``Mi`` = 2²⁰;
* memory (``80GB``, ``80GiB``): ``KB``/``MB``/``GB``/``TB`` decimal, ``KiB``/``MiB``/``GiB``/``TiB`` binary.

This module imports nothing heavier than ``fractions`` and ``re``: a cached estimate starts without sympy.
"""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import CostModelError

#: No size, count or rate a user types is anywhere near 10^30.
MAX_DIGITS = 30
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")

DECIMAL = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "B": 10**9,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
BINARY = {"": 1, "k": 2**10, "K": 2**10, "Ki": 2**10, "M": 2**20, "Mi": 2**20}
MEMORY = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_number(text: object, what: str = "number") -> Fraction:
    """An exact number from decimal text: ``"3e11"`` → 300000000000, ``"0.5"`` → 1/2.

    >>> parse_number("3e11"), parse_number("0.45")
    (Fraction(300000000000, 1), Fraction(9, 20))
    """
    if isinstance(text, bool):
        raise CostModelError(f"{what}: expected a number such as 4096 or 3e11, received {text!r}")
    if isinstance(text, (int, Fraction)):
        value = Fraction(text)
    else:
        t = str(text).strip()
        m = _NUMBER.fullmatch(t) if t.isascii() else None
        if m is None or len(t) > 40:
            raise CostModelError(f"{what}: expected a number such as 4096 or 3e11, received {text!r}")
        value = _decimal(t, m, what)
    if value and not Fraction(1, 10**MAX_DIGITS) <= abs(value) <= 10**MAX_DIGITS:
        raise CostModelError(
            f"{what}: {text!r} is out of range; expected a magnitude between 1e-{MAX_DIGITS} and 1e{MAX_DIGITS}"
        )
    return value


def _decimal(t: str, m: re.Match, what: str) -> Fraction:
    """``Fraction(t)``, once the exponent is known to be sane: ``1e99999999`` would build a 10^8-digit integer
    first (minutes) only to be out of range. The mantissa has at most 40 digits, so an exponent past
    ``MAX_DIGITS + 40`` either way is out of range whatever they are (or zero)."""
    exponent = (m.group(3) or "e0")[1:].lstrip("+-").lstrip("0")
    if len(exponent) > 4 or int(exponent or "0") > MAX_DIGITS + 40:
        if not any(c in "123456789" for c in m.group(1)):
            return Fraction(0)
        raise CostModelError(
            f"{what}: {t!r} is out of range; expected a magnitude between 1e-{MAX_DIGITS} and 1e{MAX_DIGITS}"
        )
    return Fraction(t)


def _split_suffix(text: str) -> tuple[str, str]:
    i = len(text)
    while i and text[i - 1].isalpha():
        i -= 1
    return text[:i].strip(), text[i:]


def parse_count(text: object, what: str = "value", *, minimum: int = 1, length: bool = False) -> int:
    """A whole number ≥ ``minimum``: ``4096``, ``3e11``, ``300B``, ``15T``; ``length=True``: ``8k`` = 8192.

    >>> parse_count("300B"), parse_count("15T"), parse_count("8k", length=True), parse_count("8k")
    (300000000000, 15000000000000, 8192, 8000)
    """
    if isinstance(text, bool):
        raise CostModelError(f"{what}: expected a whole number, received {text!r}")
    if isinstance(text, int):
        value = Fraction(text)
    else:
        raw = str(text).strip()
        number, suffix = _split_suffix(raw)
        units = BINARY if length else DECIMAL
        if suffix not in units or not number:
            kinds = (
                "k = 1024, M = 1024², as contexts are written"
                if length
                else "k, M, B, T (decimal) or Ki, Mi, Gi (binary)"
            )
            raise CostModelError(
                f"{what}: expected a whole number such as 4096, 3e11 or 300B (suffixes: {kinds}), received {text!r}"
            )
        value = parse_number(number, what) * units[suffix]
    if value.denominator != 1 or value < minimum:
        raise CostModelError(f"{what}: expected a whole number >= {minimum}, received {text!r}")
    if abs(value) > 10**MAX_DIGITS:
        raise CostModelError(f"{what}: {text!r} is out of range; expected at most 1e{MAX_DIGITS}")
    return int(value)


def parse_memory(text: object, what: str = "memory size") -> int:
    """Bytes from ``"80GB"`` (decimal), ``"80GiB"`` (binary), ``"8e10"`` or ``"141 GB"``.

    >>> parse_memory("80GB"), parse_memory("1.5GiB"), parse_memory("8e10")
    (80000000000, 1610612736, 80000000000)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        raw = str(text)
    elif isinstance(text, str):
        raw = text.strip()
    else:
        raise CostModelError(f"{what}: expected a size such as 80GB, received {text!r}")
    number, unit = _split_suffix(raw)
    unit = unit.upper()
    if unit not in MEMORY or not number:
        raise CostModelError(
            f"{what} {text!r}: expected a number with an optional unit ({', '.join(u for u in MEMORY if u)}), e.g. 80GB"
        )
    value = parse_number(number, what) * MEMORY[unit]
    if value <= 0:
        raise CostModelError(f"{what} {text!r}: expected a positive size")
    if not unit and value < 2**20:  # "80" is surely 80 GB, not 80 bytes: make the unit explicit
        raise CostModelError(f"{what} {text!r}: a bare number is bytes; expected a unit, e.g. {number}GB")
    return int(value)  # a fraction of a byte rounds down


def parse_rate(text: object, what: str) -> Fraction:
    """A positive exact number (a rate, a fraction such as an MFU)."""
    value = parse_number(text, what)
    if value <= 0:
        raise CostModelError(f"{what}: expected a positive number, received {text!r}")
    return value
