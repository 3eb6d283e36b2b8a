"""Numbers as people read them: seconds in the unit a person would say, bytes in GB and GiB, counts with
thousands separators, FLOPs in scientific form.

One set of rules for every door: the terminal, the LaTeX, Markdown and HTML reports, and the live page's
JavaScript (``render/assets/units.js`` is this module line by line; the browser tests compare the two on
the same numbers). Rounding is half away from zero on the exact binary value of a float (what JavaScript's
``toFixed``/``toExponential`` do), so both languages print the same digits.

>>> duration(787_500_000.0), duration(0.00117), nbytes(16_060_522_496)
('25 years', '1.17 ms', '16.06 GB (14.96 GiB)')
>>> sci(8.705e23), sci(1001), grouped(8030261248)
('8.705e+23', '1,001', '8,030,261,248')
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

#: Seconds in a minute, an hour, a day and a (Julian, 365.25-day) year.
MINUTE, HOUR, DAY, YEAR = 60, 3600, 86400, 31557600

#: Enough digits for the exact value of any double: each step below rounds once, where asked.
_EXACT = Context(prec=2000, rounding=ROUND_HALF_UP)


def grouped(n: int) -> str:
    """A whole number with thousands separators: ``1234567`` → ``'1,234,567'``."""
    return f"{int(n):,}"


def fixed(x: float, digits: int, group: bool = False) -> str:
    """``x`` with ``digits`` decimals (half away from zero on its exact value), optionally grouped."""
    d = Decimal(float(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=_EXACT)
    if d == 0:
        d = abs(d)  # no "-0.00"
    text = f"{d:,f}" if group else f"{d:f}"
    return text


def _exponent(x: float, digits: int) -> tuple[Decimal, int]:
    """(mantissa rounded to ``digits`` significant digits, decimal exponent) of ``x`` ≠ 0."""
    d = abs(Decimal(float(x)))
    e = d.adjusted()
    m = d.scaleb(-e, context=_EXACT).quantize(Decimal(1).scaleb(-(digits - 1)), rounding=ROUND_HALF_UP, context=_EXACT)
    if m >= 10:  # 9.9996 → 10.00: one more digit before the point
        m, e = m.scaleb(-1, context=_EXACT).quantize(Decimal(1).scaleb(-(digits - 1)), context=_EXACT), e + 1
    return m, e


def _strip(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def exponential(x: float, digits: int) -> str:
    """``x`` as ``m.mmme+XX`` with ``digits`` significant digits (``8.705e+23``)."""
    if x == 0:
        return "0." + "0" * (digits - 1) + "e+00" if digits > 1 else "0e+00"
    m, e = _exponent(x, digits)
    sign = "-" if x < 0 else ""
    return f"{sign}{m:f}e{'+' if e >= 0 else '-'}{abs(e):02d}"


def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, fixed or exponential as C's ``%g`` chooses, trailing zeros
    dropped: ``0.00117``, ``2.15e+06``."""
    x = float(x)
    if x == 0:
        return "0"
    _, e = _exponent(x, digits)
    if -4 <= e < digits:
        return _strip(fixed(x, digits - 1 - e))
    m, e = _exponent(x, digits)
    return f"{'-' if x < 0 else ''}{_strip(f'{m:f}')}e{'+' if e >= 0 else '-'}{abs(e):02d}"


def sci(x: int | float) -> str:
    """FLOPs and other large counts: whole numbers under a million in full (``1,001``), then ``3.131e+23``."""
    if float(x).is_integer() and abs(x) < 1e6:
        return grouped(int(x))
    return sig(float(x), 3) if abs(x) < 1e5 else exponential(float(x), 4)


def amount(x: float) -> str:
    """A quantity of some unit: 3 significant digits below 1000, whole and grouped above (``1,234``), in
    exponential form from 1e15."""
    return fixed(x, 0, True) if 1000 <= abs(x) < 1e15 else sig(x, 3)


def duration(seconds: float) -> str:
    """Seconds in the unit a person would say: µs, ms, s, min, h, days, years (365.25 days)."""
    s = float(seconds)
    if s < 1e-3:
        return f"{amount(s * 1e6)} µs"
    if s < 1:
        return f"{amount(s * 1e3)} ms"
    if s < 2 * MINUTE:
        return f"{amount(s)} s"
    if s < 2 * HOUR:
        return f"{amount(s / MINUTE)} min"
    if s < 2 * DAY:
        return f"{amount(s / HOUR)} h"
    if s < 2 * YEAR:
        return f"{amount(s / DAY)} days"
    return f"{amount(s / YEAR)} years"


def gb(n: int | float) -> str:
    """Bytes in decimal GB (1e9), two decimals: ``16.06 GB``."""
    return f"{fixed(n / 1e9, 2, True)} GB"


def nbytes(n: int | float) -> str:
    """Bytes with the unit named: decimal GB (1e9) and binary GiB (2^30)."""
    return f"{gb(n)} ({fixed(n / 2**30, 2, True)} GiB)"


def percent(share: float, digits: int = 1) -> str:
    """A share as a percentage: ``0.776`` → ``'77.6%'``."""
    return f"{fixed(100 * float(share), digits)}%"


def rate(x: float) -> str:
    """A rate (tokens/s) as a grouped whole number (exponential form from 1e15)."""
    return fixed(x, 0, True) if abs(x) < 1e15 else sig(x, 3)


def plural(n: int, word: str, many: str | None = None) -> str:
    """A count and its noun, singular for exactly one: ``plural(1, "device")`` → ``'1 device'``,
    ``plural(1024, "layer")`` → ``'1,024 layers'``; ``many`` names an irregular plural.

    >>> plural(1, "device"), plural(0, "op"), plural(2, "micro-batch", "micro-batches")
    ('1 device', '0 ops', '2 micro-batches')
    """
    return f"{grouped(n)} {word if n == 1 else (many or word + 's')}"


def devices(n: int) -> str:
    """``1 device``, ``8 devices``."""
    return plural(n, "device")
