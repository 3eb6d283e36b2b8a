"""Write costmodel/serving/data/measured_serving.json from AIConfigurator's measured ``silicon_sample.csv``.

The CSV is public (github.com/ai-dynamo/aiconfigurator, ``aic-core/src/aiconfigurator_core/systems/silicon_sample.csv``);
give its path and the commit it was read at:

    git -C AIC show COMMIT:aic-core/src/aiconfigurator_core/systems/silicon_sample.csv > silicon.csv
    python benchmarks/extract_silicon_sample.py silicon.csv COMMIT

Kept: aggregated serving (``mode=agg``) of the dense models costmodel has presets for, on the GPUs it has, with weights
in a format it has (fp8, or blank: the checkpoint's bf16), one pipeline stage, no attention data parallelism, and a
concurrency. Each row keeps its line in the CSV (the header is line 1).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

from costmodel.serving.measured import COLUMNS

FILE = "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv"
MODELS = {
    "meta-llama/Llama-3.1-70B": "llama3-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama3-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}
ENGINES = {"vllm": "vllm-v1", "sglang": "sglang", "trtllm": "trtllm"}
WEIGHTS = {"fp8": "fp8", "": "bf16"}


def _int(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value == int(value) else None


def rows(path: Path) -> list[list[object]]:
    out = []
    with path.open(newline="", encoding="utf-8") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            if r["mode"] != "agg" or r["model_path"] not in MODELS or r["system"] not in SYSTEMS:
                continue
            if r["backend"] not in ENGINES or r["precision"] not in WEIGHTS:
                continue
            c, tp = _int(r["batch_size"]), _int(r["tp_size"])
            if (
                c is None
                or tp is None
                or _int(r["pp_size"] or "1") != 1
                or (_int(r["attention_dp_size"] or "1") or 1) > 1
            ):
                continue
            ttft, tpot = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
            out.append(
                [
                    line,
                    MODELS[r["model_path"]],
                    SYSTEMS[r["system"]],
                    ENGINES[r["backend"]],
                    r["backend_version"] or "",
                    WEIGHTS[r["precision"]],
                    tp,
                    int(r["isl"]),
                    int(r["osl"]),
                    c,
                    round(ttft, 3),
                    round(tpot, 4),
                ]
            )
    return out


def main() -> None:
    path, commit = Path(sys.argv[1]), sys.argv[2]
    data = {
        "about": (
            "Measured serving runs from public sources, one row a run: the setting (model preset, device, engine, engine "
            "version, weight format, tensor parallelism, prompt and output tokens, closed-loop concurrency) and the "
            "measured means (TTFT ms, TPOT ms). Written by benchmarks/extract_silicon_sample.py; read by "
            "costmodel/serving/measured.py."
        ),
        "sources": {
            "aic": {
                "url": f"https://github.com/ai-dynamo/aiconfigurator/blob/{commit}/{FILE}",
                "repo": "ai-dynamo/aiconfigurator",
                "commit": commit,
                "file": FILE,
                "experiment": (
                    "aiperf against the engine's OpenAI server, streaming, closed loop at the concurrency, fixed "
                    "prompt and output lengths (stddev 0, ignore_eos, min_tokens = max_tokens = OSL), a warm-up of "
                    "one request per user, then rounds x concurrency requests; TTFT and TPOT are aiperf's means "
                    "(TPOT = (E2E - TTFT) / (OSL - 1)). As AIConfigurator's generator writes it: "
                    f"src/aiconfigurator/generator/sflow.py lines 414-437 (rounds: 20 by default, line 501) at {commit}"
                ),
            }
        },
        "columns": list(COLUMNS),
        "rows": {"aic": rows(path)},
    }
    text = json.dumps(data, indent=1)
    # one row a line: the file stays readable and diffs stay small
    text = re.sub(
        r"\[\n\s+(\d+),\n(.*?)\n\s+\]",
        lambda m: "[" + " ".join((m.group(1) + ",\n" + m.group(2)).split()) + "]",
        text,
        flags=re.S,
    )
    out = Path(__file__).resolve().parents[1] / "costmodel/serving/data/measured_serving.json"
    out.write_text(text + "\n", encoding="utf-8")
    print(f"{out}: {len(data['rows']['aic'])} rows")


if __name__ == "__main__":
    main()
