"""Replay hostile command lines, each in a forked child under a time cap and an address-space cap.

Run as ``python replay_worker.py CASES.json WORKDIR``: imports the CLI once and warms it (one estimate), then
forks once per case; the child limits its address space (RLIMIT_AS) to what the parent holds plus the case's
``mem_mb`` (200 by default) and its run time to ``seconds`` (SIGALRM, not caught), runs ``main(argv)`` with
stdout and stderr in files, and exits with its status. Prints one JSON list: per case its id, exit status (a
negative number is the signal that ended it), stdout, stderr, seconds, and the peak resident growth in MB.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time


def make_files(folder: str, files: dict) -> None:
    """Special and ordinary files of a case: fifo, symlink, dir, sparse (bytes), text, hex."""
    for name, spec in files.items():
        path = os.path.join(folder, name)
        if os.path.lexists(path):
            continue
        if "fifo" in spec:
            os.mkfifo(path)
        elif "symlink" in spec:
            os.symlink(spec["symlink"], path)
        elif "dir" in spec:
            os.makedirs(path)
        elif "sparse" in spec:
            with open(path, "wb") as fh:
                fh.truncate(spec["sparse"])
        elif "hex" in spec:
            with open(path, "wb") as fh:
                fh.write(bytes.fromhex(spec["hex"]))
        else:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(spec["text"])


def vm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def run_case(case: dict, folder: str, main) -> dict:
    case_dir = os.path.join(folder, case["id"])
    os.makedirs(case_dir, exist_ok=True)
    make_files(case_dir, case.get("files", {}))
    argv = [a.replace("{tmp}", case_dir) for a in case["argv"]]
    out_path, err_path = os.path.join(case_dir, ".stdout"), os.path.join(case_dir, ".stderr")
    base_rss = rss_kb()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: caps, then the command
        try:
            cap = vm_bytes() + case.get("mem_mb", 200) * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(case.get("seconds", 20))
            for fd, path in ((1, out_path), (2, err_path)):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            code = main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException as exc:  # whatever escapes main is the finding
            try:
                os.write(2, f"ESCAPED {type(exc).__name__}: {exc}\n".encode())
            except OSError:
                pass
            code = 99
        os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    with open(out_path, encoding="utf-8", errors="replace") as fh:
        out = fh.read()
    with open(err_path, encoding="utf-8", errors="replace") as fh:
        err = fh.read()
    return {
        "id": case["id"],
        "code": code,
        "stdout": out[-200_000:],
        "stderr": err[-4000:],
        "seconds": seconds,
        "growth_mb": max(0, usage.ru_maxrss - base_rss) / 1024,
    }


def main_worker(cases_path: str, folder: str) -> None:
    import contextlib
    import io

    from costmodel.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["estimate", "gpt2-small", "--json", "--hardware", "h100-sxm"])  # imports and warm caches
        main(["roofline", "gpt2-small", "--hardware", "h100-sxm"])
    with open(cases_path, encoding="utf-8") as fh:
        cases = json.load(fh)
    only = set(sys.argv[3:])
    results = [run_case(c, folder, main) for c in cases if not only or c["id"] in only]
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main_worker(sys.argv[1], sys.argv[2])
