"""Which memories a session replaces or repeats does not depend on the order sessions arrive in: a user's
sessions added in one call, or in two halves, each reversed, give the same supersede and merge links and
store every memory with the same vector.

The order the sessions are judged in is canonical already (:mod:`promem_fast.store.ordering`); what these
tests hold is that nothing else follows arrival: not a memory's vector (a sentence model pads a batch to its
longest text, so the vector of a memory embedded beside other sessions differs in its last bits), and not
the candidates a new memory is compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import halumem_sessions, tomas_sessions
from promem_fast.config import EmbedderConfig, EngineConfig
from promem_fast.engine import Engine
from promem_fast.store import MemoryStore
from promem_fast.testing.embed_padded import PaddingEmbedder
from promem_fast.types import MemoryGraph, Session
from store_helpers import graph

Named = tuple[str, str]
"""A memory named by its session id and text (node ids differ between stores)."""
Memory = tuple[dict[str, set[tuple[Named, Named]]], dict[Named, bytes]]
"""A store's links by kind (``update``: old → new, ``duplicate``: repeat → kept) and its vectors."""


def extracted(sessions: list[Session]) -> list[MemoryGraph]:
    with Engine(EngineConfig.profile("scripted")) as engine:
        return list(engine.extract_stream(sessions))


def stored(path: Path, parts: list[list[MemoryGraph]], embedder: Any) -> Memory:
    """The links (by kind) and the stored vectors of a store of one user, after ``parts`` (one ``add`` call
    each) were added to it."""
    config = EngineConfig.profile("scripted")
    with MemoryStore(path, config, embedder=embedder) as store, Engine(config) as engine:
        for part in parts:
            store.add(part, engine=engine)
        (user,) = store.users()
        hits = store.hits(user, history=True)
        vectors = {(sid, text): blob for sid, text, blob in store.db.execute(
            "SELECT s.session_id, n.text, n.vector FROM nodes n JOIN sessions s ON s.id = n.session_pk")}
    name = {h.node_id: (h.session_id, h.text) for h in hits}
    links = {"update": {(name[h.node_id], name[h.superseded_by]) for h in hits if h.superseded_by is not None},
             "duplicate": {(name[h.node_id], name[h.merged_into]) for h in hits if h.merged_into is not None}}
    return links, vectors


def assert_same(got: Memory, want: Memory) -> None:
    """The same links and the same vectors, byte for byte, for the same memories."""
    (links, vectors), (want_links, want_vectors) = got, want
    assert set(vectors) == set(want_vectors)
    differ = sorted(key for key in vectors if vectors[key] != want_vectors[key])
    assert differ == [], f"{len(differ)} of {len(vectors)} vectors differ, first {differ[:3]}"
    assert links == want_links


def arrival_orders(graphs: list[MemoryGraph], tmp_path: Path, embedder: Any) -> dict[str, set[tuple[Named, Named]]]:
    """In time order in one call, against the later half then the earlier, each reversed: the same memory
    (returns its links)."""
    half = len(graphs) // 2
    one = stored(tmp_path / "one.db", [graphs], embedder)
    assert len(one[1]) == sum(len(g.nodes) for g in graphs)  # no two memories share a name
    assert_same(stored(tmp_path / "halves.db", [graphs[half:][::-1], graphs[:half][::-1]], embedder), one)
    return one[0]


def test_an_embedder_that_pads_its_batches_gives_the_same_memory_in_either_order(tmp_path: Path) -> None:
    links = arrival_orders(extracted(tomas_sessions()), tmp_path, PaddingEmbedder())
    # the sessions replace facts: Tomas changes job and home (tests/fixtures/halumem_tomas.jsonl)
    assert len(links["update"]) >= 2


class Placed:
    """An embedder that gives each text the vector a test placed it at (every text it is asked for is placed)."""

    def __init__(self, placed: dict[str, np.ndarray]) -> None:
        self.placed, self.dim = placed, len(next(iter(placed.values())))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.placed[t] for t in texts], np.float32)

    embed_queries = embed


def test_a_large_users_candidates_do_not_depend_on_which_memory_arrived_first(tmp_path: Path) -> None:
    """A user searched through the grouped approximate index (:mod:`promem_fast.persistence.ann`), whose groups
    follow arrival: the nurse memory joins the group of the night-shift memory when that one is indexed
    first, and the leaders of 70 other memories lie nearer the surgeon memory than that group's leader.
    Judged against the nurse memory, the surgeon memory replaces it, whichever of the two arrived first.

    Cosines with the surgeon memory (``e0``): nurse 0.8 (above the store's floor, set to 0.7), night shifts
    0.50, the other memories 0.6 to 0.67 (below the floor); nurse and night shifts 0.92 (one group)."""
    dim, others = 128, 70
    axis = np.eye(dim, dtype=np.float32)
    surgeon, nurse = "Maya works as a surgeon at Mercy hospital.", "Maya works as a nurse at Mercy hospital."
    shifts = "Maya works night shifts at Mercy hospital."
    turn = np.radians(np.degrees(np.arccos(0.8)) + np.degrees(np.arccos(0.92)))
    placed = {surgeon: axis[0], nurse: 0.8 * axis[0] + 0.6 * axis[1],
              shifts: np.cos(turn) * axis[0] + np.sin(turn) * axis[1]}
    near = [0.6 + i / 1000 for i in range(others)]  # apart, so no tie widens a search to every vector
    placed.update({f"Maya keeps a plant called number {i}.": c * axis[0] + np.sqrt(1 - c * c) * axis[2 + i]
                   for i, c in enumerate(near)})
    plants = graph("s0", "Maya", [t for t in placed if "plant" in t], timestamp="2024-01-01T09:00:00")
    early = [plants, graph("s1", "Maya", [shifts], timestamp="2024-02-01T09:00:00")]
    late = [graph("s2", "Maya", [nurse], timestamp="2024-03-01T09:00:00"),
            graph("s3", "Maya", [surgeon], timestamp="2024-04-01T09:00:00")]
    config = EngineConfig.profile("scripted")
    config.search_approximate_min = 1
    replaced = []
    for name, parts in {"early first": [early, late], "late first": [late, early]}.items():
        with MemoryStore(tmp_path / f"{name}.db", config, embedder=Placed(placed), update_min_cosine=0.7) as store:
            for part in parts:
                store.add(part)
            assert store.db.index(1).approximate
            hits = store.hits("Maya", history=True)
        text = {h.node_id: h.text for h in hits}
        replaced.append({(h.text, text[h.superseded_by]) for h in hits if h.superseded_by is not None})
    assert replaced == [{(shifts, nurse), (nurse, surgeon)}] * 2


def minilm() -> Any:
    from promem_fast.backends import create

    return create("embedder", "sentence-transformers", EmbedderConfig(device="cpu"))


@pytest.mark.slow
def test_minilm_gives_the_halumem_user_the_same_memory_in_either_order(tmp_path: Path) -> None:
    links = arrival_orders(extracted(halumem_sessions()), tmp_path, minilm())
    assert len(links["update"]) >= 20


@pytest.mark.slow
def test_two_concurrent_writers_of_the_halves_give_the_memory_of_one(tmp_path: Path) -> None:
    """Two writers (each its own store connection and MiniLM) add the two halves of the HaluMem user at
    once, each in one call: the links and vectors of the sessions added by one writer in time order."""
    graphs = extracted(halumem_sessions())
    half = len(graphs) // 2
    one = stored(tmp_path / "one.db", [graphs], minilm())
    config = EngineConfig.profile("scripted")

    def write(part: list[MemoryGraph], embedder: Any) -> None:
        with MemoryStore(tmp_path / "two.db", config, embedder=embedder) as store, Engine(config) as engine:
            store.add(part, engine=engine)

    MemoryStore(tmp_path / "two.db", config, embedder=minilm()).close()  # created once, before both open it
    writers = [threading.Thread(target=write, args=(part, minilm())) for part in (graphs[half:], graphs[:half])]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=600)
    assert not any(writer.is_alive() for writer in writers)
    assert_same(stored(tmp_path / "two.db", [], minilm()), one)


class Killed(Exception):
    """A second writer stopping for good (kill -9) between two of its writes."""


def test_an_earlier_session_judged_by_another_writer_meanwhile_is_not_missed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer A has found what its session replaces; before A writes, writer B stores and judges an earlier
    session of the same user (then stops). A's session must still replace what the earlier one said, as it
    does when one writer stores both."""
    from promem_fast.store import ordering
    from test_store_postgres import AxesEmbedder

    early = graph("j1", "Maya", ["Maya works as a nurse in Boston."], timestamp="2024-01-10T09:00:00")
    late = graph("j2", "Maya", ["Maya works as a teacher in Denver."], timestamp="2024-06-10T09:00:00")
    path, config = tmp_path / "m.db", EngineConfig.profile("scripted")
    write, writes = ordering._write, []

    def racing(store: Any, user_pk: int, session_pk: int, outcome: Any, against: tuple[int, int]) -> bool:
        writes.append(session_pk)
        if len(writes) == 1:  # A, about to write: B stores the earlier session now
            with pytest.raises(Killed), MemoryStore(path, config, embedder=AxesEmbedder()) as other:
                other.add([early])
        elif len(writes) == 3:  # B has judged the earlier session and stops before judging A's
            raise Killed
        return write(store, user_pk, session_pk, outcome, against)

    monkeypatch.setattr(ordering, "_write", racing)
    with MemoryStore(path, config, embedder=AxesEmbedder()) as store:
        store.add([late])
        replaced = {h.text: h.superseded_by is not None for h in store.hits("Maya", history=True)}
    assert len(writes) >= 3  # the race above happened
    assert replaced == {"Maya works as a nurse in Boston.": True, "Maya works as a teacher in Denver.": False}
