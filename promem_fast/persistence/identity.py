"""The store knows its models: the embedder that filled it (and the profile, when known) is recorded on the
first fill, so a store is searched with the vectors' own embedder.

Opened without an embedder object (``promem search``, :class:`promem_fast.Memory`), the store uses the
recorded embedder whatever the configuration says, so nothing is loaded in vain; opened with one (an
engine's, to add or answer), an embedder other than the recorded one is refused at once, in one line that
names both, before any model is loaded or any vector compared.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from promem_fast.config import EmbedderConfig, EngineConfig

from .api import Database
from .connection import StoreError

log = logging.getLogger(__name__)


def identity(cfg: EmbedderConfig) -> dict[str, Any]:
    """What makes two embedders give the same vectors (not where they run or their batch size)."""
    return {"backend": cfg.backend, "model": cfg.model, "dim": cfg.dim if cfg.backend == "hashing" else None,
            "query_prompt": cfg.query_prompt}


def _name(found: dict[str, Any]) -> str:
    model = found.get("model") or ("default model" if found.get("backend") != "hashing" else None)
    text = found["backend"] + (f" {model}" if model else "")
    dims = found.get("vectors") or found.get("dim")
    return text + (f" ({dims} dims)" if dims else "")


def recorded(db: Database) -> dict[str, Any] | None:
    row = db.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    return None if row is None else dict(json.loads(row[0]))


def adopt(db: Database, path: str, config: EngineConfig, embedder: Any, profile: str | None
          ) -> EngineConfig:
    """The configuration to use with this store: ``config`` with the recorded embedder when none was handed
    over; refuses a handed-over embedder that is not the recorded one."""
    found = recorded(db)
    if found is None:
        return config
    mine = identity(getattr(embedder, "config", None) or config.embedder)
    if all(found.get(k) == v for k, v in mine.items()):
        return config
    if embedder is not None:
        hint = f"--profile {found['profile']}" if found.get("profile") else "that embedder"
        raise StoreError(f"{path}: filled by embedder {_name(found)}; this one is {_name(mine)}: use {hint} "
                         "with this store, or another store")
    fields = {f.name for f in dataclasses.fields(EmbedderConfig)}
    adopted = dataclasses.replace(config.embedder, **{k: v for k, v in found.items() if k in fields and
                                                      (k != "dim" or v is not None)})
    log.info("%s: searching with the embedder that filled it (%s)", path, _name(found))
    return dataclasses.replace(config, embedder=adopted)


def check_dim(db: Database, path: str, dim: int | None, config: EngineConfig, embedder: Any,
              profile: str | None, read_only: bool) -> None:
    """Vectors of one store share a dimension: the first fill records it with the embedder's identity; a
    later one of another dimension is refused, naming the recorded embedder."""
    if dim is None:
        return
    row = db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    if row is not None and int(row[0]) != dim:
        found = recorded(db)
        what = _name(found) if found else f"an embedder of {row[0]} dims"
        raise StoreError(f"{path}: filled by {what}; this embedder gives {dim} dims: open it with the embedder "
                         "that filled it")
    if read_only or (row is not None and recorded(db) is not None):
        return
    mine = {**identity(getattr(embedder, "config", None) or config.embedder), "vectors": dim, "profile": profile}
    db.execute("INSERT INTO meta (key, value) VALUES ('dim', ?) ON CONFLICT DO NOTHING", (str(dim),))
    db.execute("INSERT INTO meta (key, value) VALUES ('embedder', ?) ON CONFLICT DO NOTHING", (json.dumps(mine),))
    if row is None:
        db.dim_recorded(dim)
