"""A real PostgreSQL with pgvector for the tests and benchmarks: the server ``PROMEM_TEST_PG_URL`` names, else one started
from the ``pgserver`` wheel (PostgreSQL 16 with pgvector, in a temporary folder, stopped at the end).

Each test gets a database of its own (:func:`fresh_database`), so tests never see each other's rows.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PG_URL_ENV = "PROMEM_TEST_PG_URL"


class Server:
    """One PostgreSQL server: the URL of its maintenance database, and new databases on it."""

    def __init__(self) -> None:
        self._handle: Any = None
        given = os.environ.get(PG_URL_ENV)
        if given:
            self.url = given
        else:
            import pgserver

            self._folder = tempfile.mkdtemp(prefix="promem-pg-")
            self._handle = pgserver.get_server(Path(self._folder), cleanup_mode="delete")
            self.url = self._handle.get_uri()

    def database_url(self, name: str) -> str:
        """The server's URL with ``name`` as the database."""
        return re.sub(r"^(postgres(?:ql)?://[^/]*)/[^?]*", rf"\1/{name}", self.url)

    def fresh_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"promem_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def alter_database(self, url: str, setting: str) -> None:
        """``ALTER DATABASE ... SET setting`` for the database at ``url``: connections opened after it get it."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{_name(url)}" SET {setting}')

    def drop(self, url: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{_name(url)}" WITH (FORCE)')

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cleanup()


def _name(url: str) -> str:
    """The database a URL names (its path; a socket folder in the query holds slashes too)."""
    return urlsplit(url).path.lstrip("/")
