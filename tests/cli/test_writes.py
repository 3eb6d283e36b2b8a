"""Writes never damage what they replace (issue 31, items 8-12): a device, a FIFO or a terminal is written
through, never replaced by a regular file; a symlink and a hard link stay linked to the file they name; a
failed multi-output report changes no file; SIGTERM and SIGHUP leave no temporary; a new file gets the umask's
mode and a replaced one keeps its own; a 254-character name is legal; a newline in a path prints one line."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costmodel import files
from costmodel.errors import CostModelError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/dev/full, /dev/null and signals: Linux")


def _run(args: list[str], tmp: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSTMODEL_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "costmodel", *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, **kw
    )


def _temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# The targets are links to the system's devices, or a device made in tmp_path: a regression replaces the link
# or the test's own node, never the machine's /dev/null (as root, the old writer did replace it).


def test_dev_full_is_a_full_disk_not_a_replaced_file(tmp_path):
    link = tmp_path / "full.tex"
    link.symlink_to("/dev/full")
    done = _run(["report", "gpt2-small", "--latex", str(link)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "No space left" in done.stderr, done.stderr
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def test_a_link_to_dev_null_is_written_through(tmp_path):
    link = tmp_path / "page.html"
    link.symlink_to("/dev/null")
    done = _run(["report", "gpt2-small", "--html", str(link)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert _temporaries(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_sweep_onto_a_device_leaves_the_device(tmp_path):
    """As root, ``-o /dev/null`` replaced the machine's /dev/null: here a null device of the test's own."""
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    done = _run(["sweep", "gpt2-small", "--grid", "d=64:1024:64", "--format", "csv", "-o", str(node)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert _temporaries(tmp_path) == []


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(CostModelError, match="cannot write"):
        files.write_atomic(fifo, "{}\n", "the json report")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlinked_output_stays_linked(tmp_path):
    real = tmp_path / "real.tex"
    real.write_text("old\n")
    link = tmp_path / "link.tex"
    link.symlink_to(real)
    files.write_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert _temporaries(tmp_path) == []


def test_a_hard_linked_output_stays_linked(tmp_path):
    a, b = tmp_path / "a.tex", tmp_path / "b.tex"
    a.write_text("old\n")
    os.link(a, b)
    files.write_atomic(b, "new\n")
    assert a.read_text() == b.read_text() == "new\n"
    assert os.stat(a).st_ino == os.stat(b).st_ino
    assert _temporaries(tmp_path) == []


def test_a_failed_multi_output_report_changes_no_file(tmp_path):
    old = tmp_path / "a.tex"
    old.write_text("the old report\n")
    done = _run(["report", "gpt2-small", "--latex", str(old), "--json", str(tmp_path / "nodir" / "b.json")], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert old.read_text() == "the old report\n"
    assert _temporaries(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_no_temporary(tmp_path, signum):
    out = tmp_path / "sweep.csv"
    env = {**os.environ, "COSTMODEL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    args = ["sweep", "gpt2-small", "--grid", "d=64:64000:64", "--grid", "L=1:2000", "--format", "csv", "-o", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "costmodel", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env
    )
    deadline = time.monotonic() + 120
    while not _temporaries(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert _temporaries(tmp_path), "the sweep never started writing"
    time.sleep(0.3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert b"Traceback" not in err, err
    assert _temporaries(tmp_path) == [] and not out.exists()


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_umask_s_mode(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        files.write_atomic(tmp_path / "r.md", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r.md").st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "r.md"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    files.write_atomic(path, "new\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and path.read_text() == "new\n"


def test_a_254_character_name_is_legal(tmp_path):
    path = tmp_path / ("r" * 250 + ".tex")
    files.write_atomic(path, "x\n")
    assert path.read_text() == "x\n"


def test_a_newline_in_a_path_prints_one_wrote_line(tmp_path):
    path = tmp_path / "a\nwrote json report to b.md"
    done = _run(["report", "gpt2-small", "--markdown", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "\\n" in done.stderr, done.stderr
    assert path.exists()
