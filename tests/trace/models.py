"""Transformers models for the tracer's tests, each built and traced once per test session.

Every model is built from a small config in code (:func:`costmodel.tracer.hf.small_config`: width 64, two
layers, four heads, vocabulary 128) on the ``meta`` device; nothing is downloaded. The references are
PyTorch's own: ``FlopCounterMode`` over one forward and one backward under a FakeTensorMode (transformers
skips its data-dependent packed-sequence check when tracing fake tensors), ``numel()`` of the parameters,
and ``saved_tensors_hooks`` over one training forward on meta.
"""

from __future__ import annotations

import functools

import torch
import transformers.masking_utils as masking
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from costmodel.tracer.hf import causal_lm, example_inputs, small_config

#: Config fields a model type needs besides the small sizes to build and trace.
OVERRIDES: dict[str, dict] = {
    "mistral": {"sliding_window": None},
    "mixtral": {"sliding_window": None},
    "gpt2-nodrop": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
}


def config(name: str):
    model_type = name.split("-")[0]
    return small_config(model_type, **OVERRIDES.get(name, {}))


@functools.cache
def built(name: str, attn: str = "eager"):
    """The transformers model of ``name`` (a model type, or ``type-variant`` of :data:`OVERRIDES`)."""
    return causal_lm(config(name), attn=attn)


@functools.cache
def traced(name: str, attn: str = "eager"):
    """The traced costmodel model (input_ids and labels of symbolic B and T), once per session."""
    from costmodel.tracer import trace

    cfg = config(name)
    inputs, dynamic, ranges = example_inputs(cfg)
    return trace(built(name, attn), inputs, dynamic, ranges=ranges, name=name)


def _conv_backward(
    grad_out_shape,
    x_shape,
    w_shape,
    bias,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
    out_shape,
    **kwargs,
) -> int:
    """torch's convolution-backward formula with its weight-gradient term divided by ``groups``.

    torch 2.13's ``conv_backward_flop`` counts the weight gradient as ``conv(inp, grad_out)`` over every
    input channel, skipping groups ("I skip those for the sake of brevity"): a depthwise convolution's is
    counted ``groups`` times over. The true count is the forward's, as for any matmul-like op.
    """

    def t(shape):
        return [shape[1], shape[0], *shape[2:]]

    raw = getattr(flop_counter.conv_backward_flop, "__wrapped__", flop_counter.conv_backward_flop)
    flops = raw(
        grad_out_shape,
        x_shape,
        w_shape,
        bias,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
        out_shape,
    )
    if output_mask[1] and groups > 1 and not transposed:
        counted = flop_counter.conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False)
        flops -= counted - counted // groups
    return flops


@functools.cache
def flop_counts(name: str, batch: int, seq: int, attn: str = "eager") -> tuple[int, int]:
    """(forward, forward + backward) FLOPs of FlopCounterMode, with the loss on labels = the inputs (grouped
    convolutions' backward counted per group, see :func:`_conv_backward`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = built(name, attn)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    fixed = {torch.ops.aten.convolution_backward: _conv_backward}
    with FakeTensorMode(allow_non_fake_inputs=True):
        with FlopCounterMode(display=False, custom_mapping=fixed) as forward:
            out = model(input_ids=ids, labels=ids.clone())
        with FlopCounterMode(display=False, custom_mapping=fixed) as backward:
            out.loss.backward()
    return forward.get_total_flops(), forward.get_total_flops() + backward.get_total_flops()


def saved_bytes(name: str, batch: int, seq: int, attn: str = "eager") -> int:
    """Bytes autograd keeps over one training forward on meta: distinct storages seen by
    ``saved_tensors_hooks``, parameters and buffers left out (told apart by StorageImpl, as every
    ``data_ptr`` is 0 on meta; packed tensors kept alive so no address is reused)."""
    model = built(name, attn)
    own = {p.untyped_storage()._cdata for p in [*model.parameters(), *model.buffers()]}
    alive, seen = [], {}

    def pack(t):
        alive.append(t)
        sid = t.untyped_storage()._cdata
        if sid not in own:
            seen.setdefault(sid, t.untyped_storage().nbytes())
        return t

    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    original = masking.find_packed_sequence_indices
    masking.find_packed_sequence_indices = lambda position_ids: None  # .item() on meta; not packed here
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, labels=ids.clone())
    finally:
        masking.find_packed_sequence_indices = original
    return sum(seen.values())
