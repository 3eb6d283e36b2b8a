"""The formula cache cannot be poisoned (issue 31, items 1-3, 13, 14, 19, 20): a cached file is code that
``estimate`` and ``sweep`` run, so one that this user did not seal — planted by another user, edited, cut short,
renamed to another key, or a FIFO, a device, a sparse file — is never run and never changes a number; it is
derived again. The folder is this user's own (0700, parents included, whatever the umask), and a relative
``XDG_CACHE_HOME`` is ignored, as the XDG spec says."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import costmodel
from costmodel import files
from costmodel.formulas import compiled as formulas
from costmodel.verbs import estimate as fast


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(folder))
    fast._MEMO.clear()
    fast._KEYS.clear()
    yield folder
    fast._MEMO.clear()
    fast._KEYS.clear()


def _again(model="gpt2-small", **kw):
    fast._MEMO.clear()
    return costmodel.estimate(model, **kw)


def _entry(cache: Path) -> Path:
    (path,) = [p for p in cache.glob("*.json")]
    return path


def _planted(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')\n"


def test_an_unsealed_entry_is_never_run(cache, tmp_path):
    """Another user with the same install computes the key and plants a plain JSON entry (as round two's format)."""
    want = dict(costmodel.estimate("gpt2-small"))
    path = _entry(cache)
    text = path.read_text()
    body = json.loads(text)
    marker = tmp_path / "ran"
    body.pop("seal")
    body["source"] = _planted(marker) + body["source"]
    path.write_text(json.dumps(body))
    assert dict(_again()) == want
    assert not marker.exists()


def test_an_edited_sealed_entry_is_never_run(cache, tmp_path):
    want = dict(costmodel.estimate("gpt2-small"))
    path = _entry(cache)
    seal, rest = path.read_text().split('", ', 1)
    marker = tmp_path / "ran"
    body = json.loads("{" + rest)
    body["source"] = _planted(marker) + body["source"]
    path.write_text(seal + '", ' + json.dumps(body)[1:])  # the old seal kept
    assert dict(_again()) == want
    assert not marker.exists()


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.replace("12", "13", 1),  # a coefficient
        lambda t: t.replace('"L": 12', '"L": 13'),  # meta.values.L
        lambda t: t[: len(t) // 2],  # cut short
        lambda t: t.replace('"keys": [', '"keys": ["x", ', 1),
    ],
    ids=["coefficient", "values-L", "truncated", "keys"],
)
def test_a_corrupted_entry_never_changes_a_number(cache, damage):
    want = dict(costmodel.estimate("gpt2-small"))
    path = _entry(cache)
    text = path.read_text()
    assert damage(text) != text
    path.write_text(damage(text))
    assert dict(_again()) == want


def test_an_entry_renamed_to_another_key_is_not_used(cache):
    small = dict(costmodel.estimate("gpt2-small"))
    (a,) = cache.glob("*.json")
    costmodel.estimate("gpt2-medium")
    (b,) = set(cache.glob("*.json")) - {a}
    b.write_bytes(a.read_bytes())  # gpt2-small's sealed formulas under gpt2-medium's key
    assert _again("gpt2-medium")["params"]["total"] != small["params"]["total"]


def test_a_sweep_plan_s_checks_are_never_run_unsealed(cache, tmp_path):
    want = costmodel.sweep("gpt2-small", {"L": [2, 12]}, ["params.total"])
    marker = tmp_path / "ran"
    for path in cache.glob("*.json"):
        body = json.loads(path.read_text())
        body.pop("seal")
        if "checks" in body["meta"]:
            body["meta"]["checks"] = _planted(marker) + body["meta"]["checks"]
        path.write_text(json.dumps(body))
    fast._MEMO.clear()
    got = costmodel.sweep("gpt2-small", {"L": [2, 12]}, ["params.total"])
    assert list(got) == list(want)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse"])
def test_a_special_file_in_the_cache_is_derived_again(cache, kind):
    want = dict(costmodel.estimate("gpt2-small"))
    path = _entry(cache)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        with open(path, "wb") as fh:
            fh.truncate(1 << 30)
    assert dict(_again()) == want  # no hang, no 1 GiB read


def test_a_folder_others_can_write_is_not_used(cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    costmodel.estimate("gpt2-small")
    assert list(cache.iterdir()) == []
    assert formulas.load("0" * 40) is None


def test_a_secret_others_can_read_is_not_used(cache):
    costmodel.estimate("gpt2-small")
    os.chmod(cache / files.SECRET_NAME, 0o644)
    assert files.folder_secret(cache) is None
    assert formulas.load(_entry(cache).stem) is None


def test_the_folder_and_its_parents_are_0700_under_umask_000(tmp_path, monkeypatch):
    folder = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(folder))
    fast._MEMO.clear()
    old = os.umask(0)
    try:
        costmodel.estimate("gpt2-small")
    finally:
        os.umask(old)
        fast._MEMO.clear()
    for p in (tmp_path / "a", tmp_path / "a" / "b", folder):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert stat.S_IMODE((folder / files.SECRET_NAME).stat().st_mode) == 0o600
    assert list(folder.glob("*.json"))


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.delenv("COSTMODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert formulas.cache_dir() == tmp_path / ".cache" / "costmodel"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert formulas.cache_dir() == tmp_path / "xdg" / "costmodel"


BUILDER = """
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helper import WIDTH  # noqa: E402

from costmodel.kit import GraphBuilder  # noqa: E402
from costmodel.symbols import B, L, T, V, d, h  # noqa: E402
from costmodel_graphs.blocks import causal_self_attention, decoder, gelu_mlp, parallel_layer  # noqa: E402


def build(*, dtype="bf16"):
    b = GraphBuilder("helped", dtype=dtype, b=B, t=T, s=T, d=d, v=V, h=h, k=d / h, f=WIDTH * d)

    def layer(b, x):
        return parallel_layer(
            b,
            x,
            lambda b, x: causal_self_attention(b, x, bias=False, dropout_p=False),
            lambda b, x: gelu_mlp(b, x, bias=False, dropout_p=False),
        )

    return decoder(b, [("layers", L, layer)], tied=False, rms=False)
"""
SIZES = {"L": 1, "d": 8, "h": 2, "V": 10, "T": 4}


def test_a_builder_s_helper_module_is_in_the_key(cache, tmp_path):
    """Edit the helper the builder imports from its folder: new numbers, not the cached old ones."""
    import sys

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "b.py").write_text(BUILDER)
    (folder / "helper.py").write_text("WIDTH = 4\n")
    model = f"{folder / 'b.py'}:build"
    four = costmodel.estimate(model, settings=SIZES)["params"]["total"]
    (folder / "helper.py").write_text("WIDTH = 2\n")
    sys.modules.pop("helper", None)
    fast._KEYS.clear()
    two = _again(model, settings=SIZES)["params"]["total"]
    sys.modules.pop("helper", None)
    sys.path.remove(str(folder))
    assert four - two == 2 * (2 * 8 * 8)  # the MLP's two matrices, d x 4d against d x 2d


def test_a_builder_is_hashed_whole(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_bytes(b"#" * (5 << 20) + b"\nX = 1\n")
    b.write_bytes(b"#" * (5 << 20) + b"\nX = 2\n")
    assert formulas.file_digest(str(a)) != formulas.file_digest(str(b))
