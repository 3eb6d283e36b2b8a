"""Predicted against measured runs: docs/validation.md."""
