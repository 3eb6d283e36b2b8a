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


# -- private folders and their secret: the formula cache (costmodel.formulas) ------------------------------


def private_folder(path: str | Path) -> Path | None:
    """``path`` as a folder only this user can write, created (with each missing parent) as 0700; else None.

    A folder someone else owns, or one group or others may write (a shared ``COSTMODEL_CACHE_DIR``, a cache
    made 0777 under umask 000), is not used: what it holds could have been planted.
    """
    folder = Path(path)
    missing = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        for p in reversed(missing):
            try:
                os.mkdir(p, 0o700)  # the umask can only narrow 0700
            except FileExistsError:
                pass
        info = os.stat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return None
    return folder


SECRET_NAME = "secret"  # 32 random bytes, 0600: the key of the cache entries' HMAC


def folder_secret(folder: Path) -> bytes | None:
    """The per-user secret kept in the private ``folder`` (created once, 0600, never through a link), or None
    when the file there is not this user's own private regular file of 32 bytes."""
    path = folder / SECRET_NAME
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            _create_secret(folder, path)
            continue
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
                return None
            data = os.read(fd, 33)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) == 32 else None
    return None


def _create_secret(folder: Path, path: Path) -> None:
    """Write the secret to a temporary file (0600), then link it into place: a concurrent creator's wins."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".secret.", suffix=".tmp", dir=folder)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32))
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    except OSError:
        pass
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
