"""How a serving engine spreads one replica over devices: :class:`Replica` (tp, pp, ep, attention-dp).

Serving maps expert parallelism differently from training. Training (:class:`~costmodel.options.Layout`) spreads
experts over data-parallel ranks (``ep`` divides ``dp``); an inference engine has no data-parallel gradient group,
and its expert group is the replica's own devices:

* **tp**: attention and the dense layers split over ``tp`` devices (Megatron's split, an all-reduce after each
  row-parallel matmul);
* **attention data parallelism** (``attention_dp`` = a; SGLang's ``--enable-dp-attention --dp a``, vLLM's
  ``--data-parallel-size a``): a groups of tp devices, each its own engine rank with its own scheduler, batch and
  KV pool; attention and the dense layers replicated over the groups;
* **ep**: with ``ep`` > 1 the routed experts are spread, whole, over the ``tp × attention_dp`` devices of the
  replica (vLLM's ``--enable-expert-parallel``: "EP size = TP × DP"; SGLang's ``--ep-size`` = its tp size), the
  tokens sent to them and back by an all-to-all on the tier that group spans (:mod:`costmodel.serving.step`). So
  ``ep`` is 1 (experts tensor-split over tp) or ``tp × attention_dp``; attention data parallelism needs ep (its
  ranks meet only in the expert layers).

A device holds 1/tp of the dense weights and 1/ep of the experts: the weight bytes of training's layout with tp
and ``ep / tp`` expert-parallel data ranks (:meth:`Replica.memory_layout`; each expert's matrices are split by tp
there and whole here, the same bytes), which is how the KV pool of one attention-dp rank is sized.

>>> r = Replica(tp=4, ep=8, attention_dp=2)
>>> r.devices, r.ranks, r.memory_layout().ep
(8, 2, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CostModelError
from ..options import Layout


@dataclass(frozen=True)
class Replica:
    """One serving replica's devices: ``tp`` × ``attention_dp`` × ``pp``, experts over ``ep`` (see the module
    notes)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    attention_dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "attention_dp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CostModelError(f"serve: {name} must be a whole number >= 1, received {v!r}")
        group = self.tp * self.attention_dp
        if self.ep not in (1, group):
            raise CostModelError(
                f"serve: expert parallelism spans the replica's tp × attention-dp devices (--ep 1 or --ep {group} "
                f"at tp {self.tp}, attention-dp {self.attention_dp}), received --ep {self.ep}"
            )
        if self.attention_dp > 1 and self.ep == 1:
            raise CostModelError(
                f"serve: attention data parallelism shards the experts over its tp × dp devices: add --ep {group}"
            )
        if self.attention_dp > 1 and self.pp > 1:
            raise CostModelError("serve: attention data parallelism with --pp is not modelled; drop one of them")

    @property
    def devices(self) -> int:
        """Devices of the replica: tp × attention_dp × pp."""
        return self.tp * self.attention_dp * self.pp

    @property
    def ranks(self) -> int:
        """Engine ranks of the replica, each its own scheduler and KV pool: attention_dp."""
        return self.attention_dp

    def check(self, experts: int | None, model: str = "model") -> None:
        """Whether a model with ``experts`` routed experts (None: a dense model) can be served so."""
        if experts is None and (self.ep > 1 or self.attention_dp > 1):
            raise CostModelError(
                f"serve: {model} routes no experts; --ep and --attention-dp are for mixture-of-experts models "
                f"(a dense model's data parallelism is --replicas)"
            )
        if experts is not None and self.ep > 1 and experts % self.ep:
            raise CostModelError(
                f"serve: --ep {self.ep} does not divide {model}'s {experts} routed experts (each device holds whole "
                f"experts, as many as every other)"
            )

    def memory_layout(self) -> Layout:
        """Training's layout whose per-device weight bytes are this replica's (see the module notes)."""
        e = self.ep // self.tp if self.ep > 1 else 1
        return Layout(tp=self.tp, pp=self.pp, dp=e, ep=e)


def routed_experts(values) -> int | None:
    """The model's routed experts per layer (its ``n_experts`` value), or None for a dense model."""
    n = next((int(v) for s, v in values.items() if str(s) == "n_experts"), None)
    return n if n is not None and n > 1 else None
