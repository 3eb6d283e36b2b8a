"""The public verbs refuse what they cannot use, with a CostModelError (issue 31, items 16 and 20): options that
are not an Options (no silent defaults), settings given as a string, a sweep's grid of None and metrics given
as one string (not iterated letter by letter)."""

from __future__ import annotations

import pytest

import costmodel


@pytest.mark.parametrize("bad", [object(), "batch=2", 3])
def test_options_that_are_not_options_are_refused(bad):
    with pytest.raises(costmodel.CostModelError, match="options: expected an Options"):
        costmodel.estimate("gpt2-small", options=bad)


def test_options_as_a_mapping_still_work():
    assert costmodel.estimate("gpt2-small", options={"batch": 2})["config"]["B"] == 2


@pytest.mark.parametrize("verb", [costmodel.estimate, costmodel.derive])
def test_settings_as_a_string_are_refused(verb):
    with pytest.raises(costmodel.CostModelError, match="settings: expected a mapping"):
        verb("gpt2-small", settings="d=5")


@pytest.mark.parametrize(
    "grid, metrics, message",
    [
        (None, ["params.total"], "sweep: grid: expected a list"),
        ("d=768", ["params.total"], "sweep: grid: expected a list"),
        ({"d": [768]}, "flops.training", "sweep: metrics: expected a list"),
    ],
)
def test_a_sweep_s_grid_and_metrics_are_lists(grid, metrics, message):
    with pytest.raises(costmodel.CostModelError, match=message):
        costmodel.sweep("gpt2-small", grid, metrics)


def test_a_grid_of_strings_still_works():
    got = costmodel.sweep("gpt2-small", ["d=768,1024"], ["params.total"])
    assert list(got["params.total"])[0] == 124_439_808
