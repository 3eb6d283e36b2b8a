"""Files costmodel reads and writes, safely: only regular files, read with a byte cap; writes atomic.

A FIFO, a device, a directory or an oversized file given where a config is expected is refused in one
line before a byte is read (``os.path.getsize`` is 0 for a FIFO and a device: the type is checked first,
then at most ``cap + 1`` bytes are read). A report is written to a temporary file beside its target and
renamed over it, so an interrupted or failed write leaves the old file whole; a symlink is kept (the file it
names is replaced), a hard-linked file is written in place, and a device, FIFO or terminal is written
through, never replaced by a regular file. A new file gets the umask's mode, a replaced one keeps its mode.
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
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename it into place
    (the cases :func:`prepare` names keep the link or the device)."""
    write_all([(path, data, what)])


def write_all(items: list[tuple[str | Path, str | bytes, str]]) -> None:
    """Write every ``(path, data, what)``: each staged in full first, then all put in place; a failure while
    staging any of them (a missing folder, a full disk) changes no file and leaves no temporary."""
    staged: list[Pending] = []
    try:
        for path, data, what in items:
            pending = prepare(path, what)
            staged.append(pending)
            pending.stage(data.encode("utf-8") if isinstance(data, str) else data)
        for pending in staged:
            pending.commit()
    finally:
        for pending in staged:
            pending.discard()


def _umask() -> int:
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


class Pending:
    """One file being written (see :func:`prepare`): ``tmp`` holds its bytes until :meth:`commit`.

    ``how`` is ``"replace"`` (renamed over ``target``: a new or ordinary file, or the file a symlink names —
    the link is kept), ``"inplace"`` (a file with several hard links: copied into it, so every name sees the
    new text) or ``"through"`` (an existing device, FIFO or terminal, ``/dev/null`` as root too: written to,
    never replaced by a regular file; a full device is an error)."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path, self.what = str(path), what
        self.tmp: str | None = None
        try:
            info = os.stat(self.path)  # through links: what the name finally is
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise self._error(exc) from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise CostModelError(f"cannot write {what} to {self.path!r}: it is a directory; expected a file name")
        self.target = os.path.realpath(self.path) if os.path.islink(self.path) else self.path
        if info is not None and not stat.S_ISREG(info.st_mode):
            self.how, self.target = "through", self.path
        elif info is not None and info.st_nlink > 1:
            self.how = "inplace"
        else:
            self.how = "replace"
        self.mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
        folder = os.path.dirname(self.target) or "."
        if self.how != "replace":
            folder = tempfile.gettempdir()  # the bytes wait beside no device
        name = os.path.basename(self.target)
        try:  # a short prefix: a 254-character name stays a legal temporary name
            fd, self.tmp = tempfile.mkstemp(prefix=f".{name[:64]}.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise self._error(exc) from None
        os.close(fd)

    def _error(self, exc: OSError) -> CostModelError:
        return CostModelError(f"cannot write {self.what} to {self.path!r}: {exc.strerror or exc}")

    def stage(self, raw: bytes) -> None:
        try:
            with open(self.tmp, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise self._error(exc) from None

    def commit(self) -> None:
        """Put the staged bytes in place (the temporary is gone after it)."""
        try:
            if self.how == "replace":
                os.chmod(self.tmp, self.mode)  # the old file's mode, or a new file's under the umask
                os.replace(self.tmp, self.target)
                self.tmp = None
                return
            flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | (os.O_TRUNC if self.how == "inplace" else 0)
            fd = os.open(self.target, flags)  # a FIFO without a reader: ENXIO, not a hang
            try:
                os.set_blocking(fd, True)
                with open(self.tmp, "rb") as src:
                    for chunk in iter(lambda: src.read(1 << 20), b""):
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view) :]
                if self.how == "inplace":
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._error(exc) from None

    def discard(self) -> None:
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


def prepare(path: str | Path, what: str = "file") -> Pending:
    """A :class:`Pending` write to ``path``: its temporary is made now (an unwritable folder fails here)."""
    return Pending(path, what)


# -- private folders and their secret: the formula cache (costmodel.formulas.compiled) ------------------------------


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
