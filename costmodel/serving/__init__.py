"""Serving at the request level: engine profiles, the step time of a mixed batch, the scheduler's simulation, the
analytic solver, the metrics a user reads (TTFT, TPOT, ITL, E2E percentiles, goodput, $/M tokens) and the serving
planner.

The stage sits beside ``render`` (both read what ``sections`` derived; neither imports the other) and below
``verbs``: ``costmodel.serve`` is the verb that puts them together.
"""
