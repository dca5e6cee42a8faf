"""Persistence: where memory is kept (rows, vectors, full text, transactions), below the engine.

One small API (:class:`.api.Persistence`) and two backends: SQLite (:mod:`.sqlite`, the embedded default)
and PostgreSQL with pgvector (:mod:`.postgres`). The row functions (:mod:`.rows`, :mod:`.pending`,
:mod:`.links`, :mod:`.exchange`) run on either; nothing here imports the engine, so the memory layer above
(:mod:`promem_fast.store`: update judging, answering, history) is the only one that does.
"""
