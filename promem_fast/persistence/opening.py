"""Opening a store's persistence: the backend a location names (:mod:`.api`), and its schema brought up to date.

Apart from :mod:`.api` because it imports the backends, which import the API's names.
"""

from __future__ import annotations

from pathlib import Path

from .api import Persistence, is_url


def open_persistence(location: str | Path, *, read_only: bool = False, key_file: str | Path | None = None,
                     search_approximate_min: int = 0, index: str = "auto", pg_ef_search: int | None = None
                     ) -> Persistence:
    """The backend for ``location``: a ``postgresql://`` URL, else an SQLite file path; ``pg_ef_search`` is
    pgvector's search width (None: :data:`~.postgres.EF_SEARCH`)."""
    if is_url(location):
        if key_file is not None:
            from .connection import StoreError

            raise StoreError("--key-file encrypts an SQLite file; a PostgreSQL store is protected by the "
                             "server (TLS, disk encryption, roles)")
        from .postgres import EF_SEARCH, PostgresPersistence

        return PostgresPersistence(str(location), read_only=read_only, approximate_min=search_approximate_min,
                                   ef_search=EF_SEARCH if pg_ef_search is None else pg_ef_search)
    from .sqlite import SqlitePersistence

    return SqlitePersistence(Path(location), read_only=read_only, key_file=key_file,
                             approximate_min=search_approximate_min, index=index)  # type: ignore[arg-type]


def migrate(location: str | Path, *, key_file: str | Path | None = None) -> tuple[int, int]:
    """Bring the store's schema up to this version's (all steps in one transaction); returns the versions
    before and after. A store written by a newer version is refused, unchanged."""
    if is_url(location):
        from .postgres import PostgresPersistence
        from .pg_schema import SCHEMA_VERSION as PG_VERSION

        probe = PostgresPersistence.schema_version_at(str(location))
        PostgresPersistence(str(location)).close()
        return probe, PG_VERSION
    from .connection import open_db
    from .schema import SCHEMA_VERSION, connect, user_version

    path = Path(location)
    if path.exists():
        db = open_db(path, read_only=True, key_file=key_file)
        try:
            before = user_version(db)
        finally:
            db.close()
    else:
        before = 0
    connect(path, key_file=key_file).close()
    return before, SCHEMA_VERSION


def check_index_build(location: str | Path, m: int, ef_construction: int) -> None:
    """Refuse HNSW build parameters for an SQLite store or outside pgvector's ranges, in one line each."""
    from .connection import StoreError
    from .pg_schema import check_hnsw_build

    if not is_url(location):
        raise StoreError(f"{location}: HNSW build parameters are pgvector's, for a PostgreSQL store; an SQLite "
                         "store's index is built in process (search_approximate_min, its index kind)")
    check_hnsw_build(m, ef_construction)


def rebuild_index(location: str | Path, m: int, ef_construction: int) -> bool:
    """Build a PostgreSQL store's vector index again with pgvector's build parameters ``m`` and
    ``ef_construction``, which an index made later uses too; returns whether there were vectors to index."""
    check_index_build(location, m, ef_construction)
    from .postgres import PostgresPersistence

    db = PostgresPersistence(str(location))
    try:
        return db.rebuild_index(m, ef_construction)
    finally:
        db.close()
