"""A run prepared once (``run``) and the quantity sections of a run: counts, memory, fits, time, decode."""
