"""A PyTorch module counted the way the project's own tests count: the other side of ``assert_matches_torch``.

A *factory* gets each drawn size by its symbol's name (``factory(B=2, T=5, d=12, h=3, ...)``: the names its
signature takes, or all with ``**sizes``) and returns ``(module, example_inputs)``: inputs a tuple (positional),
a dict (keywords) or one tensor. At each drawn sizes:

* ``params.total`` = the sum of ``numel()`` of the module's parameters (a tied weight once);
* ``flops.matmul.forward`` and ``flops.matmul.training`` = ``torch.utils.flop_counter.FlopCounterMode`` over
  a forward, and over a forward and backward, with the module built on the ``meta`` device (shapes only; on
  CPU tensors torch 2.13 counts 0 FLOPs for scaled_dot_product_attention). The backward starts from the
  output's ``loss`` when it has one, else from the sum of its first tensor (a sum adds no matmul);
* ``memory_bytes.activations`` = the bytes of the distinct storages ``torch.autograd.graph.saved_tensors_hooks``
  sees over one forward on CPU (parameters and buffers left out), compared with the model's activations in
  the module's dtype (fp32: precision ``fp32``; bf16: ``bf16-pure``). Where a module keeps what a fused
  kernel does not (transformers' RMSNorm keeps its normalised tensor), the term differs by design: leave it
  out with ``terms=``.

torch is imported inside the functions only (``pip install 'costmodel[torch]'``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from ..errors import CostModelError
from ..families import load_builder

#: The terms a module can be compared on, in the order they are reported.
TERMS = ("params.total", "flops.matmul.forward", "flops.matmul.training", "memory_bytes.activations")

#: A module's floating dtype → the precision policy and graph dtype whose activations it keeps.
PRECISION_OF = {"float32": ("fp32", "fp32"), "bfloat16": ("bf16-pure", "bf16")}


def _torch():
    try:
        import torch  # deferred: torch is optional (pip install 'costmodel[torch]')
    except ImportError:
        raise CostModelError("checking against a PyTorch module needs torch: pip install 'costmodel[torch]'") from None
    return torch


class Factory:
    """A factory of modules at given sizes, from a function or ``path/to/file.py:function`` (executed)."""

    def __init__(self, factory: object) -> None:
        if isinstance(factory, str):
            self.name = factory
            fn = getattr(load_builder(factory).build, "__wrapped__", None)
            if fn is None:  # pragma: no cover - load_builder always wraps with functools.wraps
                raise CostModelError(f"against {factory!r}: no function")
        elif callable(factory):
            self.name = getattr(factory, "__qualname__", repr(factory))
            fn = factory
        else:
            raise CostModelError(f"against: expected a function or file.py:function, received {factory!r}")
        self.fn: Callable = fn
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = ()
        self.takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        self.accepts = {p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY}
        self.required = {
            p.name
            for p in params
            if (p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY) and p.default is inspect.Parameter.empty
        }

    def check_names(self, names: set[str]) -> None:
        """Every size the factory requires is a symbol that is drawn (else: bad input, before any draw)."""
        unknown = sorted(self.required - names)
        if unknown:
            raise CostModelError(
                f"against {self.name!r}: the factory requires {', '.join(unknown)}, which the model has no "
                f"symbol for; it is called with the model's sizes: {', '.join(sorted(names))}"
            )

    def make(self, sizes: Mapping[str, int], device: str | None):
        """``(module, args, kwargs)`` built at ``sizes`` (on ``device``: ``"meta"``, or the default)."""
        torch = _torch()
        given = dict(sizes) if self.takes_all else {k: v for k, v in sizes.items() if k in self.accepts}
        where = f"against {self.name!r} at {_sizes(sizes)}"
        try:
            if device is None:
                torch.manual_seed(0)
                made = self.fn(**given)
            else:
                with torch.device(device):
                    made = self.fn(**given)
        except CostModelError:
            raise
        except (Exception, SystemExit) as exc:  # the user's factory: one line, like any bad input
            raise CostModelError(f"{where}: the factory raised {type(exc).__name__}: {exc}") from None
        if not (isinstance(made, tuple) and len(made) in (2, 3) and isinstance(made[0], torch.nn.Module)):
            raise CostModelError(
                f"{where}: the factory returned {type(made).__name__}; expected (module, example_inputs) "
                "with module a torch.nn.Module"
            )
        module, inputs = made[0], made[1]
        if isinstance(inputs, torch.Tensor):
            args, kwargs = (inputs,), {}
        elif isinstance(inputs, (tuple, list)):
            args, kwargs = tuple(inputs), {}
        elif isinstance(inputs, Mapping):
            args, kwargs = (), dict(inputs)
        else:
            raise CostModelError(
                f"{where}: example_inputs is {type(inputs).__name__}; expected a tensor, a tuple of inputs or a dict"
            )
        if device is not None:
            module = module.to(device)
            move = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
            args, kwargs = tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}
        return module, args, kwargs


def _run(module, args, kwargs, where: str):
    try:
        return module(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # the user's module: one line
        raise CostModelError(f"{where}: the module's forward raised {type(exc).__name__}: {exc}") from None


def _loss(out, where: str):
    torch = _torch()
    loss = getattr(out, "loss", None)
    if not isinstance(loss, torch.Tensor):
        loss = None
        items = out.values() if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else [out]
        for item in items:
            if isinstance(item, torch.Tensor) and item.is_floating_point():
                loss = item
                break
    if loss is None or not loss.requires_grad:
        raise CostModelError(
            f"{where}: the module's output has no floating tensor that needs a gradient; expected a loss "
            "(an output with .loss) or a tensor computed from its parameters"
        )
    return loss if loss.dim() == 0 else loss.sum()


def module_dtype(module) -> str:
    """The name of the dtype of the module's first floating parameter (``float32``), or ``float32``."""
    for p in module.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


def torch_counts(factory: Factory, sizes: Mapping[str, int], terms: tuple[str, ...] = TERMS) -> dict[str, object]:
    """What PyTorch counts for the module ``factory`` makes at ``sizes``: each of ``terms``, plus ``dtype``
        (the module's), ``params.by_module`` and ``flops.by_module`` (parameters and FlopCounterMode's forward FLOPs
    per submodule, by its dotted name)."""
    _torch()
    from torch.utils.flop_counter import FlopCounterMode  # deferred: torch is optional, checked just above

    where = f"against {factory.name!r} at {_sizes(sizes)}"
    out: dict[str, object] = {}
    module, args, kwargs = factory.make(sizes, "meta")
    out["dtype"] = module_dtype(module)
    out["params.total"] = sum(p.numel() for p in module.parameters())
    out["params.by_module"] = {
        name: sum(p.numel() for p in m.parameters()) for name, m in module.named_modules() if name
    }
    with FlopCounterMode(display=False) as forward:  # always: a module that cannot run its inputs is bad input
        _run(module, args, kwargs, where)
    out["flops.matmul.forward"] = forward.get_total_flops()
    out["flops.by_module"] = {  # FlopCounterMode names a module after its root's class: "Decoder.layers.0"
        k.partition(".")[2]: sum(v.values()) for k, v in forward.get_flop_counts().items() if "." in k
    }
    if "flops.matmul.training" in terms:
        module.zero_grad(set_to_none=True)
        with FlopCounterMode(display=False) as training:
            _loss(_run(module, args, kwargs, where), where).backward()
        out["flops.matmul.training"] = training.get_total_flops()
    if "memory_bytes.activations" in terms:
        out["memory_bytes.activations"] = saved_bytes(factory, sizes)
    return out


def saved_bytes(factory: Factory, sizes: Mapping[str, int]) -> int:
    """Bytes of the distinct storages autograd saves for backward over one forward of the module on CPU,
    its parameters and buffers left out (every saved tensor is kept alive until the end, so no address is
    reused within the pass)."""
    torch = _torch()
    where = f"against {factory.name!r} at {_sizes(sizes)}"
    module, args, kwargs = factory.make(sizes, None)
    own = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}
    alive = []

    def pack(t):
        alive.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _run(module, args, kwargs, where)
    _loss(out, where).backward()  # the graph was complete
    return sum(saved.values())


def _sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
