"""Example prices of a device-hour: ``costmodel/devices/data/prices.json``, each dated and with its source.

A run is priced only when its user asks (``price_per_hour``): a number (US dollars per device-hour), ``"list"``
(the table's first entry for the run's device) or an entry's name (``"deepseek-v3-h800"``); a report that
uses an entry names it, its date and its source (``time.price_source``).

>>> p = price("deepseek-v3-h800", "h100-sxm")
>>> p.usd_per_hour, p.date
(Fraction(2, 1), '2024-12')
>>> price("list", "h100-sxm").name
'aws-capacity-block-h100'
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources

from ..errors import CostModelError, closest
from ..sizes import parse_rate

WHERE = "costmodel/devices/data/prices.json"


@dataclass(frozen=True)
class Price:
    """One dated example price of a device-hour (US dollars) and where it comes from."""

    name: str
    hardware: str
    usd_per_hour: Fraction
    date: str
    about: str
    source: str

    def describe(self) -> str:
        """One line a report prints beside a cost."""
        return f"${float(self.usd_per_hour):g} per device-hour: {self.name} ({self.date}; {self.about}; {self.source})"


@functools.lru_cache(maxsize=1)
def prices() -> dict[str, Price]:
    """The built-in table, by entry name."""
    data = json.loads(resources.files("costmodel").joinpath("devices/data/prices.json").read_text(encoding="utf-8"))
    out = {}
    for name, e in data["prices"].items():
        missing = [k for k in ("hardware", "usd_per_hour", "date", "about", "source") if not e.get(k)]
        if missing:
            raise CostModelError(f"{WHERE}: price {name!r} has no {', '.join(missing)}")
        usd = parse_rate(e["usd_per_hour"], f"{WHERE}: {name}.usd_per_hour")
        out[name] = Price(name, e["hardware"], usd, e["date"], e["about"], e["source"])
    return out


def price(spec: str, hardware: str) -> Price:
    """The entry ``spec`` names, or (``spec == "list"``) the first entry for ``hardware``."""
    table = prices()
    if spec == "list":
        found = next((p for p in table.values() if p.hardware == hardware), None)
        if found is None:
            priced = sorted({p.hardware for p in table.values()})
            raise CostModelError(
                f"--price-per-hour list: the price table ({WHERE}) has no entry for {hardware!r}; entries price "
                f"{', '.join(priced)}; give a price in US dollars per device-hour (--price-per-hour 2.5) or an "
                f"entry by name ({', '.join(table)})"
            )
        return found
    if spec not in table:
        raise CostModelError(
            f"--price-per-hour: expected US dollars per device-hour, 'list' or an entry of the price table "
            f"({', '.join(table)}), received {spec!r}{closest(spec, table)}"
        )
    return table[spec]
