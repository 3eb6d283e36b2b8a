"""The public verbs, one module (or folder) each, every one ``(model, *, settings, options)``."""
