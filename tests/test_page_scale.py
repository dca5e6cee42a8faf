"""The web page at 10,000 memories in Debian's headless Chromium: 500 sessions with 40-character ids, some
memories replaced. Session labels stay short, the header and the list count the same memories, the default
score floor keeps a search to its close hits (lit in the graph), the opened card shows the memory's turn and
its replacement history, and a first visit says where a key comes from. ``PROMEM_DOCS_SCREENSHOTS=1`` writes
``docs/serve-page-10000.png`` and ``docs/serve-page-10000-search.png``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import scripted_config
from promem_fast.testing.service_processes import Server, served
from store_helpers import graph
from test_page import BEAGLE, USER, browser, listed, shot_path, text  # noqa: F401 - browser is a fixture

SESSIONS, PER_SESSION, REPLACED = 500, 20, 10
OLD_BEAGLE = "Maya is thinking about adopting a beagle from the Lisbon animal shelter."


def session_id(i: int) -> str:
    """40 characters, as real ids are (a uuid and an index): the page must not print them whole in the graph."""
    return f"7f3c9a2e-5b1d-4c8e-9f0a-{i:012d}:{i % 7}"


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    from promem_fast.persistence import rows
    from promem_fast.store import MemoryStore

    path = tmp_path_factory.mktemp("page10k") / "memory.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add([graph(session_id(i), USER,
                         [OLD_BEAGLE if (i, j) == (10, 6) else text(i, j)  # text(23, 6) is BEAGLE
                          for j in range(PER_SESSION)],
                         timestamp=f"{2020 + i // 360}-{1 + i // 30 % 12:02d}-{1 + i % 30:02d}T10:00:00")
                   for i in range(SESSIONS)])
        ids = {h.text: h.node_id for h in store.hits(USER) if h.text in (OLD_BEAGLE, BEAGLE)}
        replaced = [h.node_id for h in store.hits(USER)[100:100 + REPLACED - 1]]
        with store.db.transaction() as db:
            rows.supersede(db, ids[OLD_BEAGLE], ids[BEAGLE], "Maya adopted the beagle she was thinking about")
            for old in replaced:
                rows.supersede(db, old, old + 1, "said again later")
    with served(path) as running:
        yield running


def test_ten_thousand_memories_short_labels_one_count_hits_lit_and_the_history_in_the_card(
        big_server: tuple[Server, str], browser: Any, tmp_path: Path) -> None:  # noqa: F811
    server, key = big_server
    first = browser.new_page()
    first.goto(server.url + "/")
    hint = first.locator("#hint")
    hint.wait_for(state="visible")
    assert "promem keys create --db STORE --tenant NAME" in hint.inner_text()
    first.close()

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server.url}/#key={key}&user={USER.replace(' ', '%20')}")
    page.wait_for_function("document.body.dataset.nodes === '10000'", timeout=120_000)
    current = SESSIONS * PER_SESSION - REPLACED
    assert page.text_content("#status") == f"{USER}: {current} memories ({REPLACED} replaced, hidden)"
    assert page.text_content("#count") == f"{current} of {current} memories (first 100 listed)"
    labels = page.evaluate("""() => document.getElementById('graph')._cyreg.cy
        .nodes("[kind = 'session']").map((n) => n.data('label'))""")
    assert len(labels) == SESSIONS and max(len(x) for x in labels) <= 32
    assert labels[0] == "#1 …00000000:0 · 2020-01-01"
    shown = page.evaluate("""() => document.getElementById('graph')._cyreg.cy
        .nodes("[kind = 'session']")[0].style('text-opacity')""")
    assert shown == "0"  # 500 boxes fit the panel: too narrow on screen for their names, which would overlap
    page.screenshot(path=str(shot_path(tmp_path, "serve-page-10000.png")))

    page.fill("#query", "beagle Biscuit Lisbon animal shelter")
    page.click("#search button[type=submit]")
    page.wait_for_function("Number(document.body.dataset.results) > 0")
    hits = listed(page)
    assert 0 < hits < 100  # the default floor (0.30) keeps the close ones of the 100 asked for
    assert page.get_attribute("body", "data-focus") == str(hits)
    lit = page.evaluate("""() => document.getElementById('graph')._cyreg.cy.nodes('.hit').map((n) => n.id())""")
    assert len(lit) == hits and page.locator("#results li .text").first.inner_text() == BEAGLE
    page.screenshot(path=str(shot_path(tmp_path, "serve-page-10000-search.png")))

    page.locator("#results li").first.click()
    page.wait_for_function("document.body.dataset.history === '2'")
    assert page.locator("#selected .source").inner_text() == f"said in turn 6 of session {session_id(23)}"
    versions = page.locator("#selected ol.history li").all_inner_texts()
    assert versions == [f"valid 2020-01-11 – 2020-01-24 · {OLD_BEAGLE} → replaced: Maya adopted the beagle she was "
                        "thinking about", f"valid since 2020-01-24 · {BEAGLE} (this one)"]
    assert "data-error" not in page.evaluate("Object.keys(document.body.dataset).join(' ')")
    page.close()
