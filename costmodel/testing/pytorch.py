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

A factory may say how its modules' counts are to be read (:class:`Factory`'s ``off`` and ``cpu``, used by the
transformers comparison, :mod:`costmodel.testing.hf`): work its modules do beyond the architecture, taken off
FlopCounterMode's totals and stated in the report (``conventions``); and that a module which reads its data
(``.item()``), which meta tensors cannot, is counted on CPU at the same sizes.

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
    """A factory of modules at given sizes, from a function or ``path/to/file.py:function`` (executed).

    ``off(module, sizes)``: FLOPs the module counts beyond what the model describes, term → FLOPs, taken off
    FlopCounterMode's count (a convention of the module's implementation, each stated in ``conventions``).
    ``cpu``: a module whose forward reads its data on meta (``.item()``) is built and counted on CPU instead
    (only for modules whose FLOPs FlopCounterMode counts the same there: no SDPA, which it misses on CPU).
    """

    def __init__(
        self,
        factory: object,
        *,
        off: Callable | None = None,
        conventions: tuple[str, ...] = (),
        cpu: bool = False,
    ) -> None:
        self.off, self.conventions, self.cpu = off, tuple(conventions), cpu
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
        """``(module, args, kwargs)`` built at ``sizes`` (on ``device``: ``"meta"``, ``"cpu"``, or None: the
        default), the factory called with that device as torch's default."""
        torch = _torch()
        given = dict(sizes) if self.takes_all else {k: v for k, v in sizes.items() if k in self.accepts}
        where = f"against {self.name!r} at {_sizes(sizes)}"
        try:
            if device != "meta":
                torch.manual_seed(0)  # real weights: the same at every call
            if device is None:
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


class _ReadsDataError(Exception):
    """The module's forward read a meta tensor's data (``.item()``): it can only run on a real device."""


def _run(module, args, kwargs, where: str, meta_reads: bool = False):
    try:
        return module(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # the user's module: one line
        if meta_reads and "meta tensors" in str(exc):
            raise _ReadsDataError(str(exc)) from None
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
    (the module's), ``device`` (``meta``, or ``cpu`` where the factory allows it and meta cannot run the
    module), ``off`` (what was taken off each term: the factory's ``off``), ``params.by_module`` and
    ``flops.by_module`` (parameters and FlopCounterMode's forward FLOPs per submodule, by its dotted name)."""
    try:
        out = _counts(factory, sizes, terms, "meta")
    except _ReadsDataError:
        out = _counts(factory, sizes, terms, "cpu")
    if "memory_bytes.activations" in terms:
        out["memory_bytes.activations"] = saved_bytes(factory, sizes)
    return out


def _counts(factory: Factory, sizes: Mapping[str, int], terms: tuple[str, ...], device: str) -> dict[str, object]:
    torch = _torch()
    from torch.utils.flop_counter import FlopCounterMode  # deferred: torch is optional, checked just above

    where = f"against {factory.name!r} at {_sizes(sizes)}"
    meta_reads = factory.cpu and device == "meta"
    out: dict[str, object] = {"device": device}
    module, args, kwargs = factory.make(sizes, device)
    out["dtype"] = module_dtype(module)
    out["params.total"] = sum(p.numel() for p in module.parameters())
    out["params.by_module"] = {
        name: sum(p.numel() for p in m.parameters()) for name, m in module.named_modules() if name
    }
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # tiny CPU ops: a thread pool only waits
    try:
        with FlopCounterMode(display=False) as forward:  # always: a module that cannot run its inputs is bad input
            _run(module, args, kwargs, where, meta_reads)
        out["flops.matmul.forward"] = forward.get_total_flops()
        out["flops.by_module"] = {  # FlopCounterMode names a module after its root's class: "Decoder.layers.0"
            k.partition(".")[2]: sum(v.values()) for k, v in forward.get_flop_counts().items() if "." in k
        }
        if "flops.matmul.training" in terms:
            module.zero_grad(set_to_none=True)
            with FlopCounterMode(display=False) as training:
                _loss(_run(module, args, kwargs, where, meta_reads), where).backward()
            out["flops.matmul.training"] = training.get_total_flops()
    finally:
        torch.set_num_threads(threads)
    off = factory.off(module, sizes) if factory.off is not None else {}
    for term, amount in off.items():
        if term in out:
            out[term] -= amount
    out["off"] = off
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
