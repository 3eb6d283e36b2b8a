"""The memory layer: model states (precision × optimizer), activations under recompute, peak by
liveness, inference weights and KV cache, parallel layouts, per-device memory and "does it fit?".

The package imports nothing itself, so :mod:`costmodel.options.policies` (plain tables, no sympy) can be
read at start-up."""
