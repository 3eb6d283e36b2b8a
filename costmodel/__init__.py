"""costmodel: derive FLOPs, bytes, parameters, memory and time of neural networks from op graphs.

A model is a ``networkx.DiGraph`` of ops, each declared by its einops pattern; costs are derived
symbolically (sympy) and stay exact until numbers are substituted. The verbs:

>>> import costmodel
>>> r = costmodel.estimate("gpt2-small", batch=8, seq=1024)
>>> r["params"]["total"], r["flops"]["matmul"]["training"] == 3 * r["flops"]["matmul"]["forward"]
(124439808, True)
>>> costmodel.derive("gpt")["expressions"]["flops.six_nd"]
72*B*L*T*d**2 + 78*B*L*T*d + 12*B*T*d

``estimate``, ``derive``, ``compare``, ``sweep``, ``roofline``, ``fit`` and ``report`` take a model (a
preset or family name, a Hugging Face ``config.json``, ``file.py:builder``, or a :class:`Model` from
``load``) and :class:`Options` as keywords (``recompute="full"``, ``tp=2``, ``hardware="h100-sxm"``...);
a misspelt option is an error naming the closest. ``hardware`` lists devices, ``models`` the families and
presets, :mod:`costmodel.conventions` the named counting conventions. ``trace`` turns a PyTorch module into a
model (``torch.export`` with symbolic B and T; ``pip install costmodel[torch]``) and ``recover`` finds a
transformers config class's formulas in its sizes. ``check`` property-tests a model's formulas at drawn sizes
(op by op, invariants, against a PyTorch module): :mod:`costmodel.testing`, ``pip install costmodel[verify]``.
Writing architectures and op rules: :mod:`costmodel.kit`.
"""

from __future__ import annotations

import importlib
import sys as _sys

_ARGV = " ".join(getattr(_sys, "orig_argv", ())[1:3])
if _sys.argv[:1] == ["-m"] and _ARGV in ("-m costmodel", "-mcostmodel") or _ARGV.startswith("-mcostmodel "):
    # ``python -m costmodel`` (argv[0] is "-m" while the package is found): Ctrl-C during the imports below
    try:  # exits 130 without a traceback, as the installed script does
        import costmodel_entry  # noqa: F401  (installs its SIGINT handler when imported)
    except ImportError:  # a checkout without the top-level entry module on sys.path
        pass
del _ARGV

from . import conventions, units  # noqa: E402  (after the -m interrupt handler above)
from .errors import CostModelError  # noqa: E402
from .options import Counting, Layout, Options  # noqa: E402
from .version import __version__ as __version__  # noqa: E402

#: The verbs, imported on first use (deferred: sympy and networkx are most of a start-up, and a verb
#: that needs neither should not pay for them).
_VERBS = {
    "estimate": "costmodel.verbs.estimate",
    "derive": "costmodel.verbs.derive",
    "compare": ("costmodel.verbs.compare", "compare_conventions"),
    "sweep": "costmodel.verbs.sweep.stream",  # the verb streams; its derivation (verbs/sweep/derive.py) loads when needed
    "roofline": "costmodel.verbs.roofline",
    "fit": "costmodel.verbs.fit",
    "report": "costmodel.verbs.report",
    "load": "costmodel.families",
    "models": ("costmodel.families", "catalogue"),
    "Model": "costmodel.families",
    "hardware": "costmodel.devices.table",
    "trace": "costmodel.tracer",  # torch.export → a costmodel graph (torch is imported only when tracing)
    "recover": ("costmodel.tracer.recover", "recover"),
    "calibrate": ("costmodel.verbs.calibrate", "calibrate_file"),
    "plan": "costmodel.verbs.plan.plan",
    "serve": "costmodel.verbs.serve",
    "Serve": "costmodel.serving.spec",
    "serve_plan": "costmodel.verbs.plan.serving",
    "check": ("costmodel.testing.run", "check"),  # property tests of a model (hypothesis: the verify extra)
}

__all__ = [
    "estimate",
    "derive",
    "compare",
    "sweep",
    "roofline",
    "fit",
    "report",
    "load",
    "hardware",
    "models",
    "trace",
    "recover",
    "Options",
    "Model",
    "CostModelError",
    "Counting",
    "Layout",
    "conventions",
    "units",
    "calibrate",
    "plan",
    "serve",
    "Serve",
    "serve_plan",
    "check",
]


def __getattr__(name: str) -> object:
    target = _VERBS.get(name)
    if target is None:
        raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
