"""The bad-input corpus (tests/corpus/bad_inputs.json): every case is refused cleanly.

CLI cases: exit code 2, exactly one line on stderr containing the expected
fragment, nothing on stdout, no traceback. Pattern cases: building a matmul
with that pattern raises CostModelError with the expected fragment.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from costmodel import CostModelError
from costmodel.cli import main
from costmodel.kit import GraphBuilder

CASES = json.loads((pathlib.Path(__file__).parents[1] / "corpus" / "bad_inputs.json").read_text())


def test_corpus_is_large_and_ids_unique():
    assert len(CASES) >= 60
    assert len({c["id"] for c in CASES}) == len(CASES)


def _write(tmp: pathlib.Path, files: dict) -> None:
    for name, content in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif "hex" in content:
            path.write_bytes(bytes.fromhex(content["hex"]))
        else:  # a large file of spaces
            with open(path, "wb") as fh:
                fh.truncate(content["size"])


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "cli"], ids=lambda c: c["id"])
def test_cli_case(case, tmp_path, capsys):
    _write(tmp_path, case.get("files", {}))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case["argv"]]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == ""
    assert err.startswith("costmodel: error: ") and err.count("\n") == 1, err
    assert case["expect"] in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "pattern"], ids=lambda c: c["id"])
def test_pattern_case(case):
    with pytest.raises(CostModelError) as err:
        b = GraphBuilder("corpus", **case["sizes"])
        x = b.input("x", "b t d", dtype="bf16")
        b.matmul("op", x, case["pattern"])
    assert case["expect"] in str(err.value)
    assert "\n" not in str(err.value)
