"""The layout planner: search, memory per layout, ranking."""
