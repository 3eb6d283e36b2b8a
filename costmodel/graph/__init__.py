"""The graph layer: einops patterns, the cost record, the op registry and its rules, the builder,
analyses of a graph and passes that rewrite one. Nothing here knows memory policies, devices or reports."""
