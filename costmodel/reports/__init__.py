"""The report layer: the quantities of one run derived per key (:mod:`.quantities`), estimates, formulas,
named conventions side by side, sweeps, rooflines, documents (LaTeX, Markdown, HTML) and result objects."""
