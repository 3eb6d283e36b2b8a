"""``costmodel check --against`` and the pytest plugin, on docs/examples/my_attention.py (a builder and its
PyTorch module): it passes, each planted bug is caught with the smallest failing sizes and the term that
differs, a bad ``--against`` is one line and exit 2, and a user's test file runs under the plugin.

Small: 4-5 examples a property, tiny sizes, the module on ``meta`` for FLOPs and on CPU for saved bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401  (the torch marker)

from costmodel.cli import main
from costmodel.testing import assert_matches_torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "my_attention.py"
SOURCE = EXAMPLE.read_text()


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def planted(tmp_path: Path, name: str, old: str, new: str) -> str:
    """A copy of the example with one line changed: the bug a user might write."""
    assert old in SOURCE
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.replace(old, new))
    return str(path)


def test_the_example_matches_its_torch_module():
    assert_matches_torch(f"{EXAMPLE}:build", f"{EXAMPLE}:torch_module", examples=4)


def test_a_matmul_whose_weight_drops_an_axis_is_caught_and_shrunk(tmp_path):
    path = planted(tmp_path, "dropped", '"b h t k, h k d -> b t d"', '"b h t k, k d -> b t d"')
    code, out, _ = run(["check", f"{path}:build", "--against", f"{path}:torch_module", "--examples", "5"])
    assert code == 1
    # the smallest sizes where the weight's missing h shows: h = 2 (so d = 2, k = 1), every other size 1 (V 2)
    assert "params = numel: FAIL at B=1, L=1, T=1, V=2, d=2, h=2" in out
    # the output projection: costmodel k·d = 1·2 = 2 parameters, torch h·k·d = d·d = 4
    assert "params.total: costmodel 72, torch 74 (costmodel - torch = -2)" in out
    assert "layers.attn.proj 2 vs 4" in out
    # FLOPs agree: 2 × the product of the distinct axes b, h, t, k, d is the same with or without h on the weight
    assert "matmul FLOPs = FlopCounterMode (forward): pass" in out


def test_a_saved_tensor_counted_twice_is_caught_and_shrunk(tmp_path):
    line = '            u = b.elementwise("gelu", "gelu", u, "b t f")\n'
    path = planted(tmp_path, "twice", line, line + line.replace('"gelu", "gelu"', '"gelu_again", "gelu"'))
    code, out, _ = run(
        [
            "check",
            f"{path}:build",
            "--against",
            f"{path}:torch_module",
            "--examples",
            "4",
            "--terms",
            "memory_bytes.activations",
        ]
    )
    assert code == 1
    assert "activations = saved_tensors_hooks bytes: FAIL at B=1, L=1, T=1, V=2, d=1, h=1" in out
    # the second GELU keeps its input too: B·T·4d = 4 elements × 4 bytes (fp32) = 16 bytes more than torch
    assert "memory_bytes.activations: costmodel 144, torch 128 (costmodel - torch = 16)" in out


def test_json_names_every_property_and_its_counterexample(tmp_path):
    import json

    path = planted(tmp_path, "dropped", '"b h t k, h k d -> b t d"', '"b h t k, k d -> b t d"')
    code, out, _ = run(
        [
            "check",
            f"{path}:build",
            "--against",
            f"{path}:torch_module",
            "--examples",
            "3",
            "--terms",
            "params.total",
            "--json",
        ]
    )
    r = json.loads(out)
    assert code == 1 and r["passed"] is False
    failed = [p for p in r["properties"] if not p["passed"]]
    assert [p["name"] for p in failed] == ["params = numel"]
    assert failed[0]["counterexample"] == {"B": 1, "L": 1, "T": 1, "V": 2, "d": 2, "h": 2}
    assert failed[0]["differences"][0]["term"] == "params.total" and failed[0]["differences"][0]["derived"] == 72


FACTORIES = {
    "raises": "def f(B, T, d, h, L, V):\n    raise ValueError('no such size')\n",
    "wrong_shape": "def f(B, T, d, h, L, V):\n    return 42\n",
    "forward_fails": (
        "import torch\ndef f(B, T, d, h, L, V):\n    return torch.nn.Linear(3, 5), (torch.zeros(B, 7),)\n"
    ),
    "unknown_size": "def f(B, n_widgets):\n    return None\n",
}


@pytest.mark.parametrize("case", [*sorted(FACTORIES), "missing_file", "missing_function"])
def test_a_bad_against_is_one_line_and_exit_2(tmp_path, case):
    path = tmp_path / "factory.py"
    spec = f"{path}:f"
    if case in FACTORIES:
        path.write_text(FACTORIES[case])
    elif case == "missing_function":
        path.write_text("def g():\n    pass\n")
    else:
        spec = f"{tmp_path / 'nowhere.py'}:f"
    code, out, err = run(["check", f"{EXAMPLE}:build", "--against", spec, "--examples", "2", "--terms", "params.total"])
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("costmodel: error: "), err
    expected = {
        "raises": "the factory raised ValueError: no such size",
        "wrong_shape": "the factory returned int; expected (module, example_inputs)",
        "forward_fails": "the module's forward raised RuntimeError",
        "unknown_size": "the factory requires n_widgets",
        "missing_file": "no file",
        "missing_function": "has no function 'f'",
    }[case]
    assert expected in err


@pytest.mark.parametrize(
    "argv", [["--examples", "0"], ["--seed", "-1"], ["--range", "d=8"], ["--terms", "flops.nonsense"]]
)
def test_bad_flags_are_one_line_and_exit_2(argv):
    code, _, err = run(["check", "gpt", *argv])
    assert code == 2 and err.count("\n") == 1


def test_without_hypothesis_check_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # as if not installed
    code, _, err = run(["check", "gpt", "--examples", "1"])
    assert code == 2 and "pip install 'costmodel[verify]'" in err and err.count("\n") == 1


def _pytest(tmp_path: Path, test_file: str) -> subprocess.CompletedProcess:
    """A user's test file run by pytest in its own folder, with the plugin loaded as its entry point would."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "costmodel.testing.plugin", "-p", "no:cacheprovider", test_file],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_users_test_file_passes_under_the_plugin(tmp_path):
    for name in ("my_attention.py", "test_my_attention.py"):
        (tmp_path / name).write_text((ROOT / "docs" / "examples" / name).read_text())
    r = _pytest(tmp_path, "test_my_attention.py")
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_the_plugin_fails_a_marked_test_with_the_shrunk_counterexample(tmp_path):
    (tmp_path / "my_attention.py").write_text(SOURCE.replace('"b h t k, h k d -> b t d"', '"b h t k, k d -> b t d"'))
    (tmp_path / "test_mine.py").write_text(
        "from costmodel.testing.plugin import costmodel_check\n\n\n"
        '@costmodel_check("my_attention.py:build", against="my_attention.py:torch_module", examples=3,'
        ' terms=("params.total",))\n'
        "def test_mine():\n"
        "    raise AssertionError('the body runs only after the check passed')\n"
    )
    r = _pytest(tmp_path, "test_mine.py")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "params = numel: FAIL at B=1, L=1, T=1, V=2, d=2, h=2" in r.stdout
    assert "the body runs only" not in r.stdout
