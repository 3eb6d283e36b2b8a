"""pdflatex for the LaTeX tests: found on PATH, required where CI says so, one run of a file in its folder."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PDFLATEX = shutil.which("pdflatex")


def need_pdflatex() -> None:
    """Skip without pdflatex, or fail where ``COSTMODEL_REQUIRE_PDFLATEX`` is set (CI installs it)."""
    if PDFLATEX is None:  # CI (.ci/run) installs it and requires it
        if os.environ.get("COSTMODEL_REQUIRE_PDFLATEX"):
            pytest.fail("pdflatex is required here (COSTMODEL_REQUIRE_PDFLATEX is set) but not installed")
        pytest.skip("pdflatex not installed (.ci/run installs it: texlive-latex-base, texlive-latex-recommended)")


def pdflatex(folder, name: str, timeout: int) -> subprocess.CompletedProcess:
    """One non-interactive pdflatex run of ``folder/name`` (halting at the first error), in ``folder``."""
    return subprocess.run(
        [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
