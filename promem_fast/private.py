"""Files only their owner can read: memory text, keys, exports, graphs, rejected input lines and evaluation
results are created 0600 (folders 0700).

The mode is set explicitly after creation (``fchmod``), so a permissive umask (0, 002) cannot widen it; files
that already exist with a wider mode are narrowed when this process owns them. Folders are made private only
when this process creates them: a folder the user already had is theirs to set.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700


def narrow(path: str | Path, mode: int = FILE_MODE) -> None:
    """Take group and other permissions off an existing file or folder of ours (no-op when it is missing or
    belongs to someone else, whose file we may not chmod)."""
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return
    if current.st_mode & 0o777 & ~mode and current.st_uid == os.geteuid():
        os.chmod(path, current.st_mode & 0o777 & mode)


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (one level) as a 0700 folder, or narrow the existing one."""
    folder = Path(path)
    folder.mkdir(mode=DIR_MODE, exist_ok=True)
    narrow(folder, DIR_MODE)
    return folder


def private_dirs(path: str | Path) -> Path:
    """``mkdir -p`` where every folder created is 0700; folders that exist already are left as they are."""
    folder = Path(path)
    if folder.is_dir():
        return folder
    if folder.parent != folder:
        private_dirs(folder.parent)
    try:
        folder.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if folder.is_dir():  # made meanwhile by another process, which owns its mode
            return folder
        raise
    os.chmod(folder, DIR_MODE)  # mkdir's mode is masked by the umask, which could also take the owner's bits
    return folder


def touch_private(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist; narrow it if it does.

    An existing file is never opened: closing any descriptor of a file drops every POSIX lock this process
    holds on it, and SQLite's locks on a live store are POSIX locks. A server that opened one more
    connection through here would lose the locks of its others, and a second process closing the store
    would then take it for the last user and delete the WAL the server still writes to."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        narrow(path)
        return
    try:
        os.fchmod(fd, FILE_MODE)  # open's mode is masked by the umask, which could also take the owner's bits
    finally:
        os.close(fd)


def open_private(path: str | Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for writing, the file created (or truncated) with mode 0600 whatever the umask."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        if os.fstat(fd).st_uid == os.geteuid():  # an existing file (a resumed output) is narrowed too
            os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def write_private(path: str | Path, data: str | bytes, **kwargs: Any) -> None:
    """``Path.write_text`` / ``write_bytes`` through :func:`open_private` (text is UTF-8 unless told)."""
    if isinstance(data, bytes):
        with open_private(path, "wb") as handle:
            handle.write(data)
    else:
        with open_private(path, "w", **{"encoding": "utf-8", **kwargs}) as handle:
            handle.write(data)


def replace_private(path: str | Path, data: bytes, *, fsync: bool = False) -> int:
    """Write ``data`` to ``PATH.tmp`` (0600), then move it over ``path``: a reader sees the old file or the new
    one, never half of one, and the new one keeps the tmp file's mode. Returns the bytes written."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open_private(tmp, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):  # the error to report is the write's, not the clean-up's
            tmp.unlink(missing_ok=True)
        raise
    return len(data)


def shred(path: str | Path) -> None:
    """Overwrite a file with zeros, then remove it: its bytes are not left in the free blocks of a plain
    file system (copy-on-write file systems and SSD firmware may still keep old blocks; see the README)."""
    try:
        with open(path, "r+b") as handle:
            size = os.fstat(handle.fileno()).st_size
            step = 1 << 20
            for start in range(0, size, step):
                handle.write(b"\0" * min(step, size - start))
            handle.flush()
            os.fsync(handle.fileno())
    except FileNotFoundError:
        return
    except OSError as exc:
        log.info("%s not overwritten before removal: %s", path, exc)
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as exc:  # e.g. a read-only medium: the caller's data is gone from the store regardless
        log.warning("%s could not be removed: %s", path, exc)


def data_home() -> Path:
    """Where promem keeps a user's data when no path is given: ``$XDG_DATA_HOME/promem`` when set, else the
    platform's per-user data folder (``~/.local/share/promem``, ``~/Library/Application Support/promem``,
    ``%LOCALAPPDATA%\\promem``); created 0700."""
    import sys

    base = os.environ.get("XDG_DATA_HOME")
    if not base:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        elif sys.platform == "darwin":
            base = str(Path.home() / "Library" / "Application Support")
        else:
            base = str(Path.home() / ".local" / "share")
    folder = private_dirs(base) / "promem"
    private_dir(folder)
    return folder
