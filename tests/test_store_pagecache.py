"""A large user's first search has the store file read into the operating system's page cache, so later
searches of a service just started read memory, not disk. Residency is read from the kernel (``mincore`` on a
mapping of the file), after the file's pages were dropped from the cache (``POSIX_FADV_DONTNEED``)."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from promem_fast.persistence import pagecache, rows
from promem_fast.persistence.opening import open_persistence

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise are Linux's")

DIM = 384
NODES = 4000


def resident_share(path: Path) -> float:
    """The share of the file's pages in the page cache, as the kernel reports it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        flags = (ctypes.c_ubyte * pages)()
        try:
            assert libc.mincore(address, size, flags) == 0, os.strerror(ctypes.get_errno())
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)
    return sum(flag & 1 for flag in flags) / pages


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture()
def large_user(tmp_path: Path) -> Path:
    """A store of one user with ``NODES`` memories whose index is saved beside the file (as a large user's is),
    so reopening reads the vectors from that file, not from the store's pages."""
    path = tmp_path / "store.db"
    db = open_persistence(path)
    db.cache_min_vectors = 100  # type: ignore[attr-defined]
    vectors = np.random.default_rng(0).normal(size=(NODES, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with db.transaction() as tx:
        tx.execute("INSERT INTO meta (key, value) VALUES ('dim', ?)", (str(DIM),))
        user = rows.ensure_user(tx, "t", "u")
    for start in range(0, NODES, 500):
        nodes = [{"id": i, "text": f"memory {start + i} about the harbour, the garden and the train to work",
                  "turn_ids": [], "details": []} for i in range(500)]
        record = {"session_id": f"s{start}", "timestamp": None, "mode": "promem", "nodes": nodes, "edges": [],
                  "details": [], "events": [], "stats": {}}
        with db.transaction() as tx:
            rows.insert_session(tx, user, record, vectors[start:start + 500])
    db.nearest(user, vectors[0], 5)
    db.compact()
    db.close()  # saves the index file
    assert (tmp_path / "store.db.vectors").is_dir()
    return path


def reopened_search(path: Path, read_ahead: bool) -> float:
    """Drop the file from the page cache, reopen the store, search once, wait for any read-ahead: the share
    of the file then cached."""
    evict(path)
    before = resident_share(path)
    if before > 0.2:
        pytest.skip(f"the kernel kept {before:.0%} of the file cached after POSIX_FADV_DONTNEED")
    db = open_persistence(path, read_only=True)
    db.cache_min_vectors = 100  # type: ignore[attr-defined]
    db.read_ahead = read_ahead  # type: ignore[attr-defined]
    try:
        ids, _ = db.nearest(1, np.ones(DIM, np.float32) / np.sqrt(DIM), 5)
        assert len(ids) == 5
        if db.reading_ahead is not None:  # type: ignore[attr-defined]
            db.reading_ahead.join(timeout=30)  # type: ignore[attr-defined]
        return resident_share(path)
    finally:
        db.close()


def test_a_large_users_first_search_reads_the_store_file_into_the_page_cache(large_user: Path) -> None:
    assert reopened_search(large_user, read_ahead=True) > 0.95


def test_without_reading_ahead_a_search_leaves_most_of_the_file_on_disk(large_user: Path) -> None:
    """The comparison that shows the read-ahead, not the search itself, cached the file."""
    assert reopened_search(large_user, read_ahead=False) < 0.5


def test_a_file_larger_than_half_the_free_memory_is_not_read_ahead(large_user: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    size = large_user.stat().st_size
    monkeypatch.setattr(pagecache, "free_memory", lambda: size)  # the file is all the free memory there is
    assert pagecache.warm(large_user) is None
    monkeypatch.setattr(pagecache, "free_memory", lambda: 4 * size)
    thread = pagecache.warm(large_user)
    assert thread is not None
    thread.join(timeout=30)
