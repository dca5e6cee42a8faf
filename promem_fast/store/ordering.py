"""The canonical order of update judging, kept whatever order sessions arrive in, and however they leave.

Rule: each session of a user is judged against that user's memory as it stood after every earlier session
in the canonical order (:func:`.timeline.session_key`: when said, then session id), and only then. So which
memories are current depends on the sessions a user has, never on the window, batching, a kill and resume
point, or whether graphs came through ``extract --db``, ``ingest``, the service or :class:`promem_fast.Memory`.

How: a session is written pending (not shown to readers before its verdicts:
:func:`~promem_fast.persistence.timeline.shown`); the judged sessions of a user are always a prefix of their
canonical order. A session that arrives before judged ones reopens those (their links are removed, they
are judged again; they stay shown, and what they had replaced or absorbed is held back from readers until
then); deleting a session or a memory reopens everything from it on.
:func:`settle` then judges the pending sessions, the first pending one of each user per round (users in one
engine run), each verdict written with its judged mark in one transaction, so a killed run resumes where it
stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from promem_fast.persistence import pending as judging

from .update import Outcome, candidate_pairs, decide, judge_pairs

if TYPE_CHECKING:
    import numpy as np

    from promem_fast.engine import Engine
    from promem_fast.types import MemoryGraph

    from .protocol import StoreView

log = logging.getLogger(__name__)


def write_pending(store: StoreView, tenant: str, graphs: Sequence[MemoryGraph], vectors: Sequence[np.ndarray]
                  ) -> int:
    """Store each graph in its own transaction, pending judgement (:func:`~promem_fast.persistence.pending.
    insert_pending`); returns how many were stored (one another writer stored meanwhile is not)."""
    stored = 0
    for graph, block in zip(graphs, vectors, strict=True):
        with store.db.transaction() as db:
            if store.write_guard is not None and not store.write_guard(db, tenant, graph):
                continue  # cancelled (its user or session was deleted while it was extracted)
            stored += judging.insert_pending(db, tenant, graph, block)
    return stored


def settle(store: StoreView, user_pks: Iterable[int], engine: Engine | None) -> int:
    """Judge the pending sessions of these users in the canonical order; returns the sessions judged.

    The result is that of judging one session at a time, but a round asks in one engine run for the
    verdicts of up to ``store.update_lookahead`` pending sessions of each user: the first against the memory as it
    stands, the next ones against a guess (the sessions before them taken as judged, :data:`WIDER` times
    the neighbours). Then the sessions are written in order, each with the pairs it really has once the ones before it are
    written; a session with a pair the guess missed waits for the next round. A verdict is kept by its
    pair, and the prompt of a pair is the same whenever it is asked, so nothing depends on the guess.
    """
    users = given = sorted(set(user_pks))
    verdicts: dict[tuple[int, int], tuple[str, str]] = {}
    done = 0
    while users:
        batch = [(user_pk, found[:store.update_lookahead]) for user_pk in users
                 if (found := judging.pending(store.db, user_pk))]
        users = [user_pk for user_pk, _ in batch]
        crashed = _ask(store, batch, verdicts, engine) if store.update_judge != "off" else set()
        for user_pk, sessions in batch:
            for position, session_pk in enumerate(sessions):
                against = judging.judged(store.db, user_pk)  # read before the candidates, checked at the write
                outcome = _outcome(store, user_pk, session_pk, verdicts, first=position == 0, crashed=crashed)
                if outcome is _WAIT or not _write(store, user_pk, session_pk, outcome, against):
                    break  # the rest of this user waits for the next round
                done += 1
    for user_pk in given:  # what no verdict released (a delete that reopened nothing after it, a stopped run)
        if judging.unreleased(store.db, user_pk) and not judging.pending(store.db, user_pk):
            with store.db.transaction() as db:
                judging.release(db, user_pk)
    return done


LOOKAHEAD = 8
"""Pending sessions of one user whose verdicts one round asks for at once, with a chat backend that batches
(vLLM, a served model): there a round costs about as much whatever its size. Other backends take one at a
time, since asking ahead costs requests (:func:`lookahead`)."""
WIDER = 2
"""How many times the usual neighbours a guess takes (the sessions before it may take some of them away).

On the HaluMem development user (29 sessions, scripted judge; ``benchmarks/bench_update_order.py``), 8 and
2 took the judge from 28 engine runs to 8 for 2.5 times the requests; 1 time the neighbours saved no run."""

BATCHING = ("vllm", "openai")


def lookahead(backend: str) -> int:
    """The sessions per round for a chat backend (see :data:`LOOKAHEAD`)."""
    return LOOKAHEAD if backend in BATCHING else 1

_WAIT = Outcome()
"""A session whose pairs are not all judged yet."""


def _ask(store: StoreView, batch: list[tuple[int, list[int]]], verdicts: dict[tuple[int, int], tuple[str, str]],
         engine: Engine | None) -> set[int]:
    """Ask for the verdicts of every guessed pair not known yet; returns the sessions whose asking crashed."""
    jobs = []
    for user_pk, sessions in batch:
        name = judging.user_name(store.db, user_pk)
        for position, session_pk in enumerate(sessions):
            guess = candidate_pairs(store, user_pk, session_pk, also=sessions[:position],
                                    wider=WIDER if position else 1)
            todo = [p for p in guess if (p.old, p.new) not in verdicts]
            if todo:
                jobs.append((session_pk, name, todo))
    if not jobs:
        return set()
    crashed = set()
    answers = judge_pairs(store, jobs, engine)
    for session_pk, _, pairs in jobs:
        found = answers[session_pk]
        if found is None:
            crashed.add(session_pk)
        else:
            verdicts.update({(p.old, p.new): v for p, v in zip(pairs, found, strict=True)})
    return crashed


def _outcome(store: StoreView, user_pk: int, session_pk: int, verdicts: dict[tuple[int, int], tuple[str, str]],
             *, first: bool, crashed: set[int]) -> Outcome | None:
    """The session's links from the verdicts of its real pairs; :data:`_WAIT` when one is not known yet;
    ``None`` (no links, logged) when the judge crashed on the first pending session itself."""
    if store.update_judge == "off":
        return None
    pairs = candidate_pairs(store, user_pk, session_pk)
    if all((p.old, p.new) in verdicts for p in pairs):
        return decide(pairs, [verdicts[(p.old, p.new)] for p in pairs])
    if first and session_pk in crashed:
        log.error("update check of session %d failed; its entries replace nothing", session_pk)
        return None
    return _WAIT


def _write(store: StoreView, user_pk: int, session_pk: int, outcome: Outcome | None,
           against: judging.Judged) -> bool:
    """The session's links and its ``judged`` mark in one transaction; False when another writer changed
    the user since the candidates were read against the sessions judged then, ``against`` (the session is
    judged again next round)."""
    with store.db.transaction() as db:
        return judging.write_verdicts(db, user_pk, session_pk, outcome.merges if outcome else (),
                                      outcome.supersedes if outcome else (), against=against)
