"""The measured serving runs: the built-in file reads, every bad row is one CostModelError naming where."""

import copy
import json

import pytest

from costmodel import CostModelError
from costmodel.serving import measured

KNOWN = {
    "model": frozenset({"llama3-8b"}),
    "hardware": frozenset({"h100-sxm"}),
    "engine": frozenset({"vllm-v1"}),
    "weights_dtype": frozenset({"bf16", "fp8"}),
}
SOURCE = {"url": "https://example.org/x.csv", "repo": "o/r", "commit": "0" * 40, "file": "x.csv", "experiment": "e"}
ROW = [2, "llama3-8b", "h100-sxm", "vllm-v1", "0.12.0", "fp8", 1, 1024, 128, 8, 50.0, 10.0]


def _data(*rows):
    return {"sources": {"s": SOURCE}, "columns": list(measured.COLUMNS), "rows": {"s": [list(r) for r in rows]}}


def test_builtin_file_reads_and_every_row_has_its_source():
    rs = measured.runs()
    assert len(rs) >= 900  # 910 rows of AIConfigurator's silicon_sample.csv (benchmarks/extract_silicon_sample.py)
    srcs = measured.sources()
    for r in rs:
        assert r.source in srcs and r.line >= 2  # line 1 of the CSV is its header
    assert all(len(srcs[s]["commit"]) == 40 for s in srcs)


def test_a_good_row_and_what_it_implies():
    (r,) = measured.parse(_data(ROW), "t", KNOWN)
    assert (r.ttft_s, r.tpot_s) == (0.05, 0.01)
    # E2E = TTFT + (O - 1)·TPOT = 0.05 + 127·0.01 = 1.32 s; tokens/s = C·O/E2E = 8·128/1.32
    assert r.e2e_s == pytest.approx(1.32)
    assert r.output_tokens_per_s == pytest.approx(8 * 128 / 1.32)


@pytest.mark.parametrize(
    "index, value, says",
    [
        (1, "llama9-1b", "unknown model"),
        (2, "tpu-v9", "unknown hardware"),
        (3, "vllm-v9", "unknown engine"),
        (5, "fp3", "unknown weights_dtype"),
        (6, 0, "tp must be a whole number"),
        (7, 1.5, "input_tokens must be a whole number"),
        (8, 1, "output_tokens must be >= 2"),
        (9, True, "concurrency must be a whole number"),
        (10, -1.0, "ttft_ms must be milliseconds > 0"),
        (11, float("nan"), "tpot_ms must be milliseconds > 0"),
        (4, None, "engine_version must be a string"),
    ],
)
def test_a_bad_row_is_one_error_naming_source_line_and_field(index, value, says):
    row = list(ROW)
    row[index] = value
    with pytest.raises(CostModelError, match=f"source 's' line 2: {says}"):
        measured.parse(_data(row), "t", KNOWN)


def test_bad_file_shapes():
    with pytest.raises(CostModelError, match="a row must be a list of 12 values"):
        measured.parse(_data(ROW[:-1]), "t", KNOWN)
    with pytest.raises(CostModelError, match="appears twice"):
        measured.parse(_data(ROW, ROW), "t", KNOWN)
    bad = _data(ROW)
    bad["columns"] = bad["columns"][::-1]
    with pytest.raises(CostModelError, match="columns must be"):
        measured.parse(bad, "t", KNOWN)
    bad = copy.deepcopy(_data(ROW))
    del bad["sources"]["s"]["commit"]
    with pytest.raises(CostModelError, match="source 's' must give"):
        measured.parse(bad, "t", KNOWN)
    bad = _data(ROW)
    bad["rows"]["other"] = []
    with pytest.raises(CostModelError, match="not among the sources"):
        measured.parse(bad, "t", KNOWN)
    with pytest.raises(CostModelError, match="expected"):
        measured.parse([], "t", KNOWN)


def test_a_user_file_reads_and_bad_json_is_one_error(tmp_path):
    good = tmp_path / "m.json"
    good.write_text(json.dumps(_data(ROW)), encoding="utf-8")
    assert measured.runs(good)[0].model == "llama3-8b"  # the built-in names: llama3-8b is a preset
    bad = tmp_path / "b.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(CostModelError, match="not valid JSON"):
        measured.runs(bad)
