"""The derive-once path of ``estimate``: formulas emitted as plain integer arithmetic and cached on disk.

What it must keep: the same numbers as a derivation done afresh (the derivation itself is checked against
independent counts elsewhere), no sympy or networkx in a process served from the cache, a new derivation when
anything the formulas depend on changes, and a cache that survives corrupt files and concurrent writers.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import costmodel
from costmodel.formulas import compiled as formulas
from costmodel.verbs import estimate as fast

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(tmp_path))
    fast._MEMO.clear()
    fast._KEYS.clear()
    yield tmp_path
    fast._MEMO.clear()
    fast._KEYS.clear()


def fresh(model, **options):
    """An estimate derived now, bypassing both caches."""
    from costmodel.sections.run import estimate_formulas

    opts = costmodel.Options.make(**options)
    return fast.report(estimate_formulas(model, None, opts), opts)


@pytest.mark.parametrize(
    "model, options",
    [
        ("gpt2-small", {"batch": 8, "seq": 512}),
        ("llama2-7b", {"recompute": "selective", "flash": True, "tp": 2, "dp": 4, "batch": 8}),
        ("mixtral-8x7b", {"inference": True, "context": 4096, "batch": 4}),
        ("gpt3-175b", {"tokens": 300_000_000_000, "hardware": "a100-80gb", "mfu": "0.5"}),
    ],
)
def test_cached_equals_fresh(cache, model, options):
    first = costmodel.estimate(model, **options)  # derives and stores
    assert list(cache.glob("*.json")), "nothing was cached"
    fast._MEMO.clear()
    second = costmodel.estimate(model, **options)  # read back from disk
    assert dict(first) == dict(second) == fresh(model, **options)


def test_one_derivation_serves_every_batch_and_length(cache):
    costmodel.estimate("gpt2-small", batch=1, seq=128)
    files = set(cache.glob("*.json"))
    for b, t in [(3, 1024), (64, 77), (1, 1)]:
        got = costmodel.estimate("gpt2-small", batch=b, seq=t)
        assert got["flops"]["training"] == fresh("gpt2-small", batch=b, seq=t)["flops"]["training"]
    assert set(cache.glob("*.json")) == files  # B and T are values, not choices: no new derivation


def test_a_corrupt_cache_file_is_derived_again(cache):
    want = costmodel.estimate("gpt2-small")
    for f in cache.glob("*.json"):
        f.write_text('{"format": 1, "source": "raise SystemExit')  # cut short, as by a crash mid-write
    fast._MEMO.clear()
    assert dict(costmodel.estimate("gpt2-small")) == dict(want)


def test_a_changed_config_file_is_derived_again(cache, tmp_path):
    cfg = json.loads((ROOT / "docs/examples/config.json").read_text())
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    before = costmodel.estimate(str(path))["params"]["total"]
    cfg["num_hidden_layers"] += 1
    path.write_text(json.dumps(cfg))
    after = costmodel.estimate(str(path))["params"]["total"]
    # one more layer: its parameters, counted independently from the config (LLaMA: 4 d² attention with GQA
    # k/v at d·d_kv each, 3 d·d_ff MLP, 2 RMSNorm weights)
    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
    kv = d // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    assert after - before == 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d


def test_the_json_artifact_round_trips(cache):
    costmodel.estimate("llama2-7b")
    (path,) = cache.glob("*.json")
    f = formulas.Formulas.from_json(path.read_text())
    assert formulas.Formulas.from_json(f.to_json()).to_json() == f.to_json()


def test_cache_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", "off")
    fast._MEMO.clear()
    fast._KEYS.clear()
    assert formulas.cache_dir() is None
    assert costmodel.estimate("gpt2-small")["params"]["total"] == 124_439_808
    assert not list(tmp_path.iterdir())


def run_py(code: str, cache_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSTMODEL_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_a_cached_estimate_imports_neither_sympy_nor_networkx(tmp_path):
    code = (
        "import sys, costmodel\nr = costmodel.estimate('gpt2-small', batch=2)\n"
        "print(r['params']['total'], 'sympy' in sys.modules, 'networkx' in sys.modules)"
    )
    cold = run_py(code, tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.split() == ["124439808", "True", "True"]  # the first run derives
    warm = run_py(code, tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["124439808", "False", "False"]


def test_concurrent_writers_leave_a_valid_cache(tmp_path):
    code = "import costmodel\nprint(costmodel.estimate('gpt2-small', seq=256)['flops']['training'])"
    env = {**os.environ, "COSTMODEL_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp*"))
    formulas.Formulas.from_json(files[0].read_text())  # whole, parseable


def test_the_code_stamp_covers_every_stage(tmp_path, monkeypatch):
    """An edit anywhere in costmodel/ (memory/, sections/...) derives again: the stamp hashed only formulas/
    after compiled.py moved there, so a cached estimate kept a rule that memory/parallel.py no longer had."""
    probe = ROOT / "costmodel" / "memory" / "parallel.py"
    before = formulas._code_stamp()
    stat = probe.stat()
    try:
        os.utime(probe, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert formulas._code_stamp() != before
    finally:
        os.utime(probe, ns=(stat.st_atime_ns, stat.st_mtime_ns))
