"""What a check finds: a :class:`Difference` per term that disagrees, a :class:`Property` per property run over
drawn sizes (passed, or the smallest failing sizes hypothesis shrank to), a :class:`Report` of them all.

Numbers stay exact ints (or ``Fraction``) until printed; ``Report.to_json`` writes ints as JSON integers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction


@dataclass(frozen=True)
class Difference:
    """One term that disagrees at some sizes: ``term`` (``flops.matmul.forward``), the value costmodel derived
    (``derived``), what the other side counted (``counted``, named by ``against``) and where it comes from
    (``detail``: the ops or modules that differ)."""

    term: str
    derived: object
    counted: object
    against: str
    detail: str = ""

    def text(self) -> str:
        """One line: the term, both numbers and their difference."""
        gap = ""
        if isinstance(self.derived, (int, Fraction)) and isinstance(self.counted, (int, Fraction)):
            gap = f" (costmodel - {self.against} = {_number(self.derived - self.counted)})"
        line = f"{self.term}: costmodel {_number(self.derived)}, {self.against} {_number(self.counted)}{gap}"
        return line + (f"; {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        return {
            "term": self.term,
            "derived": _jsonable(self.derived),
            "counted": _jsonable(self.counted),
            "against": self.against,
            "detail": self.detail,
        }


@dataclass
class Property:
    """One property checked over drawn sizes: its ``name``, every sizes it ran at (``tried``, in order), and
    when it failed the shrunk counterexample (``counterexample``) with the terms that differ there."""

    name: str
    tried: list[dict[str, int]] = field(default_factory=list)
    counterexample: dict[str, int] | None = None
    differences: list[Difference] = field(default_factory=list)
    skipped: str = ""  # why the property does not apply to this model ("no layers symbol L")

    @property
    def passed(self) -> bool:
        return self.counterexample is None

    def text(self) -> str:
        """The property, pass/fail/skipped, and the counterexample's differing terms (one per line)."""
        if self.skipped:
            return f"{self.name}: skipped ({self.skipped})"
        if self.passed:
            return (
                f"{self.name}: pass ({len(self.tried)} sizes, e.g. {sizes_text(self.tried[-1]) if self.tried else '-'})"
            )
        lines = [
            f"{self.name}: FAIL at {sizes_text(self.counterexample)} "
            f"(the smallest failing sizes found; {len(self.tried)} sizes tried)"
        ]
        lines += [f"  {d.text()}" for d in self.differences]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "skipped": self.skipped or None,
            "tried": self.tried,
            "counterexample": self.counterexample,
            "differences": [d.to_dict() for d in self.differences],
        }


@dataclass
class Report:
    """Every property of one check of ``model``: what ``costmodel check`` prints and :func:`check` returns."""

    model: str
    against: str | None
    examples: int
    seed: int
    properties: list[Property] = field(default_factory=list)
    #: How the other side's counts were read (what a transformers module computes beyond the architecture,
    #: taken off: :mod:`costmodel.testing.hf_extra`), one sentence each.
    conventions: list[str] = field(default_factory=list)
    #: The module compared with (``transformers LlamaForCausalLM``, or the factory's name), None without one.
    module: str | None = None

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.properties)

    @property
    def failed(self) -> list[Property]:
        return [p for p in self.properties if not p.passed]

    def text(self) -> str:
        head = f"costmodel check {self.model}" + (f" --against {self.against}" if self.against else "")
        head += f" ({self.examples} examples a property, seed {self.seed})"
        module = [f"module: {self.module}"] if self.module and self.module != self.against else []
        lines = [head, *module, *(f"convention: {c}" for c in self.conventions), *(p.text() for p in self.properties)]
        n = len(self.failed)
        lines.append(f"{n} of {len(self.properties)} properties failed" if n else "every property passed")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "against": self.against,
            "examples": self.examples,
            "seed": self.seed,
            "passed": self.passed,
            "module": self.module,
            "conventions": list(self.conventions),
            "properties": [p.to_dict() for p in self.properties],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def sizes_text(values: dict[str, int] | None) -> str:
    """``B=1, T=2, d=4`` (names in order)."""
    return ", ".join(f"{k}={v}" for k, v in sorted((values or {}).items()))


def _number(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, Fraction)):
        return str(v)
    if isinstance(v, Fraction) and v.denominator != 1:
        return str(v)
    return f"{int(v):,}"


def _jsonable(v: object) -> object:
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else str(v)
    return v
