"""The one record of a user's choices: :class:`Options` (with :class:`Counting` and :class:`Layout`).

Every verb (``estimate``, ``derive``, ``sweep``, ``fit``, ``report``...) takes its choices as one frozen,
validated :class:`Options`; keyword arguments are turned into one by :meth:`Options.make`, which refuses a
misspelt name and suggests the closest valid ones. Nothing reads options with ``.get()``: a field that
exists is honoured by every entry point it applies to, and one that does not is an error.

This module imports no sympy or networkx (a cached estimate starts without them): numbers are ``int`` or
``fractions.Fraction``.

>>> Options.make(recompute="full", tp=2).layout.tp
2
>>> Options.make(recompte="full")
Traceback (most recent call last):
...
costmodel.errors.CostModelError: unknown option 'recompte' (did you mean 'recompute' ...?); valid options: ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction

from ..dtypes import DTYPE_BYTES, check_dtype
from ..errors import CostModelError, closest
from ..sizes import parse_count, parse_rate
from .flags import FLAGS, GROUPS, PARSERS, Flag
from .policies import (
    ATTENTION,
    ATTENTION_KERNELS,
    DEFAULT_OPTIMIZER_IMPL,
    FUSED_ATTENTION,
    IMPLEMENTATIONS,
    LOGITS,
    MFU_BASES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    WEIGHT_FORMATS,
)
from .records import (
    Counting,
    Layout,
    check_choice,
    check_count,
    check_rate,
    check_stack,
    is_price_name,
    parse_scale_out,
)

#: How a ``config.json`` becomes a graph: ``family`` (a built-in family reads its model type, else an error) or
#: ``trace`` (its transformers model built on meta and traced: needs ``costmodel[torch]``); ``None``, the default:
#: the family where one reads the model type, else traced when torch and transformers are installed.
VIA = ("family", "trace")
#: How a step is predicted without a rate (see :mod:`costmodel.timing.calibrated`).
TIME_MODELS = ("calibrated", "roofline")
#: The matmuls LoRA adapts unless told (peft's default for LLaMA-like models: ``q_proj``, ``v_proj``).
LORA_TARGETS = ("q", "v")
#: Kinds of communication (``communication_bytes.*``) the calibrated model can hide behind compute.
COMM_KINDS = ("dp", "tp", "pp", "sp", "ep")
#: Options that count sequences: the suffixes of token counts (300B, 15T) are refused there.
SEQUENCES = ("batch", "micro_batch")


@dataclass(frozen=True)
class Options:
    """Everything a user chooses for one run, validated once.

    The step: ``batch`` (B, default 1), ``seq`` (T, default the model's), ``tokens`` (D: whole-run
    totals). Counting: ``counting`` (:class:`Counting`). Training memory: ``precision``, ``optimizer``,
    ``recompute`` (none/selective/full), ``recompute_fraction`` (a share of each repeated block's
    iterations recomputed whole, the rest as ``recompute`` says: PaLM's partial rematerialisation),
    ``attention`` (``unfused``: scores materialised, softmax in the activations' dtype, the training
    default; ``eager``: transformers' eager attention, softmax in fp32 cast back; ``sdpa`` and ``flash``: fused,
    no T×T tensor kept, ``flash`` the inference default, as every serving engine runs a fused kernel), ``flash`` (a synonym of ``attention="flash"``), ``norm_stats`` (count the fp32
    statistics norms keep; Korthikanti et al. leave them out), ``layout`` (:class:`Layout`),
    ``micro_batch``. Inference: ``inference``, ``context`` (KV cache length C; the prompt too unless
    ``seq`` is given), ``weights_dtype``, ``kv_dtype``, ``logits`` (``last``: a generation's prefill keeps
    the last position's logits; ``all``: scoring keeps every position's). Time: ``hardware`` (a name, a
    ``.toml``/``.json`` file or a Device), ``devices``, one of ``achieved_flops`` (per device), ``mfu``,
    ``tokens_per_s`` (measured, all devices), ``mfu_basis`` (the model FLOPs of MFU: ``engine``, ``6n``,
    ``6n-attention``), ``dtype`` (whose peak), ``comm_bytes`` and ``comm_links`` (extra traffic and its
    links), ``overlap`` (communication hidden behind compute), ``pipeline`` ((stages, micro-batches)),
    ``price_per_hour`` (US dollars per device-hour: ``time.cost_usd``; or ``"list"``, the price table's entry
    for the device, or an entry's name: :mod:`costmodel.devices.prices`), ``time_model`` (without a rate: ``"calibrated"``, the default, or
    ``"roofline"``) and ``overlap_comm`` (the kinds of communication the calibrated model hides behind compute:
    ``dp``, ``tp``, ``pp``, ``sp``, ``ep``; default: see :mod:`costmodel.timing.calibrated`) and ``stack``
    (the software stack whose ``sustained`` factor the calibrated step uses, a name of the device's
    ``efficiency.stacks``; default: the device's own factor), ``overlap_grad_reduce`` and
    ``overlap_param_gather`` (Megatron's flags of the same names: ZeRO's gradient reduce-scatter hidden behind
    the last micro-batch's backward, its parameter all-gather behind the next step's forward; None: as
    ``overlap_comm`` hides ``dp``), ``gpus_per_node``, ``scale_out`` and ``cluster`` (the cluster the device
    sits in: :mod:`costmodel.devices.cluster`), ``cuda_graphs`` and ``launch_us`` (the host's launch floor per
    kernel: :mod:`costmodel.timing.host`), ``attention_kernel`` (``flash2``, ``flash3``, ``cudnn``, ``sdpa``:
    the fused kernel whose measured share of peak attention runs at, :mod:`costmodel.devices.attention`; it
    implies fused attention), ``tp_comm_overlap`` (tensor-parallel collectives pipelined with their GEMMs) and
    ``comm_sm_share`` (the share of compute an overlapped collective takes while it runs; see
    :mod:`costmodel.timing.calibrated`). Fine-tuning: ``lora`` (the rank r of LoRA
    adapters ``y = W x + B (A x)`` on the matmuls ``lora_targets`` names, default ``("q", "v")``; every other
    weight frozen), ``freeze`` (op names or fnmatch patterns whose weights are frozen: no gradient, no optimizer
    state), ``base_dtype`` (how the frozen matmul weights of the layers are stored, a weight format: ``nf4`` is
    QLoRA's, 2113/4096 bytes a weight; default the precision's weights dtype) and ``qlora`` (``base_dtype="nf4"``
    under ``lora``); see :mod:`costmodel.graph.finetune`.
    """

    batch: int | None = None
    seq: int | None = None
    tokens: int | None = None
    counting: Counting = field(default_factory=Counting)
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    recompute: str = "none"
    recompute_fraction: Fraction | None = None
    attention: str | None = None  # None: the default, "flash" for inference, "unfused" for training
    flash: bool = False
    norm_stats: bool = True
    implementation: str = "fused"
    optimizer_impl: str | None = None  # None: the implementation's (DEFAULT_OPTIMIZER_IMPL)
    grads_resident: bool | None = None  # None: the implementation's (see the property grads_kept)
    layout: Layout = field(default_factory=Layout)
    micro_batch: int | None = None
    inference: bool = False
    context: int | None = None
    weights_dtype: str | None = None  # None: as the checkpoint stores them (a config's quantization_config), else bf16
    kv_dtype: str | None = None
    logits: str = "last"
    hardware: object = None
    devices: int = 1
    achieved_flops: Fraction | None = None
    mfu: Fraction | None = None
    tokens_per_s: Fraction | None = None
    dtype: str | None = None
    comm_bytes: tuple[tuple[str, int], ...] = ()
    comm_links: tuple[tuple[str, str], ...] = ()
    overlap: bool = False
    pipeline: tuple[int, int] | None = None
    time_model: str | None = None
    overlap_comm: tuple[str, ...] | None = None
    mfu_basis: str = "engine"
    price_per_hour: Fraction | str | None = None
    stack: str | None = None
    overlap_grad_reduce: bool | None = None  # None: as overlap_comm hides dp
    overlap_param_gather: bool | None = None  # None: as overlap_comm hides dp
    gpus_per_node: int | None = None  # None: the device's network.node_size
    scale_out: str | None = None  # GB/s per direction per device ("50") or per node ("100/node"); None: the device's
    cluster: str | None = None  # a cluster file (costmodel.devices.cluster)
    cuda_graphs: bool = False  # CUDA graphs: no host launch floor (costmodel.timing.host)
    launch_us: Fraction | None = None  # the host's launch time per kernel, µs; None: the stack's (host.json)
    attention_kernel: str | None = None  # a fused kernel's measured share of peak (costmodel.devices.attention)
    tp_comm_overlap: bool = False  # TP collectives pipelined with their GEMMs (Megatron's --tp-comm-overlap)
    comm_sm_share: Fraction | None = None  # the share of compute an overlapped collective takes; None: 0
    lora: int | None = None
    lora_targets: tuple[str, ...] = LORA_TARGETS
    freeze: tuple[str, ...] = ()
    base_dtype: str | None = None  # the frozen matmul weights' storage (QLoRA: nf4); None: the precision's
    qlora: bool = False  # LoRA over a 4-bit base: base_dtype "nf4" unless another is given
    via: str | None = None  # how a config.json is read (VIA); None: its family, else traced where torch is

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (normalising a frozen record)
        set_("batch", check_count(self.batch, "batch", sequences=True))
        set_("seq", check_count(self.seq, "seq", length=True))
        set_("tokens", check_count(self.tokens, "tokens"))
        set_("micro_batch", check_count(self.micro_batch, "micro_batch", sequences=True))
        set_("context", check_count(self.context, "context", length=True))
        set_("devices", parse_count(self.devices, "devices"))
        if not isinstance(self.counting, Counting):
            raise CostModelError(f"counting: expected a Counting record, received {self.counting!r}")
        if not isinstance(self.layout, Layout):
            raise CostModelError(f"layout: expected a Layout record, received {self.layout!r}")
        check_choice(self.precision, PRECISIONS, "precision")
        if self.via is not None:
            check_choice(self.via, VIA, "via")
        check_choice(self.optimizer, OPTIMIZERS, "optimizer")
        check_choice(self.recompute, RECOMPUTE, "recompute")
        check_choice(self.implementation, IMPLEMENTATIONS, "implementation")
        object.__setattr__(self, "_optimizer_impl_default", self.optimizer_impl is None)
        if self.optimizer_impl is None:
            set_("optimizer_impl", DEFAULT_OPTIMIZER_IMPL[self.implementation])
        check_choice(self.optimizer_impl, OPTIMIZER_IMPLS, "optimizer_impl")
        if self.grads_resident is not None and not isinstance(self.grads_resident, bool):
            raise CostModelError(f"grads_resident: expected true or false, received {self.grads_resident!r}")
        # the default weight format: the checkpoint's where a config.json names one, bf16 otherwise;
        # weights_default says it was not chosen
        object.__setattr__(self, "_weights_default", self.weights_dtype is None)
        if self.weights_dtype is None:
            set_("weights_dtype", "bf16")
        check_choice(self.weights_dtype, WEIGHT_FORMATS, "weights_dtype")
        # the default attention: fused for inference (vLLM, TensorRT-LLM and SGLang run no unfused attention),
        # the scores materialised for training; attention_default says it was not chosen
        default = self.attention is None and not self.flash
        object.__setattr__(self, "_attention_default", default)
        if self.attention is None:
            set_("attention", "flash" if self.inference or self.flash else "unfused")
        check_choice(self.attention, ATTENTION, "attention")
        check_choice(self.logits, LOGITS, "logits")
        check_choice(self.mfu_basis, MFU_BASES, "mfu_basis")
        if self.kv_dtype is not None:
            check_dtype(self.kv_dtype, "kv_dtype")
        if self.dtype is not None:
            check_dtype(self.dtype, "dtype")
        for name in ("flash", "inference", "overlap", "norm_stats", "cuda_graphs", "tp_comm_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise CostModelError(f"{name}: expected true or false, received {getattr(self, name)!r}")
        set_("gpus_per_node", check_count(self.gpus_per_node, "gpus_per_node"))
        if self.scale_out is not None:
            parse_scale_out(self.scale_out)  # refuses a float: GB/s as typed, exact
            set_("scale_out", str(self.scale_out).strip())
        if self.cluster is not None and (not isinstance(self.cluster, str) or not self.cluster.strip()):
            raise CostModelError(f"cluster: expected the path of a cluster file, received {self.cluster!r}")
        given_cluster = [n for n in ("gpus_per_node", "scale_out", "cluster") if getattr(self, n) is not None]
        if given_cluster and self.hardware is None:
            raise CostModelError(f"{given_cluster[0]} describes the cluster a device sits in: give --hardware NAME too")
        for name in ("overlap_grad_reduce", "overlap_param_gather"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise CostModelError(f"{name}: expected true, false or None, received {getattr(self, name)!r}")
        if self.hardware is not None and not isinstance(self.hardware, str) and not hasattr(self.hardware, "peak"):
            raise CostModelError(
                f"hardware: expected a device name, a .toml/.json file or a Device, received {self.hardware!r}"
            )
        if self.flash and self.attention in ("unfused", "eager"):
            if self.attention == "eager":
                raise CostModelError(
                    "flash is a synonym of attention='flash'; received flash=True with "
                    "attention='eager' (give one of them)"
                )
            set_("attention", "flash")
        if self.attention_kernel is not None:
            check_choice(self.attention_kernel, ATTENTION_KERNELS, "attention_kernel")
            if self.attention in ("unfused", "eager") and not default:
                raise CostModelError(
                    f"attention_kernel {self.attention_kernel!r} is a fused kernel; received attention="
                    f"{self.attention!r}, which materialises the scores (drop one)"
                )
            if self.attention not in FUSED_ATTENTION:  # a fused kernel chosen: the attention is fused
                set_("attention", "flash")
            if self.hardware is None:
                raise CostModelError("attention_kernel chooses a kernel's share of a device's peak: give --hardware")
        set_("flash", self.attention in FUSED_ATTENTION)
        for name in (
            "achieved_flops",
            "mfu",
            "tokens_per_s",
            "recompute_fraction",
            "price_per_hour",
            "launch_us",
            "comm_sm_share",
        ):
            if name == "price_per_hour" and is_price_name(self.price_per_hour):
                continue  # a price table entry, read with the device (costmodel.devices.prices)
            set_(name, check_rate(getattr(self, name), name))
        if self.comm_sm_share is not None and not 0 < self.comm_sm_share < 1:
            raise CostModelError(
                f"comm_sm_share is a share of the compute: expected 0 < F < 1, received {float(self.comm_sm_share):g}"
            )
        if self.recompute_fraction is not None and not 0 <= self.recompute_fraction <= 1:
            raise CostModelError(
                f"recompute_fraction is a share of the layers: expected 0 <= F <= 1, received "
                f"{float(self.recompute_fraction):g}"
            )
        if self.recompute_fraction is not None and self.inference:
            raise CostModelError(
                "recompute_fraction is a training choice; an inference estimate keeps nothing for "
                "backward (drop --recompute-fraction)"
            )
        if self.price_per_hour is not None and not isinstance(self.price_per_hour, str) and self.price_per_hour <= 0:
            raise CostModelError(
                f"price_per_hour: expected a positive price per device-hour, received {float(self.price_per_hour):g}"
            )
        if self.price_per_hour is not None and self.hardware is None:
            raise CostModelError("a price per device-hour needs a device and a time: give --hardware NAME")
        given = [n for n in ("achieved_flops", "mfu", "tokens_per_s") if getattr(self, n) is not None]
        if len(given) > 1:
            raise CostModelError(f"give one of achieved_flops, mfu and tokens_per_s, received {' and '.join(given)}")
        if self.mfu is not None and self.mfu > 1:
            raise CostModelError(f"MFU is a share of peak: expected 0 < MFU <= 1, received {float(self.mfu):g}")
        if given and self.hardware is None:
            raise CostModelError("an achieved FLOP/s, MFU or throughput needs a device: give --hardware NAME")
        if self.context is not None and not self.inference:
            raise CostModelError("context is the KV-cache length of an inference estimate; give --inference too")
        if self.layout.zero and self.layout.dp == 1:
            raise CostModelError(
                f"--zero {self.layout.zero} shards over data-parallel devices; expected --dp > 1, received --dp 1"
            )
        if self.inference and self.layout.zero:
            raise CostModelError("ZeRO shards training state; an inference estimate has none (drop --zero)")
        set_(
            "comm_bytes",
            tuple(
                sorted(
                    (str(k), parse_count(v, f"comm_bytes[{k}]", minimum=0)) for k, v in dict(self.comm_bytes).items()
                )
            ),
        )
        set_("comm_links", tuple(sorted((str(k), str(v)) for k, v in dict(self.comm_links).items())))
        if self.time_model is not None:
            check_choice(self.time_model, TIME_MODELS, "time_model")
            given_rate = [n for n in ("achieved_flops", "mfu", "tokens_per_s") if getattr(self, n) is not None]
            if given_rate:
                raise CostModelError(
                    f"time_model chooses how a step is predicted without a rate; received "
                    f"{given_rate[0]} too (drop one)"
                )
            if self.hardware is None:
                raise CostModelError("a time model needs a device: give --hardware NAME")
        if self.stack is not None:
            rate = [n for n in ("achieved_flops", "mfu", "tokens_per_s") if getattr(self, n) is not None]
            check_stack(self.stack, self.hardware, rate, self.time_model, self.inference)
        if self.overlap_comm is not None:
            kinds = self.overlap_comm
            if isinstance(kinds, str):
                kinds = tuple(k.strip() for k in kinds.split(",") if k.strip())
            for k in kinds:
                check_choice(k, COMM_KINDS, "overlap_comm")
            set_("overlap_comm", tuple(sorted(set(kinds))))
        set_("lora", check_count(self.lora, "lora"))
        for name in ("lora_targets", "freeze"):
            set_(name, _names(getattr(self, name), name))
        if self.lora is not None and not self.lora_targets:
            raise CostModelError("lora: expected the matmuls to adapt (lora_targets such as 'q,v'), received none")
        if self.lora is None and self.lora_targets != LORA_TARGETS:
            raise CostModelError("lora_targets names the matmuls LoRA adapts; give the rank too (--lora RANK)")
        if not isinstance(self.qlora, bool):
            raise CostModelError(f"qlora: expected true or false, received {self.qlora!r}")
        if self.qlora and self.lora is None:
            raise CostModelError("qlora: QLoRA trains LoRA adapters over a 4-bit base; give the rank (--lora RANK)")
        if self.qlora and self.base_dtype is None:
            set_("base_dtype", "nf4")
        if self.base_dtype is not None:
            check_choice(self.base_dtype, WEIGHT_FORMATS, "base_dtype")
            if self.lora is None and not self.freeze:
                raise CostModelError(
                    f"base_dtype {self.base_dtype!r} stores the frozen weights; freeze some (--lora RANK, --freeze "
                    "PATTERNS) or leave it out"
                )
        if self.pipeline is not None:
            stages, micro = self.pipeline
            set_("pipeline", (parse_count(stages, "pipeline stages"), parse_count(micro, "pipeline micro-batches")))

    # -- making one ---------------------------------------------------------------------------------

    #: Flat names accepted by :meth:`make` that set a field of a sub-record.
    SHORTCUTS = {
        "causal": "counting",
        "embedding": "counting",
        "elementwise": "counting",
        "softmax_flops": "counting",
        "dp": "layout",
        "tp": "layout",
        "pp": "layout",
        "sp": "layout",
        "ep": "layout",
        "zero": "layout",
        "megatron_sp": "layout",
        "vpp": "layout",
        "schedule": "layout",
        "stage_layers": "layout",
    }
    #: Other names of an option: context parallelism (``cp``) is the layout's ``sp``.
    ALIASES = {"cp": "sp"}

    #: How each option typed as text is read (:meth:`parse`): counts, lengths (8k = 8192), exact rates; from
    #: the one declaration of each option (:mod:`costmodel.options.flags`).
    PARSERS = PARSERS

    @classmethod
    def parse(cls, name: str, text: str, what: str | None = None) -> object:
        """One option typed as text (``"300B"``, ``"8k"``, ``"0.45"``), read as that option reads it."""
        how = cls.PARSERS.get(name)
        what = what or name
        if how == "count":
            return check_count(text, what, sequences=name in SEQUENCES)
        if how == "length":
            return parse_count(text, what, length=True)
        if how == "rate":
            return parse_rate(text, what)
        if how == "price":  # US dollars, or a name of the price table read with the device
            return text if is_price_name(text) else parse_rate(text, what)
        if how == "names":  # op names or fnmatch patterns, comma-separated
            return _names(text, what)
        raise CostModelError(f"option {name!r} is not read from text")

    @classmethod
    def choices(cls, name: str) -> list[str]:
        """The values a named option accepts (``precision``, ``optimizer``, ``recompute``, ``weights_dtype``,
        ``kv_dtype``/``dtype``, ``causal``, ``zero``)."""
        table = {
            "precision": PRECISIONS,
            "optimizer": OPTIMIZERS,
            "recompute": RECOMPUTE,
            "schedule": SCHEDULES,
            "time_model": TIME_MODELS,
            "overlap_comm": COMM_KINDS,
            "weights_dtype": WEIGHT_FORMATS,
            "base_dtype": WEIGHT_FORMATS,
            "kv_dtype": DTYPE_BYTES,
            "dtype": DTYPE_BYTES,
            "causal": ("full", "half"),
            "embedding": ("lookup", "matmul"),
            "elementwise": ("all", "none", "softmax"),
            "attention": ATTENTION,
            "implementation": IMPLEMENTATIONS,
            "optimizer_impl": OPTIMIZER_IMPLS,
            "attention_kernel": ATTENTION_KERNELS,
            "logits": LOGITS,
            "mfu_basis": MFU_BASES,
            "via": VIA,
        }
        if name not in table:
            raise CostModelError(f"option {name!r} has no fixed choices{closest(name, table)}")
        return (
            list(table[name])
            if name
            in (
                "recompute",
                "causal",
                "embedding",
                "elementwise",
                "schedule",
                "time_model",
                "overlap_comm",
                "attention",
                "implementation",
                "optimizer_impl",
                "attention_kernel",
                "logits",
                "mfu_basis",
            )
            else sorted(table[name])
        )

    @classmethod
    def flags(cls, group: str | None = None) -> tuple[Flag, ...]:
        """The declarations of the options a user types (:mod:`costmodel.options.flags`), all or one group's:
        each its flag, how its text is read, its choices and its help line. The CLI builds its flags from them."""
        return tuple(f for f in FLAGS if group is None or f.group == group)

    @classmethod
    def flag_groups(cls) -> dict[str, str | None]:
        """The groups of :meth:`flags`, in ``--help``'s order, with their titles (None: no title of their own)."""
        return dict(GROUPS)

    @classmethod
    def names(cls) -> list[str]:
        """Every name :meth:`make` accepts."""
        return [f.name for f in fields(cls)] + list(cls.SHORTCUTS) + list(cls.ALIASES)

    @classmethod
    def make(cls, options: Options | Mapping[str, object] | None = None, /, **kwargs: object) -> Options:
        """Options from keyword arguments (on top of ``options``); flat shortcuts such as ``tp=2`` or
        ``causal="half"`` set the field of :attr:`layout` or :attr:`counting`. A name that is not an
        option is an error naming the closest valid ones.
        """
        if options is not None and not isinstance(options, (Options, Mapping)):
            raise CostModelError(
                f"options: expected an Options (costmodel.Options.make(...)), a mapping of option names "
                f"or None, received {type(options).__name__}"
            )
        base = options if isinstance(options, Options) else _default()
        extra = dict(options) if isinstance(options, Mapping) else {}
        extra.update(kwargs)
        for alias, name in cls.ALIASES.items():
            if alias in extra:
                if name in extra and extra[name] != extra[alias]:
                    raise CostModelError(
                        f"{alias} is another name of {name}: give one of them, received "
                        f"{alias}={extra[alias]!r} and {name}={extra[name]!r}"
                    )
                extra[name] = extra.pop(alias)
        if not extra:
            return base
        try:  # the same options again (a loop of estimates): the checked record, without checking again
            memo = (
                base,
                base.attention_default,
                base.weights_default,
                base.__dict__.get("_optimizer_impl_default", False),
                tuple((k, type(v), v) for k, v in sorted(extra.items())),
            )
            return _MADE[memo]
        except TypeError:  # an unhashable value (a list): build it
            memo = None
        except KeyError:
            pass
        made = cls._make(base, extra)
        if memo is not None:
            if len(_MADE) >= 512:
                _MADE.pop(next(iter(_MADE)))
            _MADE[memo] = made
        return made

    @classmethod
    def _make(cls, base: Options, extra: dict[str, object]) -> Options:
        valid = cls.names()
        for name in extra:
            if name not in valid:
                raise CostModelError(
                    f"unknown option {name!r}{closest(name, valid)}; valid options: " + ", ".join(valid)
                )
        own = {k: v for k, v in extra.items() if k not in cls.SHORTCUTS}
        if "flash" in own and "attention" not in own:  # flash is a synonym: it sets the attention
            if own["flash"] is True:
                own["attention"] = "flash"
            elif own["flash"] is False and (base.attention in FUSED_ATTENTION or base.attention_default):
                own["attention"] = "unfused"
        elif "attention" not in own and base.attention_default:  # still the default: for the new inference choice
            own["attention"], own["flash"] = None, False
        if "optimizer_impl" not in own and base.__dict__.get("_optimizer_impl_default", False):
            own["optimizer_impl"] = None  # still the default: the (new) implementation's
        if "weights_dtype" not in own and base.weights_default:  # still the default: the checkpoint's format
            own["weights_dtype"] = None
        subs: dict[str, dict[str, object]] = {}
        for k, v in extra.items():
            if k in cls.SHORTCUTS:
                subs.setdefault(cls.SHORTCUTS[k], {})[k] = v
        for record, changes in subs.items():
            current = own.get(record, getattr(base, record))
            own[record] = dataclasses.replace(current, **changes)
        return dataclasses.replace(base, **own)

    @property
    def attention_default(self) -> bool:
        """Whether ``attention`` is the default (not chosen): fused for inference, unfused for training."""
        return self.__dict__.get("_attention_default", False)

    @property
    def grads_kept(self) -> bool:
        """Whether gradients are held through all of backward: as chosen (``grads_resident``), else the fused
        implementation's resident buffer, or, in torch's loop, a chosen micro-batch (taken as gradient accumulation:
        each later micro-batch's backward adds to the gradients the earlier ones left; B is a value, not a choice,
        so a micro-batch equal to the batch is not told apart) or data parallelism (DDP's gradient buckets)."""
        if self.grads_resident is not None:
            return self.grads_resident
        return self.implementation == "fused" or self.micro_batch is not None or self.layout.dp > 1

    @property
    def weights_default(self) -> bool:
        """Whether ``weights_dtype`` is the default (not chosen): the checkpoint's own format where a config.json
        has a ``quantization_config``, bf16 otherwise."""
        return self.__dict__.get("_weights_default", False)

    def derivation_key(self) -> tuple:
        """Every option but the step's batch and sequence (values, not choices): what derived formulas
        depend on, as a hashable tuple."""
        got = self.__dict__.get("_derivation_key")
        if got is None:  # worked out once per record (a loop of estimates asks each time)
            got = tuple(getattr(self, f.name) for f in fields(self) if f.name not in ("batch", "seq"))
            got += (self.weights_default,)  # the checkpoint's format or a chosen one: different formulas
            object.__setattr__(self, "_derivation_key", got)
        return got

    def replace(self, **kwargs: object) -> Options:
        """A copy with some options changed (validated again, shortcuts allowed)."""
        return Options.make(self, **kwargs)

    def describe(self) -> dict[str, object]:
        """Plain values of every option (for a report's header or a cache key)."""
        out: dict[str, object] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (Counting, Layout)):
                out.update({f"{f.name}.{g.name}": getattr(v, g.name) for g in fields(v)})
            elif isinstance(v, Fraction):
                out[f.name] = str(v)
            elif v is not None and not isinstance(v, (str, int, bool, tuple)):
                out[f.name] = getattr(v, "name", str(v))
            else:
                out[f.name] = v
        return out


def _names(value: object, what: str) -> tuple[str, ...]:
    """Op names or fnmatch patterns (``"q,v"``, ``["*.q", "*.v"]``) as a tuple of non-empty strings."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(x, str) for x in items):
        raise CostModelError(f"{what}: expected op names or patterns such as 'q,v', received {value!r}")
    out = tuple(x.strip() for x in items)
    if any(not x for x in out):
        raise CostModelError(
            f"{what}: expected op names or patterns such as 'q,v', received an empty name in {value!r}"
        )
    return out


_DEFAULTS: list[Options] = []


_MADE: dict[tuple, Options] = {}  # Options.make memo: (base, given options with their types) → record


def check_settings(settings: object) -> Mapping[str, object] | None:
    """``settings`` as given to a verb: a mapping of names to values, or None; anything else (``"d=5"``, as
    on the command line) is a :class:`CostModelError` saying so."""
    if settings is not None and not isinstance(settings, Mapping):
        raise CostModelError(
            f"settings: expected a mapping such as {{'d_ff': '8*d/3'}} or None, received {type(settings).__name__}"
            + (f" {settings!r}" if isinstance(settings, str) and len(settings) < 80 else "")
        )
    return settings


def check_names(names: object, what: str, example: str) -> list[str]:
    """A list of names (metric keys...): a single string would be iterated as its letters, so it is an error."""
    if isinstance(names, str) or not isinstance(names, Iterable) or isinstance(names, Mapping):
        raise CostModelError(f"{what}: expected a list such as {example}, received {names!r:.80}")
    out = list(names)
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise CostModelError(f"{what}: expected names (strings), received {bad[0]!r:.80}")
    return out


def _default() -> Options:
    """The default options, made once."""
    if not _DEFAULTS:
        _DEFAULTS.append(Options())
    return _DEFAULTS[0]


__all__ = ["Counting", "DTYPE_BYTES", "FUSED_ATTENTION", "Layout", "Options"]
