"""Formulas compiled once: named expressions (``quantities``), their Python and JavaScript code, the
runtime that evaluates them without sympy (exact, checked int64, wide integers, in chunks) and their disk cache."""
