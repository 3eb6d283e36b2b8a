"""The pytest plugin (entry point ``pytest11``, name ``costmodel``): check a model from your own test file.

.. code-block:: python

    from costmodel.testing.plugin import costmodel_check

    @costmodel_check("my_arch.py:build", against="my_arch.py:torch_module", examples=10)
    def test_my_arch(costmodel_report):
        assert costmodel_report.model.endswith("my_arch.py:build")

A test marked ``costmodel_check`` (``costmodel_check`` is ``pytest.mark.costmodel_check``) runs
:func:`costmodel.testing.check` first and fails with every failing property — its shrunk sizes and each
differing term — before its own body runs; the ``costmodel_report`` fixture hands it the
:class:`~costmodel.testing.Report`. A ``file.py:function`` is found beside the test file first, then from the
current folder. The marker takes :func:`~costmodel.testing.check`'s keywords (``against``, ``examples``,
``seed``, ``settings``, ``terms``, ``ranges``).
"""

from __future__ import annotations

import os

import pytest

costmodel_check = pytest.mark.costmodel_check


def pytest_configure(config) -> None:
    """Register the ``costmodel_check`` marker."""
    config.addinivalue_line(
        "markers",
        "costmodel_check(model, against=None, examples=10, seed=0, ...): check a costmodel model at drawn "
        "sizes (its formulas op by op, its invariants, and against a PyTorch factory) before the test runs",
    )


def _beside(spec: object, test_file: str) -> object:
    """``file.py:function`` resolved beside the test file when the file is there."""
    if not isinstance(spec, str):
        return spec
    path, colon, name = spec.rpartition(":")
    if colon and path.endswith(".py") and not os.path.isabs(path):
        here = os.path.join(os.path.dirname(test_file), path)
        if os.path.isfile(here):
            return f"{here}:{name}"
    return spec


@pytest.fixture
def costmodel_report(request):
    """The :class:`~costmodel.testing.Report` of the test's ``costmodel_check`` marker (run once per test)."""
    marker = request.node.get_closest_marker("costmodel_check")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: costmodel_report needs @costmodel_check(model, ...)")
    from costmodel.testing import check  # deferred: the plugin loads in every pytest run; the kit when used

    if len(marker.args) != 1:
        raise pytest.UsageError(f"{request.node.nodeid}: @costmodel_check takes one model, received {marker.args}")
    kwargs = dict(marker.kwargs)
    kwargs.setdefault("examples", 10)
    if "against" in kwargs:
        kwargs["against"] = _beside(kwargs["against"], str(request.node.fspath))
    return check(_beside(marker.args[0], str(request.node.fspath)), **kwargs)


@pytest.fixture(autouse=True)
def _costmodel_check(request):
    """Fail a ``costmodel_check`` test whose check fails, with the report's failing properties."""
    if request.node.get_closest_marker("costmodel_check") is None:
        yield
        return
    report = request.getfixturevalue("costmodel_report")
    if not report.passed:
        pytest.fail("\n".join(p.text() for p in report.failed), pytrace=False)
    yield
