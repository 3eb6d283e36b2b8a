"""The measurement: torch's own accounting of a training step's memory, for the engine's peak to be checked against.

:func:`measure` builds a small transformers model from a config object (LLaMA, Qwen3, GPT-2; no downloads) under
``FakeTensorMode`` (sizes are exact and nothing is allocated, so a 7B-size model costs as little as a tiny one), and
runs two training iterations (forward, backward, ``optimizer.step()``, ``optimizer.zero_grad()``) under
``torch.distributed._tools.mem_tracker.MemTracker``. The second iteration is the one that counts: the first has no
optimizer state yet. What it returns:

* ``peak``: MemTracker's peak of the live bytes over both iterations (every storage created or registered inside
  its context: parameters, buffers, gradients, optimizer states, the forward's tensors, backward's temporaries);
* ``breakdown``: the categories at that peak, as MemTracker names them (``PARAM``, ``BUFFER``, ``GRAD``, ``ACT``,
  ``TEMP``, ``OPT``): MemTracker files a tensor made in forward as ``ACT``, one made in backward as ``TEMP`` until
  it is known as a gradient (``GRAD``: at its weight's accumulation), one made in ``step()`` as ``OPT``;
* ``phase``: where the peak is: ``(iteration, "forward" | "backward" | "optimizer step", module)``, the module the
  deepest one running (its fully qualified name, ``""`` for none).

Settings (:class:`Setting`): ``precision`` ``"autocast"`` (fp32 weights, ``torch.autocast(bf16)``), ``"pure"``
(the model in bf16, AdamW's states in bf16 as ``torch.optim`` makes them) or ``"fp32"``; ``attention``
(``"sdpa"``, ``"eager"``); ``optimizer_impl`` (AdamW's ``"foreach"``, ``"fused"`` or ``"forloop"`` path, chosen
explicitly: on CPU torch would default to the for-loop, on CUDA to foreach); ``checkpointing`` (transformers'
``gradient_checkpointing_enable()``); ``micro_batches`` (gradient accumulation: that many forward/backward passes
per step); ``set_to_none`` (``zero_grad``'s argument).

Devices: everything is on the (fake) CPU. SDPA on CPU selects the flash kernel (it keeps q, k, v, the output and a
log-sum-exp per row), as CUDA's flash and memory-efficient kernels do.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

CATEGORIES = ("PARAM", "BUFFER", "GRAD", "ACT", "TEMP", "OPT")


@dataclass(frozen=True)
class Setting:
    """One training step as run: the batch, the precision, the kernels, the loop."""

    batch: int = 2
    seq: int = 64
    precision: str = "autocast"  # autocast | pure | fp32
    attention: str = "sdpa"  # sdpa | eager
    optimizer_impl: str = "foreach"  # foreach | fused | forloop
    checkpointing: bool = False
    micro_batches: int = 1
    set_to_none: bool = True

    def but(self, **changes) -> Setting:
        return replace(self, **changes)


#: The small configs: LLaMA (GQA: 4 heads, 2 KV heads), Qwen3 (the same with q/k norms and a tied unembedding),
#: GPT-2 (4096 positions: a large learned table, so that its step can be the peak).
_DECODER = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
)
CONFIGS = {
    "llama": (transformers.LlamaConfig, _DECODER),
    "qwen3": (transformers.Qwen3Config, {**_DECODER, "head_dim": 16, "tie_word_embeddings": True}),
    "gpt2": (
        transformers.GPT2Config,
        dict(vocab_size=512, n_positions=4096, n_embd=64, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
        | dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    ),
}


def config(family: str, **sizes) -> transformers.PretrainedConfig:
    """A small config of ``family`` (``llama``, ``qwen3``, ``gpt2``), sizes overridable (``hidden_size=...``)."""
    if family in CONFIGS:
        cls, base = CONFIGS[family]
        return cls(**{**base, **sizes})
    raise ValueError(f"family: expected llama, qwen3 or gpt2, received {family!r}")


class _Tracker(MemTracker):
    """MemTracker that also records where its peak was reached (the phase of :func:`measure`)."""

    iteration, where, at = 0, "forward", None

    def _update_peak_stats(self, peak_state) -> None:
        super()._update_peak_stats(peak_state)
        now = sum(snap["Total"] for snap in self._curr_mem_snap.values())
        if now and now >= sum(self._peak_mem.values()):  # of equal points the last (the second iteration's)
            running = [m for m in self._mod_tracker.parents if m != "Global"]
            self.at = (self.iteration, self.where, max(running, key=len, default=""))


def _optimizer(params, impl: str) -> torch.optim.Optimizer:
    choose = {"foreach": dict(foreach=True), "fused": dict(fused=True), "forloop": dict(foreach=False)}
    return torch.optim.AdamW(params, lr=1e-4, **choose[impl])


def measure(cfg: transformers.PretrainedConfig, setting: Setting = Setting(), iterations: int = 2) -> dict:
    """MemTracker's peak of ``iterations`` training steps of ``cfg``'s model under ``setting`` (module notes)."""
    s = setting
    dtype = torch.bfloat16 if s.precision == "pure" else torch.float32
    with FakeTensorMode():
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=s.attention, dtype=dtype)
        model.train()
        if s.checkpointing:
            model.gradient_checkpointing_enable()
        opt = _optimizer(model.parameters(), s.optimizer_impl)
        ids = torch.randint(0, cfg.vocab_size, (s.batch, s.seq))
        tracker = _Tracker()
        tracker.track_external(model, opt)
        with tracker:
            for i in range(iterations):
                tracker.iteration = i
                for _ in range(s.micro_batches):
                    tracker.reset_mod_stats()  # MemTracker keeps per-module stats of one forward at a time
                    tracker.where = "forward"
                    cast = torch.autocast("cpu", dtype=torch.bfloat16) if s.precision == "autocast" else None
                    with cast or contextlib.nullcontext():
                        loss = model(input_ids=ids, labels=ids).loss
                    tracker.where = "backward"
                    loss.backward()
                    del loss
                tracker.where = "optimizer step"
                opt.step()
                tracker.where = "zero_grad"
                opt.zero_grad(set_to_none=s.set_to_none)
        snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
    breakdown = {str(k).rsplit(".", 1)[-1]: v for k, v in snap.items() if str(k) != "Total"}
    breakdown = {k: breakdown.get(k, 0) for k in CATEGORIES}
    return {"peak": snap["Total"], "breakdown": breakdown, "phase": tracker.at}
