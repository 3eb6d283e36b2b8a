"""The graph layer: einops patterns, the cost record, the op registry and its rules, the builder,
analyses of a graph and passes that rewrite one. Nothing here knows memory policies, devices or reports."""

# The rules register themselves in the registry when their modules are imported: importing the package
# (which any import of costmodel.graph.* does first) makes every rule known.
from . import casts, composite, rules, ssm  # noqa: F401
