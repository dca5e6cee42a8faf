"""The opened memory's card: the words it was drawn from and the days each version of it held.

A user moves from Denver to Boston: two sessions, the second replacing the first's memory. The card of the
Boston memory must show what she said in that turn, as she said it, and its history with the days each
version held; only her tenant may read those words, and deleting the memory deletes them. ``promem view``
shows the same words offline. ``PROMEM_DOCS_SCREENSHOTS=1`` writes ``docs/serve-page-card.png``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import make_session, scripted_config
from promem_fast.testing.service_processes import Server, new_key, serving
from test_page import browser, shot_path  # noqa: F401 - browser is a fixture

USER = "Maya Chen"
DENVER = "I live in Denver with my sister Ana."
BOSTON = "I live in Boston with my sister Ana now."
SESSIONS = [
    {"session_id": "home-1", "timestamp": "2024-03-02T10:00:00",
     "messages": [{"role": "user", "content": DENVER}, {"role": "assistant", "content": "Denver is lovely."}]},
    {"session_id": "home-2", "timestamp": "2024-06-10T10:00:00",
     "messages": [{"role": "user", "content": BOSTON}, {"role": "assistant", "content": "A big move!"}]},
]


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, Path]]:
    """A server whose tenant ``acme`` holds Maya's two sessions, extracted by the service itself."""
    path = tmp_path_factory.mktemp("card") / "memory.db"
    with serving(path, "acme", USER, SESSIONS) as (server, key):
        yield server, key, path


def test_the_opened_card_shows_what_was_said_and_the_days_each_version_held(
        moved: tuple[Server, str, Path], browser: Any, tmp_path: Path) -> None:  # noqa: F811
    server, key, _ = moved
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server.url}/#key={key}&user={USER.replace(' ', '%20')}")
    page.wait_for_function("document.body.dataset.nodes === '2'")
    assert page.locator("#results li").count() == 1  # the Denver memory is replaced, so hidden
    page.locator("#results li").first.click()
    page.wait_for_function("document.body.dataset.history === '2'")
    assert page.locator("#selected blockquote.said").inner_text() == BOSTON
    assert page.locator("#selected .source").inner_text() == "said in turn 0 of session home-2"
    older, newer = page.locator("#selected ol.history li").all_inner_texts()
    assert older.startswith("valid 2024-03-02 – 2024-06-10 · ") and "Denver" in older and "replaced" in older
    assert newer.startswith("valid since 2024-06-10 · ") and "Boston" in newer and newer.endswith("(this one)")
    page.screenshot(path=str(shot_path(tmp_path, "serve-page-card.png")))
    assert "data-error" not in page.evaluate("Object.keys(document.body.dataset).join(' ')")
    page.close()


def test_only_the_memory_s_own_tenant_reads_the_words_it_came_from(moved: tuple[Server, str, Path]) -> None:
    server, key, path = moved
    with server.client(key) as own:
        graph = own.get(f"/v1/users/{USER}/graph").json()
    assert sorted(n["source"] for n in graph["nodes"]) == [BOSTON, DENVER]
    with server.client(new_key(path, "rival")) as other:
        assert other.get(f"/v1/users/{USER}/graph").status_code == 404
        export = other.get("/v1/export")
        assert export.status_code == 200 and BOSTON not in export.text and "Boston" not in export.text
    with server.client(None) as nobody:
        assert nobody.get(f"/v1/users/{USER}/graph").status_code == 401


def test_deleting_a_memory_deletes_the_words_it_came_from(store_at: str) -> None:
    from promem_fast import Engine
    from promem_fast.store import MemoryStore

    secret = "I keep the spare key under the blue flowerpot by the door."
    kept = "I work at a bakery in Porto."
    session = make_session("keys-1", "Ana", [(secret, "Good to know."), (kept, "Nice.")])
    config = scripted_config()
    with Engine(config) as engine, MemoryStore(store_at, config, embedder=engine.services.embedder,
                                               update_judge="off") as store:
        store.ingest([session], engine)
        before = io.StringIO()
        store.export(before)
        assert secret in before.getvalue() and kept in before.getvalue()  # exported with the memory
        (flowerpot,) = [h for h in store.hits("Ana") if "flowerpot" in h.text]
        assert store.delete(user="Ana", node=flowerpot.node_id) == 1
        after = io.StringIO()
        store.export(after)
    assert secret not in after.getvalue() and kept in after.getvalue()
    if not store_at.startswith("postgresql"):
        on_disk = b"".join(p.read_bytes() for p in Path(store_at).parent.glob("memory.db*") if p.is_file())
        assert secret.encode() not in on_disk and kept.encode() in on_disk


def test_promem_view_shows_the_words_offline(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from promem_fast import Engine
    from promem_fast.serve.offline_page import write_page

    with Engine(scripted_config()) as engine:
        (graph,) = engine.extract([make_session("home-3", USER, [(BOSTON, "A big move!")])])
    write_page(graph, tmp_path / "view.html")
    page = browser.new_page()
    page.goto((tmp_path / "view.html").as_uri())
    page.wait_for_function("Number(document.body.dataset.nodes) > 0")
    page.locator("#results li").first.click()
    assert page.locator("#selected blockquote.said").inner_text() == BOSTON
    assert page.locator("#selected .source").inner_text() == "said in turn 0 of session home-3"
    page.close()
