"""Hostile input, round three (issue 31): the corpus holds a case for each item a command line can show (the
replay is ``test_hostile.py``'s); the cache, writes, escaping and API items are tested where they live:
``tests/reports/test_cache_security.py`` (1-3, 13, 14, 19, 20), ``tests/reports/test_injection.py`` (4-6, CJK),
``tests/cli/test_writes.py`` (8-12), ``tests/reports/test_chunk_cap.py`` (19), ``tests/arch/test_config_bounds.py``
(18), ``tests/test_api_inputs.py`` (16, 20)."""

from __future__ import annotations

import json
import pathlib

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "corpus" / "hostile_inputs.json"
CASES = json.loads(CORPUS.read_text())


def test_the_corpus_covers_round_three():
    ids = {c["id"] for c in CASES}
    for needed in (
        "hardware-escape-in-name-hardware",  # 7
        "hardware-bidi-in-name-plan",
        "calibrate-gemm-1e300",  # 15
        "calibrate-seconds-1e-300",
        "calibrate-arabic-indic-digits",
        "huge-exponent-tokens",  # 17
        "huge-exponent-hardware-bandwidth",
        "huge-exponent-sweep-grid",
        "config-layers-qwen3",  # 18
        "config-layers-gemma2-missing-field",
        "builder-graph-with-a-cycle",  # 20
        "trace-factory-returns-42",
        "trace-inputs-of-the-wrong-shape",
        "recover-samples-100000",
        "recover-autoconfig",
    ):
        assert needed in ids, needed
