"""The tutorial's code for new element-wise functions and op kinds runs, and what it registers counts right."""

import re
from pathlib import Path

import sympy

from costmodel.graph import registry, rules
from costmodel.kit import GraphBuilder, totals
from costmodel.symbols import symbol

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def test_the_rules_section_registers_a_working_kind():
    text = TUTORIAL.read_text()
    section = text[text.index("## 4. The rules an author must know") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    kinds, functions = dict(registry.KINDS), dict(rules.ELEMENTWISE)
    try:
        exec(compile(code, str(TUTORIAL), "exec"), {})  # the project's own document, not user input
        n, t, i, j = (symbol(s) for s in ("n", "t", "i", "j"))
        b = GraphBuilder("outer", b=n, t=t, i=i, j=j)
        u, v = b.input("u", "b t i", dtype="bf16"), b.input("v", "b t j", dtype="bf16")
        y = b.op("pair", "outer", [u, v], "b t i, b t j -> b t i j")
        b.elementwise("act", "squared_relu", y, "b t i j")
        tot = totals(b.graph)
        # by hand: the outer product is one multiply-add per output element (2 n t i j), its backward two
        # contractions of the same size; squared_relu 2 FLOPs per element forward and backward as registered
        assert tot.forward.matmul_flops == 2 * n * t * i * j
        assert tot.backward.matmul_flops == 4 * n * t * i * j
        assert sympy.expand(tot.forward.flops - tot.forward.matmul_flops) == 2 * n * t * i * j
    finally:
        registry.KINDS.clear()
        registry.KINDS.update(kinds)
        rules.ELEMENTWISE.clear()
        rules.ELEMENTWISE.update(functions)
