"""The web page at 1,000 memories, driven in Debian's headless Chromium through Playwright: filter by session
and days, search with a score cut-off, read a memory in full on hover and on click.

The store is filled with hand-written graphs (50 sessions of 20 memories, one a day from 2025-01-01), so the
counts each filter must show are known beforehand. Set ``PROMEM_DOCS_SCREENSHOTS=1`` to write the screenshots
into ``docs/`` (``serve-page-1000.png``, ``serve-page-1000-search.png``) instead of the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, scripted_config
from promem_fast.testing.service_processes import Server, served
from store_helpers import graph

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
USER = "Maya Chen"
SESSIONS, PER_SESSION = 50, 20
BEAGLE = ("Maya adopted a three-year-old beagle named Biscuit from the Lisbon animal shelter after visiting him "
          "every weekend in March.")
PEOPLE = ["her sister Ana", "her colleague Tom", "her neighbour Ruth", "her friend Kofi", "her manager Priya"]
PLACES = ["Porto", "the climbing gym", "the Alfama flea market", "her office in Baixa", "the Sintra hills"]
THINGS = ["a pottery class", "a road trip", "a Portuguese course", "a book club", "a 10 km race"]


def text(session: int, j: int) -> str:
    """The j-th memory of a session: plain sentences a person says, some long."""
    if (session, j) == (23, 6):
        return BEAGLE
    person, place, thing = PEOPLE[(session + j) % 5], PLACES[(session * 3 + j) % 5], THINGS[(session + 2 * j) % 5]
    kinds = [f"Maya went to {place} with {person}.",
             f"Maya signed up for {thing} that starts next month and meets twice a week after work.",
             f"Maya thinks {person} would enjoy {thing}, and plans to ask about it when they meet at {place}.",
             f"Maya finished reading chapter {j} of the novel {person} lent her."]
    return kinds[j % 4]


@pytest.fixture(scope="module")
def page_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    from promem_fast.store import MemoryStore

    path = tmp_path_factory.mktemp("page") / "memory.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add([graph(f"s-{i:02d}", USER, [text(i, j) for j in range(PER_SESSION)],
                         timestamp=f"2025-{1 + i // 31:02d}-{1 + i % 31:02d}T10:00:00",
                         details=[[f"detail {j} of s-{i:02d}"] if j % 3 == 0 else [] for j in range(PER_SESSION)],
                         edges=[(0, 1, "same_day")])
                   for i in range(SESSIONS)])
    with served(path) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it): the page is not checked")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            yield launched
        finally:
            launched.close()


def shot_path(tmp_path: Path, name: str) -> Path:
    return ROOT / "docs" / name if os.environ.get("PROMEM_DOCS_SCREENSHOTS") else tmp_path / name


def listed(page: Any) -> int:
    return int(page.get_attribute("body", "data-listed"))


def test_a_thousand_memories_filter_search_and_read_in_full(page_server: tuple[Server, str], browser: Any,
                                                           tmp_path: Path) -> None:
    server, key = page_server
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server.url}/#key={key}&user={USER.replace(' ', '%20')}")
    page.wait_for_function("document.body.dataset.nodes === '1000'")
    assert page.text_content("#status") == f"{USER}: 1000 memories"
    assert listed(page) == 1000 and page.locator("#results li").count() == 100  # paged, not 1,000 cards at once
    page.screenshot(path=str(shot_path(tmp_path, "serve-page-1000.png")))

    # the list shows each memory whole (the graph's labels are cut, the list never is)
    assert page.locator("#results li .text", has_text=BEAGLE).count() == 0  # s-23 is not among the newest 100
    page.select_option("#session", "s-23")
    page.wait_for_function("document.body.dataset.drawn === '20'")
    assert listed(page) == 20
    assert page.locator("#results li .text", has_text=BEAGLE).inner_text() == BEAGLE
    folded = page.locator("#results li details").first
    assert not folded.evaluate("d => d.open") and folded.locator("summary").inner_text() == "1 detail"
    page.select_option("#session", "")
    page.fill("#from", "2025-01-10")
    page.fill("#to", "2025-01-19")
    page.wait_for_function("document.body.dataset.listed === '200'")  # 10 days x 20 memories
    assert page.get_attribute("body", "data-drawn") == "200"
    page.fill("#from", "")
    page.fill("#to", "")
    page.wait_for_function("document.body.dataset.listed === '1000'")

    # a search focuses the graph on its hits; the cut-off keeps the close ones
    page.fill("#query", "beagle Biscuit Lisbon animal shelter")
    page.click("#search button[type=submit]")
    page.wait_for_function("Number(document.body.dataset.results) > 0")
    assert page.text_content("#cutoff-value") == "0.30"  # the default floor: a search does not list 100 hits
    page.fill("#cutoff", "0")
    page.wait_for_function("Number(document.body.dataset.listed) === 100")
    everything = listed(page)
    page.fill("#cutoff", "0.5")
    page.wait_for_function(f"Number(document.body.dataset.listed) < {everything}")
    assert page.text_content("#cutoff-value") == "0.50"
    scores = [float(m.split("score ")[1].split(" ")[0]) for m in page.locator("#results li .meta").all_inner_texts()]
    assert scores and min(scores) >= 0.5 and len(scores) == listed(page)
    assert page.locator("#results li .text").first.inner_text() == BEAGLE
    assert page.get_attribute("body", "data-focus") == str(len(scores))  # only the hits stay lit in the graph
    page.screenshot(path=str(shot_path(tmp_path, "serve-page-1000-search.png")))

    # hovering a node shows its whole text; clicking a list item opens it with its details unfolded
    beagle_id = page.locator("#results li").first.get_attribute("data-id")
    where = page.evaluate("""id => { const cy = document.getElementById('graph')._cyreg.cy;
        const p = cy.$id('n' + id).renderedPosition(); const r = document.getElementById('graph').getBoundingClientRect();
        return [r.left + p.x, r.top + p.y]; }""", beagle_id)
    page.mouse.move(*where)
    page.wait_for_selector("#tip:not([hidden])")
    assert page.inner_text("#tip").splitlines()[0] == BEAGLE
    page.locator("#results li").first.click()
    assert page.locator("#selected .text").inner_text() == BEAGLE
    assert page.locator("#selected details").evaluate("d => d.open") is True
    assert page.locator("#selected .source").inner_text() == "said in turn 6 of session s-23"
    assert "data-error" not in page.evaluate("Object.keys(document.body.dataset).join(' ')")
    page.close()


def test_every_surface_returns_10_hits_unless_told(page_server: tuple[Server, str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast.client import Client
    from promem_fast.cli import main

    server, key = page_server
    with Client(server.url, key) as client:
        assert len(client.search("pottery class", user_id=USER)["results"]) == 10
    with server.client(key) as http:
        assert len(http.post(f"/v1/users/{USER}/search", json={"query": "pottery class"}).json()["results"]) == 10
    capsys.readouterr()
    assert main(["search", "pottery class", "--db", str(server.path), "--user-id", USER, "--profile", "scripted",
                 "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 10
