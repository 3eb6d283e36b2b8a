"""Model and hardware names in any case, when exactly one name matches (issue 27)."""

import pytest

import costmodel
from costmodel.errors import CostModelError


def test_model_names_any_case():
    assert costmodel.load("Llama3-8B").name == "llama3-8b"
    assert costmodel.load("META-LLAMA/Meta-Llama-3-8B").name == "llama3-8b"  # a preset's HF id, another case
    with pytest.raises(CostModelError, match="unknown model 'Llama3-9B'"):
        costmodel.load("Llama3-9B")


def test_hardware_names_any_case():
    assert costmodel.hardware("H100-SXM").name == "h100-sxm"
    with pytest.raises(CostModelError, match="did you mean"):
        costmodel.hardware("H100")  # two H100s: no unique match
