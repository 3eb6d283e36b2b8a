"""Build the sdist and the wheel, install the wheel into a fresh virtual environment with no extras, and run
every command of the README's "Use" section and its Python snippet from a folder outside the checkout.

A command that needs an extra (matplotlib for a chart) must say so in one line and exit 2; anything else must
exit 0. Then the property-testing kit from the same wheel with only its extras (issue 26): with ``[verify]``, the
README's ``costmodel check`` commands that need no torch; with ``[verify,torch]`` (and pytest, which a user's suite
has), every ``costmodel`` command of docs/verify.md and the user's test file docs/examples/test_my_attention.py
through the ``pytest11`` plugin. Run by ``.ci/run``; ``python .ci/readme_from_wheel.py`` runs it by hand.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.docs.readme import blocks, python_snippets, setup_commands, use_commands  # noqa: E402


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def doc_commands(path: Path) -> list[list[str]]:
    """Each ``costmodel ...`` line of a Markdown file's bash blocks, as an argv without ``costmodel``."""
    lines = [line for lang, body in blocks(path.read_text()) if lang == "bash" for line in body.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("costmodel ")]


def with_extras(wheel: str, python: Path, bin_dir: Path, outside: Path, env: dict) -> list[tuple]:
    """The kit from the wheel with only the extras it names; the failures, as main() prints them."""
    failures = []

    def step(label: str, cmd: list[str], timeout: int = 900) -> None:
        r = run(cmd, cwd=outside, env=env, timeout=timeout)
        print(f"  {label[:100]:<100} {'ok' if r.returncode == 0 else 'FAILED'}")
        if r.returncode:
            failures.append(([label], r.returncode, (r.stdout + r.stderr)[-2000:]))

    step("pip install costmodel[verify]", [str(python), "-m", "pip", "install", "-q", f"{wheel}[verify]"])
    for argv in use_commands():
        if argv[0] == "check" and "--against" not in argv:
            step(f"[verify] costmodel {' '.join(argv)}", [str(bin_dir / "costmodel"), *argv])
    step(
        "pip install costmodel[verify,torch] pytest",
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[verify,torch]", "pytest"],
    )
    for argv in doc_commands(ROOT / "docs" / "verify.md"):
        step(f"[verify,torch] costmodel {' '.join(argv)}", [str(bin_dir / "costmodel"), *argv])
    test = "docs/examples/test_my_attention.py"
    step(f"[verify,torch] pytest {test}", [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", test])
    return failures


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="costmodel-wheel-"))
    dist = work / "dist"
    built = run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(dist)], cwd=ROOT
    )
    if built.returncode:
        print(built.stdout[-3000:], built.stderr[-3000:])
        return 1
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    wheel = glob.glob(str(dist / "*.whl"))[0]
    print(f"built {Path(wheel).name} and {Path(glob.glob(str(dist / '*.tar.gz'))[0]).name}")
    venv = work / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    installed = run([str(python), "-m", "pip", "install", "-q", wheel])
    if installed.returncode:
        print(installed.stdout[-3000:], installed.stderr[-3000:])
        return 1
    outside = work / "outside"
    shutil.copytree(ROOT / "docs" / "examples", outside / "docs" / "examples")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": ""}
    failures = []
    first = setup_commands()[0].split("&&", 1)[1].split()  # "costmodel estimate gpt3-175b --tokens 3e11"
    for argv in [first[1:], *use_commands()]:
        r = run([str(bin_dir / "costmodel"), *argv], cwd=outside, env=env, timeout=600)
        needs_extra = r.returncode == 2 and r.stderr.count("\n") == 1 and "pip install 'costmodel[" in r.stderr
        status = "ok" if r.returncode == 0 else "needs an extra (one line, exit 2)" if needs_extra else "FAILED"
        print(f"  costmodel {' '.join(argv)[:80]:<80} {status}")
        if status == "FAILED":
            failures.append((argv, r.returncode, r.stderr[-2000:]))
    for snippet in python_snippets():
        r = run([str(python), "-c", snippet], cwd=outside, env=env, timeout=600)
        print(f"  README Python snippet{'':<63} {'ok' if r.returncode == 0 else 'FAILED'}")
        if r.returncode:
            failures.append((["python snippet"], r.returncode, r.stderr[-2000:]))
    failures += with_extras(wheel, python, bin_dir, outside, env)
    version = run([str(bin_dir / "costmodel"), "--version"], cwd=outside, env=env)
    print(f"  {version.stdout.strip()} from {Path(wheel).name}")
    for argv, code, err in failures:
        print(f"FAILED (exit {code}): costmodel {' '.join(argv)}\n{err}")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
