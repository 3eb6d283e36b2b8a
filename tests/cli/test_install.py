"""Installs and runs anywhere: a version, sizes as people write them, plugins that fail are named, a plain
checkout finds its architectures, model ids people know."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest

import costmodel
from costmodel.cli import main


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's --version exits 0 itself
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_version():
    code, out, _ = run(["--version"])
    assert code == 0 and out.strip() == f"costmodel {costmodel.__version__}"


@pytest.mark.parametrize(
    "flag,text,value",
    [
        ("--tokens", "300B", 300 * 10**9),
        ("--tokens", "15T", 15 * 10**12),
        ("--tokens", "3e11", 3 * 10**11),
        ("--seq", "1k", 1024),
        ("--seq", "512", 512),
    ],
)
def test_sizes_with_suffixes_are_exact(flag, text, value):
    code, out, err = run(["estimate", "gpt2-small", flag, text, "--json"])
    assert code == 0, err
    r = json.loads(out)
    assert (r["tokens"]["total"] if flag == "--tokens" else r["config"]["T"]) == value


def test_memory_and_context_suffixes():
    assert costmodel.fit("gpt2-small", "80GB")["memory"] == 80 * 10**9
    assert costmodel.fit("gpt2-small", "80GiB")["memory"] == 80 * 2**30
    r = costmodel.estimate("llama3-8b", inference=True, context="128k")  # 128k = 131,072: contexts count in 2^10
    assert r["memory"]["conventions"]["kv_cache"].startswith("every tensor tagged kv_cache for 131072 tokens")


def test_familiar_ids_are_aliases_of_presets():
    assert costmodel.estimate("gpt2")["model"] == "gpt2-small"
    assert costmodel.estimate("meta-llama/Llama-2-7b-hf")["params"]["total"] == 6_738_415_616
    code, _, err = run(["estimate", "gpt-2"])
    assert code == 2 and ("'gpt2-small'" in err or "'gpt2'" in err)


def test_a_plugin_that_fails_to_load_is_named_not_a_crash(monkeypatch):
    import costmodel.families as fams

    class Broken:
        name, value = "someones_plugin", "someones_plugin:architectures"

        def load(self):
            raise ImportError("No module named 'someones_plugin'")

    real = fams.entry_points
    monkeypatch.setattr(fams, "entry_points", lambda group: [*real(group=group), Broken()])
    fams.families.cache_clear()
    try:
        assert "gpt" in fams.families()  # the others still load
        assert "entry point someones_plugin (someones_plugin:architectures)" in fams.broken_plugins()
        code, _, err = run(["estimate", "no-such-model"])
        assert code == 2 and "someones_plugin" in err and err.count("\n") == 1
    finally:
        fams.families.cache_clear()


def test_a_plain_checkout_loads_the_graphs_folder(monkeypatch):
    """Never installed, the checkout has no entry point: its graphs/ folder is loaded as costmodel_graphs."""
    import costmodel.families as fams

    for name in [m for m in sys.modules if m == "costmodel_graphs" or m.startswith("costmodel_graphs.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(
        sys,
        "meta_path",
        [
            f
            for f in sys.meta_path
            if "editable" not in type(f).__name__.lower() and "editable" not in getattr(f, "__module__", "")
        ],
    )
    monkeypatch.setattr(fams, "entry_points", lambda group: [])
    fams.families.cache_clear()
    try:
        found = fams.families()
        assert "llama" in found and not fams.broken_plugins()
        assert sys.modules["costmodel_graphs"].__file__.endswith("graphs/__init__.py")
    finally:
        fams.families.cache_clear()


def test_the_wheel_builds_without_setuptools_banners(tmp_path):
    # issue 30: the wheel build printed setuptools' "Package would be ignored" banners (the data folders,
    # importable, not listed as packages) and a deprecation banner for `project.license` as a table; the
    # build runs on a copy of the sources, so the checkout gets no build/ or egg-info
    import shutil
    import subprocess
    import zipfile
    from pathlib import Path

    import build  # noqa: F401  (in the test extra: a missing one fails, never skips)

    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("costmodel", "graphs"):
        shutil.copytree(root / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "setup.py", "README.md", "costmodel_entry.py"):
        shutil.copy(root / name, src / name)
    r = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        cwd=src,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    assert "Package would be ignored" not in out
    assert "!!\n" not in out and "Deprecat" not in out, out[out.find("!!") :][:1500]  # setuptools' banners
    (wheel,) = (tmp_path / "dist").glob("costmodel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "costmodel/render/assets/page.js" in names and "costmodel/devices/data/" in " ".join(names)
    assert "costmodel_graphs/__init__.py" in names and "costmodel_entry.py" in names
