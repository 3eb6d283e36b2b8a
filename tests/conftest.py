"""Shared test settings: hypothesis profiles (CI is derandomised), the ``torch`` and ``slow`` markers.

A test module that imports torch or transformers (at its top or inside a test) is marked ``torch``, so
``pytest -m "not torch"`` runs the engine's own tests alone, with no torch installed. A test marked
``slow`` (the tracer's sweep over every transformers model type: minutes of torch.export) is skipped
unless ``COSTMODEL_SLOW=1``; the default run keeps a representative part of it.
"""

import os
import re
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# derived formulas are cached per test session, never in the user's cache
os.environ.setdefault("COSTMODEL_CACHE_DIR", tempfile.mkdtemp(prefix="costmodel-test-cache-"))

_USES_TORCH = re.compile(r"^\s*(import|from)\s+(torch|transformers)\b", re.M)
_seen: dict[str, bool] = {}


def _uses_torch(path: str) -> bool:
    if path not in _seen:
        try:
            with open(path, encoding="utf-8") as fh:
                _seen[path] = bool(_USES_TORCH.search(fh.read()))
        except OSError:
            _seen[path] = False
    return _seen[path]


def pytest_collection_modifyitems(config, items):
    slow = os.environ.get("COSTMODEL_SLOW", "") not in ("", "0")
    for item in items:
        if str(item.fspath).endswith(".py") and _uses_torch(str(item.fspath)):
            item.add_marker(pytest.mark.torch)
        if not slow and item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.skip(reason="slow: run with COSTMODEL_SLOW=1"))
