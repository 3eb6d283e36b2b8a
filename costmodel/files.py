"""Files costmodel reads and writes, safely: only regular files, read with a byte cap; writes atomic.

A FIFO, a device, a directory or an oversized file given where a config is expected is refused in one
line before a byte is read (``os.path.getsize`` is 0 for a FIFO and a device: the type is checked first,
then at most ``cap + 1`` bytes are read). A report is written to a temporary file beside its target and
renamed over it, so an interrupted or failed write leaves the old file whole.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import CostModelError


def read_capped(path: str | Path, cap: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (at most ``cap``), or a :class:`CostModelError` saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise CostModelError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a directory"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "not a regular file"
            )
            raise CostModelError(f"cannot read {what} {str(path)!r}: it is {kind}; expected a regular file")
        if info.st_size > cap:
            raise CostModelError(f"{what} {str(path)!r} is {info.st_size:,} bytes; expected a {what} under {cap:,}")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise CostModelError(f"{what} {str(path)!r} is over {cap:,} bytes; expected a {what} under {cap:,}")
        return b"".join(chunks)
    except OSError as exc:
        raise CostModelError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, what: str = "file") -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename it into place."""
    target = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as exc:
        raise CostModelError(f"cannot write {what} to {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise CostModelError(f"cannot write {what} to {str(path)!r}: {exc.strerror or exc}") from None
        raise
