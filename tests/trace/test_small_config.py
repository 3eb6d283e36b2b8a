"""``small_config`` builds a model type's config small: per-layer lists of the class's default depth, which a
class's validation refuses beside the small layer count, are cut to it, each kind of layer kept."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from costmodel.tracer.hf import _per_layer, small_config


def test_a_per_layer_list_keeps_each_kind_of_layer():
    assert _per_layer(["mamba"] * 5 + ["hybrid"] + ["mamba"] * 3, 2) == ["mamba", "hybrid"]
    assert _per_layer(["a", "b", "c"], 2) == ["a", "b"]
    assert _per_layer(["a", "a", "a", "b"], 3) == ["a", "a", "b"]  # the first layers fill the rest, in order


def test_a_class_that_validates_its_layer_list_is_built_small():
    config = small_config("zamba2")  # 54 layers by default; "num_hidden_layers (2) must be equal to ... (54)"
    assert config.num_hidden_layers == 2 and len(config.layers_block_type) == 2
    assert set(config.layers_block_type) == {"linear_attention", "hybrid"}
