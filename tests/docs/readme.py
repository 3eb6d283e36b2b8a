"""The README's code, read from the README itself (so it cannot drift from what the tests and CI run).

``setup_commands()``: the two commands at the top; ``use_commands()``: every command of the "Use" section
(comments stripped); ``python_snippets()``: the Python blocks. ``python .ci/readme_from_wheel.py`` runs them
from an installed wheel; ``tests/docs/test_readme.py`` runs them in the test environment.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(text: str | None = None) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(text if text is not None else README.read_text())]


def setup_commands() -> list[str]:
    """The two set-up commands: the first bash block."""
    lang, body = blocks()[0]
    assert lang == "bash"
    return [line for line in body.splitlines() if line.strip()]


def use_commands() -> list[list[str]]:
    """Each ``costmodel ...`` line of the "Use" section as an argv (without ``costmodel``), comments stripped."""
    text = README.read_text()
    section = text[text.index("## Use") :]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    out = []
    for lang, body in blocks(section):
        if lang != "bash":
            continue
        for line in body.splitlines():
            line = re.split(r"\s#\s", line)[0].strip()
            if line.startswith("costmodel "):
                out.append(shlex.split(line)[1:])
    return out


def python_snippets() -> list[str]:
    return [body for lang, body in blocks() if lang == "python"]
