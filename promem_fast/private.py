"""Files only their owner can read: memory text, keys and exports are created 0600 (folders 0700).

The mode is set explicitly after creation (``fchmod``), so a permissive umask (0, 002) cannot widen it; files
that already exist with a wider mode are narrowed when this process owns them.
"""

from __future__ import annotations

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


def touch_private(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist; narrow it if it does."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, os.fstat(fd).st_mode & 0o777 & FILE_MODE)
    finally:
        os.close(fd)


def open_private(path: str | Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for writing, the file created (or truncated) with mode 0600 whatever the umask."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


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
