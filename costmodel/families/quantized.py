"""A ``config.json``'s ``quantization_config``: which weights a checkpoint stores in which format, as a
:class:`~costmodel.options.policies.Checkpoint` (the inference weights of an estimate are counted in it).

Each method, with what it stores per matmul weight of ``rows`` outputs × ``cols`` inputs (bytes):

* ``mxfp4`` (gpt-oss): only the routed experts, packed fp4 (e2m1, ½ byte) with one e8m0 scale (1 byte) per 32
  input elements (OCP Microscaling Formats v1.0, block size 32; transformers ``integrations/mxfp4.py``:
  ``Mxfp4GptOssExperts`` holds ``gate_up_proj`` and ``down_proj`` as ``(E, rows, cols/2)`` uint8 blocks and
  ``(E, rows, cols/32)`` scales; attention, router, embeddings, head and the experts' biases stay bf16);
* ``gptq`` (transformers' ``GPTQConfig``, the ``QuantLinear`` of AutoGPTQ/GPTQModel): every linear layer of
  the repeated blocks, ``bits`` per element packed in int32 (``qweight``), per group of ``group_size`` inputs an
  fp16 scale and a ``bits``-bit zero point per output (``scales``, ``qzeros``), and an int32 group index per
  input column (``g_idx``); ``group_size`` −1 is one group per column; the head and embeddings stay fp16/bf16;
* ``awq`` (``AwqConfig``, AutoAWQ's GEMM/GEMV kernels): the same without ``g_idx``;
* ``fp8`` (``FineGrainedFP8Config``: DeepSeek-V3, Qwen3-FP8): every linear layer but the head, one byte an
  element (e4m3) and one fp32 ``weight_scale_inv`` per ``weight_block_size`` block (128 × 128), or per matrix
  without a block size (transformers ``integrations/finegrained_fp8.py``);
* ``bitsandbytes`` (``load_in_4bit``: nf4/fp4 with an absmax per 64, fp32 or double-quantised; 8-bit: int8 with
  an fp32 scale per output row).

``modules_to_not_convert`` is honoured for the names costmodel's ops have (``lm_head``, attention, routers).
A method not listed here is not read: the note says so, and the weights are counted in the graph's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from ..errors import CostModelError
from ..options.policies import Checkpoint, WeightFormat

_MX = "OCP Microscaling Formats (MX) v1.0 (block 32, e8m0 scale); transformers integrations/mxfp4.py"
_GPTQ = "transformers GPTQConfig; AutoGPTQ/GPTQModel QuantLinear (qweight, qzeros, fp16 scales, int32 g_idx)"
_AWQ = "transformers AwqConfig; AutoAWQ WQLinear_GEMM (qweight, qzeros, fp16 scales)"
_FP8 = "transformers FineGrainedFP8Config and integrations/finegrained_fp8.py (weight, fp32 weight_scale_inv)"
_BNB = "transformers BitsAndBytesConfig; bitsandbytes Params4bit (absmax per 64) and Int8Params (per-row scale)"

#: ``modules_to_not_convert`` entries (HF module names, fnmatch patterns or suffixes) → costmodel op names.
#: A name matching none of these (a submodule costmodel has no op for) is named in the notes.
_KEEP = (
    (("lm_head",), ("lm_head",)),
    (("embed_tokens", "wte", "word_embeddings"), ("embed",)),
    (("self_attn", "attn", "attention"), ("*attn.*",)),
    (("router", "mlp.gate", "block_sparse_moe.gate", ".gate"), ("*router",)),
)


def _keep(names: object, where: str) -> tuple[tuple[str, ...], list[str]]:
    if names is None:
        return (), []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CostModelError(f"{where}: modules_to_not_convert must be a list of names, received {names!r}")
    keep: list[str] = []
    unmapped = []
    for name in names:
        hits = [ops for hf, ops in _KEEP if any(name.endswith(h) or f"{h}." in name for h in hf)]
        for ops in hits:
            keep += [o for o in ops[:1] if o not in keep]
        if not hits:
            unmapped.append(name)
    return tuple(keep), unmapped


def _int(qc: Mapping[str, object], name: str, default: int, where: str, choices: tuple[int, ...] = ()) -> int:
    value = qc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or (choices and value not in choices):
        expected = f"one of {', '.join(map(str, choices))}" if choices else "a whole number"
        raise CostModelError(f"{where}: quantization_config {name!r} must be {expected}, received {value!r}")
    return value


def checkpoint(qc: object, where: str) -> tuple[Checkpoint | None, list[str]]:
    """The :class:`Checkpoint` of ``quantization_config`` ``qc`` and the notes to show with it."""
    if not isinstance(qc, Mapping):
        raise CostModelError(f"{where}: quantization_config must be an object, received {qc!r}")
    method = qc.get("quant_method")
    if not isinstance(method, str):
        method = "bitsandbytes" if qc.get("load_in_4bit") or qc.get("load_in_8bit") else None
    keep, unmapped = _keep(qc.get("modules_to_not_convert"), where)
    if method == "mxfp4":
        fmt = WeightFormat("mxfp4", 4, 32, 1, "MXFP4: fp4 e2m1, one e8m0 scale per 32 inputs")
        made = Checkpoint(
            "mxfp4",
            (("routed", fmt),),
            keep,
            "mxfp4 routed experts (fp4 e2m1, an e8m0 scale per 32), the rest bf16",
            _MX,
        )
    elif method in ("gptq", "awq"):
        bits = _int(qc, "bits" if method == "gptq" else "bits", 4, where, (2, 3, 4, 8))
        if method == "awq" and "w_bit" in qc:
            bits = _int(qc, "w_bit", 4, where, (4,))
        group = _int(qc, "group_size" if "group_size" in qc else "q_group_size", 128, where)
        group_ = None if group == -1 else group
        if group_ is not None and group_ < 1:
            raise CostModelError(f"{where}: quantization_config group_size must be positive or -1, received {group}")
        per = "per column" if group_ is None else f"per {group}"
        extra = ", an int32 g_idx per input" if method == "gptq" else ""
        fmt = WeightFormat(
            f"{method}-int{bits}",
            bits,
            group_,
            Fraction(2) + Fraction(bits, 8),  # an fp16 scale and a packed zero point per group and output
            f"{method.upper()} int{bits}, an fp16 scale and int{bits} zero {per}{extra}",
            index_bytes=4 if method == "gptq" else 0,
        )
        made = Checkpoint(
            method,
            (("layers", fmt),),
            keep,
            fmt.about + " in the layers; head and tables bf16",
            _GPTQ if method == "gptq" else _AWQ,
        )
    elif method == "fp8":
        block = qc.get("weight_block_size")
        if block is None:
            fmt = WeightFormat("fp8", 8, None, 4, "fp8 e4m3, one fp32 scale per matrix", block_rows=None)
        elif (
            isinstance(block, list)
            and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            fmt = WeightFormat(
                "fp8",
                8,
                block[1],
                4,
                f"fp8 e4m3, one fp32 scale per {block[0]} × {block[1]} block",
                block_rows=block[0],
            )
        else:
            raise CostModelError(
                f"{where}: quantization_config weight_block_size must be [rows, cols], received {block!r}"
            )
        made = Checkpoint(
            "fp8",
            (("all", fmt),),
            (*keep, *(k for k in ("lm_head", "*router") if k not in keep)),
            fmt.about + "; the head and routers bf16",
            _FP8,
        )
    elif method == "bitsandbytes":
        if qc.get("load_in_4bit"):
            double = bool(qc.get("bnb_4bit_use_double_quant"))
            # an fp32 absmax per 64, or (double) an int8 absmax per 64 plus an fp32 per 256 of those
            scale = Fraction(1) + Fraction(4, 256) if double else Fraction(4)
            kind = qc.get("bnb_4bit_quant_type", "fp4")
            fmt = WeightFormat(
                "bnb-4bit",
                4,
                64,
                scale,
                f"bitsandbytes {kind}, an absmax per 64" + (" (double-quantised)" if double else ""),
            )
        else:
            fmt = WeightFormat("bnb-8bit", 8, None, 4, "bitsandbytes int8, an fp32 scale per output row")
        made = Checkpoint(
            "bitsandbytes",
            (("all", fmt),),
            (*keep, "lm_head") if "lm_head" not in keep else keep,
            fmt.about + "; the head bf16",
            _BNB,
        )
    else:
        return None, [f"quantization_config quant_method {method!r} is not read: weights counted in the graph's dtype"]
    notes = [f"weights as quantization_config says ({made.method}): {made.about} [{made.source}]"]
    if unmapped:
        notes.append(f"modules_to_not_convert names no op costmodel has: {', '.join(unmapped[:8])}")
    return made, notes
