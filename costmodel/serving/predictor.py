"""costmodel's step time behind other simulators' predictor interfaces, without depending on them.

* **SGLang's simulator / TensorRT-LLM's sim mode** keep their own scheduler and ask a predictor one question:
  :meth:`SGLangPredictor.predict_infer_time` — seconds for a batch given as a list of ``(new_tokens, past_kv)``
  pairs (also accepted: objects or mappings with ``extend_input_len``/``prefix_len``, SGLang's names for them).
* **Vidur** asks its execution-time predictor ``get_execution_time(batch, pipeline_stage)`` for an
  ``ExecutionTime`` record, its batch holding ``requests`` (each with ``num_processed_tokens``) and
  ``num_tokens`` (new tokens per request). :class:`VidurPredictor` answers with :class:`VidurTime`, which has
  Vidur's ``model_time`` (seconds), ``model_time_ms``, ``total_time`` and ``num_layers``; costmodel's own split of
  the step (:data:`~costmodel.serving.step.PARTS`) is in ``parts``, since Vidur's per-kernel fields (``mlp_layer_
  up_proj_execution_time`` …) do not map one to one onto a derived step and are not faked.

Both are built from a :class:`~costmodel.serving.step.StepModel` (:func:`replica_step` makes one for a model, a
device, a layout and an engine profile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..devices.table import Device
from ..errors import CostModelError
from ..families import Model
from ..memory.device import prepared
from ..options import Options
from ..symbols import B, C, T
from .batch import Entry
from .parallel import Replica
from .profiles import Profile
from .step import StepModel, step_model


def replica_step(
    m: Model,
    dev: Device,
    options: Options,
    prof: Profile,
    graph_sizes=None,
    imbalance: object = 1,
    replica: Replica | None = None,
) -> StepModel:
    """The step model of one replica of ``m`` on ``dev`` under ``options`` (tp, ep, weights_dtype) and ``prof``'s
    overheads (``imbalance``: the busiest expert-parallel device's load over the mean); ``graph_sizes``: the
    CUDA-graph sizes the scheduler pads to (default the profile's, up to max_num_seqs). ``replica``: serving's own
    mapping (tp, ep over tp × attention-dp: :mod:`costmodel.serving.parallel`) in place of the options' layout."""
    layout = options.layout
    replica = replica or Replica(tp=layout.tp, ep=layout.ep)
    values = {k: v for k, v in m.values.items() if k not in (B, T, C)}
    sizes = (
        graph_sizes if graph_sizes is not None else tuple(s for s in prof.cuda_graph_sizes if s <= prof.max_num_seqs)
    )
    return step_model(
        prepared(m.graph, options.replace(inference=True, attention="flash")),
        values,
        dev,
        tp=replica.tp,
        ep=replica.ep,
        attention_dp=replica.attention_dp,
        weights_dtype=options.weights_dtype,
        step_overhead_s=prof.step_overhead_s,
        layer_overhead_s=prof.layer_overhead_s,
        graph_sizes=sizes,
        graph_kernel_overhead_s=prof.graph_kernel_overhead_s,
        allreduce_latency_s=prof.allreduce_latency_s,
        imbalance=imbalance,
        compute_scale=prof.compute_time_scale,
        memory_scale=prof.memory_time_scale,
        communication_scale=prof.communication_time_scale,
        kv_dtype=options.kv_dtype,
    )


def _entry(item: object) -> Entry:
    """One request of a batch as ``(new_tokens, past_kv)``: a pair, or SGLang's or Vidur's names for them."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        c, p = item
    elif isinstance(item, Mapping):
        c, p = item.get("extend_input_len", item.get("new_tokens")), item.get("prefix_len", item.get("past_kv", 0))
    else:
        c, p = getattr(item, "extend_input_len", None), getattr(item, "prefix_len", 0)
    if isinstance(c, bool) or isinstance(p, bool) or not isinstance(c, int) or not isinstance(p, int) or c < 1 or p < 0:
        raise CostModelError(
            f"predictor: a batch entry is (new_tokens >= 1, past_kv >= 0) or has extend_input_len and prefix_len; "
            f"received {item!r}"
        )
    return c, p


class SGLangPredictor:
    """``predict_infer_time(batch)`` → seconds, the interface of SGLang's simulator (see the module notes)."""

    def __init__(self, step: StepModel):
        self.step = step

    def predict_infer_time(self, batch: Sequence[object]) -> float:
        """Seconds of one engine step running ``batch`` (a list of ``(new_tokens, past_kv)``)."""
        return self.step([_entry(x) for x in batch])


@dataclass(frozen=True)
class VidurTime:
    """What :class:`VidurPredictor` returns, in the names Vidur's ``ExecutionTime`` uses for its totals."""

    num_layers: int
    model_time: float  # seconds of the stage's forward
    tensor_parallel_communication_time: float
    pipeline_parallel_communication_time: float = 0.0
    parts: Mapping[str, float] = field(default_factory=dict)

    @property
    def model_time_ms(self) -> float:
        return self.model_time * 1e3

    @property
    def total_time(self) -> float:
        """Seconds of the stage, communication included (``model_time`` already holds the TP all-reduces)."""
        return self.model_time + self.pipeline_parallel_communication_time


class VidurPredictor:
    """``get_execution_time(batch, pipeline_stage)`` → :class:`VidurTime` (see the module notes). One pipeline stage:
    the whole model (costmodel does not split a serving step over stages yet)."""

    def __init__(self, step: StepModel):
        self.step = step

    def get_execution_time(self, batch: object, pipeline_stage: int = 0) -> VidurTime:
        if pipeline_stage != 0:
            raise CostModelError(f"VidurPredictor: one pipeline stage (0), received {pipeline_stage}")
        try:
            entries = [
                (int(n), int(r.num_processed_tokens)) for r, n in zip(batch.requests, batch.num_tokens, strict=True)
            ]
        except (AttributeError, TypeError, ValueError) as exc:
            raise CostModelError(
                f"VidurPredictor: a batch has requests (each with num_processed_tokens) and num_tokens ({exc})"
            ) from None
        entries = [_entry(e) for e in entries]
        parts = self.step.breakdown(entries)
        layers = self.step.layer_overhead
        return VidurTime(
            num_layers=int(layers) if layers.is_number else 0,
            model_time=sum(parts.values()),
            tensor_parallel_communication_time=parts["communication"],
            parts=parts,
        )
