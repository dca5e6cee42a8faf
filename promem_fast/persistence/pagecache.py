"""A store file read once into the operating system's page cache, in the background.

A search of a large user reads a few hundred rows at scattered places in the file: the scope of each side's
candidates, the text and vectors the fusion reaches, the full-text postings of the question's words. With
the file in the page cache each read is a copy from memory; with a file not read since the machine started
(a service just restarted, a store copied in) each is a read from disk, and at a million memories a
question's first search took several times its usual time (``benchmarks/runs/bench_hybrid.py``, the cold
start). So when a large user's index is first loaded, which reads that user's vectors anyway, the file and
its write-ahead log are read once, sequentially, on a daemon thread, while searches go on. Measured at a
million memories: the median search while the file is read is about half that of a file left cold, and
every search after it is as fast as on a warm file; the slowest searches while it reads are no faster,
sometimes slower (they queue behind it on the disk). SQLite's own ``mmap_size`` was measured too and changed
nothing once the pages were cached.

A file larger than half the memory the system reports free is left alone: reading it would only push out
pages that other work needs. The bytes read are discarded; an encrypted store's pages stay encrypted in the
cache as on disk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 256 << 10
"""Bytes per read: small, so that a search's own reads queue behind less of it."""


def free_memory() -> int | None:
    """Bytes of physical memory the system reports free (None where it does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def warm(path: Path) -> threading.Thread | None:
    """Start reading ``path`` and its ``-wal`` file on a daemon thread; the thread, or None when the files do
    not fit the memory bound (or the system does not say how much is free)."""
    files = [p for p in (path, Path(f"{path}-wal")) if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    free = free_memory()
    if free is None or size > free // 2:
        log.debug("%s: %d bytes not read ahead (free memory: %s)", path, size, free)
        return None
    thread = threading.Thread(target=_read, args=(files,), name="promem-pagecache", daemon=True)
    thread.start()
    return thread


def _read(files: list[Path]) -> None:
    started, total = time.perf_counter(), 0
    buffer = bytearray(CHUNK)
    for path in files:
        try:
            with path.open("rb", buffering=0) as handle:
                while got := handle.readinto(buffer):
                    total += got
        except OSError as exc:  # removed or moved meanwhile: the cache is an optimisation only
            log.debug("%s: read ahead stopped (%s)", path, exc)
    log.debug("read %d bytes of %s ahead in %.1f s", total, files[0], time.perf_counter() - started)
