"""docs/hardware.md shows the device table the engine prints: it must not drift."""

from pathlib import Path

from costmodel.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "hardware.md"


def test_docs_table_matches_the_command(capsys):
    assert main(["hardware"]) == 0
    table = capsys.readouterr().out
    assert table in DOC.read_text(encoding="utf-8"), "regenerate the table in docs/hardware.md: costmodel hardware"
