"""``promem serve``: the on-prem memory service.

One process, one engine, many clients: sessions accepted over HTTP go to a durable queue in the store's SQLite
file (:mod:`.jobs`), a background worker (:mod:`.job_worker`) feeds the engine's window from it so sessions of many
clients share every batch, and every read and write is scoped to the tenant of the caller's API key
(:mod:`.keys`). FastAPI and uvicorn are imported only by :mod:`.app` (the ``serve`` extra).
"""

from __future__ import annotations
