"""A user's own tests of docs/examples/my_attention.py, with costmodel's pytest plugin (docs/verify.md).

Run: ``python -m pytest docs/examples/test_my_attention.py`` (the plugin comes with costmodel through the
``pytest11`` entry point; needs ``pip install 'costmodel[verify,torch]'``).
"""

import os

from hypothesis import given, settings

from costmodel.testing import assert_invariants, assert_matches_numeric, sizes
from costmodel.testing.plugin import costmodel_check

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDER = os.path.join(HERE, "my_attention.py:build")


@costmodel_check("my_attention.py:build", against="my_attention.py:torch_module", examples=4)
def test_the_builder_matches_the_torch_module(costmodel_report):
    # the plugin has run every property before this body; the report is there to look at
    assert costmodel_report.passed and len(costmodel_report.properties) == 13


def test_formulas_and_invariants():
    assert_matches_numeric(BUILDER, examples=5)
    assert_invariants(BUILDER, examples=5)


@settings(max_examples=10, deadline=None)
@given(sizes(BUILDER))
def test_heads_divide_the_width(s):
    assert s["d"] % s["h"] == 0  # the drawn sizes keep the builder's k = d/h whole
