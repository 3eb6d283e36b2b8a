"""Golden JSON of the CLI contract: ``python tests/golden/generate.py`` (``--check`` to compare).

Each case is a command line whose ``--json`` output users' scripts read. The files in
``tests/golden/cases/`` were written by the code *before* a change; ``tests/test_contract_golden.py``
checks that every key and value there is still produced (new keys may be added, none renamed
or dropped, no value changed). A deliberate change of a number regenerates the file and says why
in the commit.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"

#: Option sets of ``estimate --json``: each a slice of the contract (training, time, memory layouts, inference).
ESTIMATE_OPTIONS = {
    "default": [],
    "time": ["--batch", "4", "--tokens", "3e11", "--hardware", "h100-sxm", "--achieved-tflops", "400"],
    "zero-flash-full": [
        "--batch",
        "8",
        "--recompute",
        "full",
        "--flash",
        "--zero",
        "1",
        "--dp",
        "8",
        "--precision",
        "fp32",
        "--optimizer",
        "adafactor",
    ],
    "inference": ["--inference", "--context", "2048", "--weights-dtype", "int8", "--hardware", "a100-80gb"],
    "layout": [
        "--batch",
        "8",
        "--tp",
        "2",
        "--pp",
        "2",
        "--dp",
        "2",
        "--megatron-sp",
        "--micro-batch",
        "1",
        "--recompute",
        "selective",
        "--hardware",
        "h100-sxm",
    ],
    "half-mfu": ["--causal", "half", "--mfu", "0.4", "--hardware", "h100-sxm", "--tokens", "1e12", "--seq", "512"],
    "pure-8bit": ["--precision", "bf16-pure", "--optimizer", "adam-8bit", "--recompute", "selective", "--batch", "2"],
}
DERIVE_OPTIONS = {"default": [], "half": ["--causal", "half"]}
#: Other commands with a JSON contract, on a few models.
OTHER = {
    "compare-gpt3-175b": ["compare", "gpt3-175b", "--tokens", "3e11", "--json"],
    "compare-mixtral": ["compare", "mixtral-8x7b", "--json"],
    "roofline-llama2-decode": [
        "roofline",
        "llama2-7b",
        "--hardware",
        "h100-sxm",
        "--decode",
        "--context",
        "4096",
        "--json",
    ],
    "roofline-gpt2-training": [
        "roofline",
        "gpt2-small",
        "--hardware",
        "a100-80gb",
        "--phase",
        "training",
        "--batch",
        "8",
        "--json",
    ],
    "roofline-deepseek-decode": [
        "roofline",
        "deepseek-v3",
        "--hardware",
        "h200",
        "--decode",
        "--context",
        "1024",
        "--batch",
        "16",
        "--json",
    ],
    "fit-llama3-8b": ["fit", "llama3-8b", "--hardware", "h100-sxm", "--flash", "--json"],
    "fit-llama3-8b-inference": ["fit", "llama3-8b", "--memory", "80GB", "--inference", "--context", "8192", "--json"],
    "fit-gpt2-seq": ["fit", "gpt2-small", "--memory", "8GB", "--solve", "seq", "--batch", "4", "--json"],
    "sweep-gpt3": [
        "sweep",
        "gpt3-175b",
        "--grid",
        "L=24,48,96",
        "--grid",
        "d=4096,12288",
        "--metric",
        "flops.training",
        "--metric",
        "memory_bytes.total",
        "--metric",
        "params.total",
        "--exact",
        "--json",
    ],
    "hardware": ["hardware", "--json"],
    "models": ["models", "--json"],
}


def presets() -> list[str]:
    from costmodel.families import presets as all_presets

    return sorted(all_presets())


def cases() -> dict[str, list[str]]:
    """Case name → argv."""
    out: dict[str, list[str]] = {}
    for p in presets():
        for name, opts in ESTIMATE_OPTIONS.items():
            out[f"estimate-{p}-{name}"] = ["estimate", p, "--json", *opts]
        for name, opts in DERIVE_OPTIONS.items():
            out[f"derive-{p}-{name}"] = ["derive", p, "--format", "json", *opts]
    out.update(OTHER)
    return out


def run(argv: list[str]) -> tuple[int, object]:
    """(exit code, parsed JSON or stderr text) of one command line, in-process."""
    from costmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, json.loads(out.getvalue()) if code == 0 else err.getvalue().strip()


def main(args: list[str]) -> int:
    CASES_DIR.mkdir(exist_ok=True)
    for name, argv in cases().items():
        code, result = run(argv)
        path = CASES_DIR / f"{name}.json"
        path.write_text(json.dumps({"argv": argv, "exit": code, "result": result}, indent=1, sort_keys=True) + "\n")
        print(f"{name}: exit {code}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
