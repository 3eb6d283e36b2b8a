"""The README's rendered formula is what the engine derives (``python scripts/readme_formula.py --write``)."""

import importlib.util
from pathlib import Path

import sympy

import costmodel

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "readme_formula.py"


def _script():
    spec = importlib.util.spec_from_file_location("readme_formula", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_formula_is_the_scripts_output():
    s = _script()
    assert s.readme_block(s.README.read_text()) == s.block(), "run: python scripts/readme_formula.py --write"


def test_the_readme_formula_is_megatrons():
    # Narayanan et al. 2021, eq. 3: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)), with s = T and h = d here
    B, L, T, V, d = sympy.symbols("B L T V d", positive=True, integer=True)
    exact = costmodel.derive("gpt3-175b")["expressions"]["flops.matmul.training"]
    assert sympy.expand(exact - 72 * B * L * T * d**2 * (1 + T / (6 * d) + V / (12 * L * d))) == 0
    assert r"72 B L T d^{2} \bigl(1 + \frac{T}{6 d} + \frac{V}{12 L d}\bigr)" in _script().block()
