"""The service's tools: ``promem keys``, ``promem view`` (offline page) and ``promem mcp`` (stdio, official SDK)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, tomas_sessions
from test_serve import MEMORY_FIELDS, chromium, needs_chromium
from promem_fast.cli import main

SCRIPTED = ["--profile", "scripted", "--no-progress"]


def test_keys_are_created_listed_revoked_and_stored_only_as_digests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast.serve import db
    from promem_fast.serve.keys import KeyRing

    path = tmp_path / "memory.db"
    assert main(["keys", "create", "--db", str(path), "--tenant", "acme", "--name", "crm"]) == 0
    key = capsys.readouterr().out.strip()
    assert re.fullmatch(r"pmk_[0-9a-f]{12}_[A-Za-z0-9_-]{40,}", key)
    secret = key.split("_", 2)[2]
    for file in tmp_path.iterdir():  # the database and its WAL
        assert secret.encode() not in file.read_bytes()
    ring = KeyRing(db.connect(path))
    assert ring.check(key).tenant == "acme"
    assert ring.check(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert main(["keys", "list", "--db", str(path)]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(k["tenant"], k["name"], k["revoked"]) for k in listed] == [("acme", "crm", None)]
    assert secret not in json.dumps(listed)
    assert main(["keys", "revoke", "--db", str(path), listed[0]["id"]]) == 0
    assert ring.check(key) is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", listed[0]["created"])  # ISO 8601, not Unix
    assert main(["keys", "list", "--db", str(path)]) == 0
    (revoked,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert revoked["revoked"] >= revoked["created"] and revoked["revoked"].endswith("+00:00")
    assert main(["keys", "revoke", "--db", str(path), listed[0]["id"]]) == 2
    assert "no live key" in capsys.readouterr().err
    assert main(["keys", "create", "--db", str(path), "--tenant", "bad tenant!"]) == 2


def write_view(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """Two sessions extracted and the second one's graph written as a page: (its record, the page)."""
    sessions = tmp_path / "in.jsonl"
    sessions.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in tomas_sessions(2)), encoding="utf-8")
    graphs = tmp_path / "graphs.jsonl"
    assert main(["extract", str(sessions), "-o", str(graphs), *SCRIPTED]) == 0
    chosen = json.loads(graphs.read_text(encoding="utf-8").splitlines()[1])
    page = tmp_path / "graph.html"
    assert main(["view", str(graphs), "--session", chosen["session_id"], "-o", str(page)]) == 0
    return chosen, page


def test_view_writes_one_self_contained_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chosen, page = write_view(tmp_path)
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing is fetched: no CDN
    assert "cytoscape" in html and chosen["nodes"][0]["text"] in html
    assert main(["view", str(tmp_path / "graphs.jsonl"), "--session", "nope", "-o", str(page)]) == 2
    assert "no session 'nope'" in capsys.readouterr().err


@needs_chromium
def test_the_written_page_draws_every_node_in_chromium(tmp_path: Path) -> None:
    """The file opens from disk and draws every node with its anchored details (skipped, and said so, where
    Chromium is missing)."""
    chosen, page = write_view(tmp_path)
    word = max(re.findall(r"[A-Za-z]+", chosen["nodes"][0]["text"]), key=len)
    dom = chromium(page.as_uri() + f"#q={word}", "--dump-dom")
    assert f'data-nodes="{len(chosen["nodes"])}"' in dom and f'data-edges="{len(chosen["edges"])}"' in dom
    assert 'data-results="0"' not in dom and re.search(r"<li[ >]", dom)


def tool_result(result: Any) -> Any:
    """A tool's structured reply (lists come wrapped as ``{"result": [...]}``)."""
    assert not result.is_error, result.content
    value = result.structured_content
    return value["result"] if set(value) == {"result"} else value


def test_mcp_tools_over_stdio_speak_the_http_shapes(tmp_path: Path) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                   args=["-m", "promem_fast.cli", "mcp", "--db", str(tmp_path / "m.db"),
                                         "--tenant", "acme", *SCRIPTED])
    session = tomas_sessions(1)[0]
    user = session.user

    async def talk() -> None:
        with anyio.fail_after(180):
            await converse()

    async def converse() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"add", "search", "get", "update", "answer", "list", "history", "delete"}
            added = tool_result(await client.call_tool("add", {"user_id": user, "messages": [session.to_dict()],
                                                               "metadata": {"source": "chat"}}))
            assert (added["state"], added["done"]) == ("finished", 1)
            hits = tool_result(await client.call_tool("search", {"user_id": user, "query": "promotion", "top_k": 3,
                                                                 "filters": {"source": "chat"}}))["results"]
            assert 0 < len(hits) <= 3 and all(h["user_id"] == user for h in hits)
            assert hits[0]["metadata"] == {"source": "chat"}
            assert not tool_result(await client.call_tool("search", {"user_id": user, "query": "promotion",
                                                                     "filters": {"source": "mail"}}))["results"]
            one = tool_result(await client.call_tool("get", {"user_id": user, "memory_id": hits[-1]["id"]}))
            assert one["memory"] == hits[-1]["memory"]
            edited = tool_result(await client.call_tool("update", {"user_id": user, "memory_id": hits[-1]["id"],
                                                                   "data": "Tomas plays the oboe."}))
            assert (edited["id"], edited["memory"]) == (hits[-1]["id"], "Tomas plays the oboe.")
            assert set(hits[0]) == MEMORY_FIELDS  # the HTTP API's shape: one id, the text once
            answer = tool_result(await client.call_tool("answer", {"user_id": user, "question": "What changed?"}))
            assert set(answer) == {"question", "answer", "abstained", "as_of", "error", "memories"}  # no gold
            listed = tool_result(await client.call_tool("list", {"user_id": user}))
            assert {h["id"] for h in hits} <= {m["id"] for m in listed}
            chain = tool_result(await client.call_tool("history", {"user_id": user, "memory_id": hits[0]["id"]}))
            assert (chain["id"], [m["id"] for m in chain["nodes"]]) == (hits[0]["id"], [hits[0]["id"]])
            gone = tool_result(await client.call_tool("delete", {"user_id": user, "memory_id": hits[0]["id"]}))
            assert gone == {"deleted": 1}
            after = tool_result(await client.call_tool("list", {"user_id": user}))
            assert len(after) == len(listed) - 1 and hits[0]["id"] not in {m["id"] for m in after}
            again = await client.call_tool("history", {"user_id": user, "memory_id": hits[0]["id"]})
            assert again.is_error and "no such memory" in str(again.content)
            chat = [{"role": "user", "content": "I keep two goats on my balcony in Bergen."},
                    {"role": "assistant", "content": "Goats on a balcony!"}]
            said = tool_result(await client.call_tool("add", {"user_id": "Goatherd", "messages": chat,
                                                              "date": "2025-05-04"}))
            assert (said["state"], said["done"], said["user_id"]) == ("finished", 1, "Goatherd")
            goats = tool_result(await client.call_tool("list", {"user_id": "Goatherd"}))
            assert goats and all(m["valid_from"].startswith("2025-05-04") for m in goats)
            assert any("goats" in m["memory"] for m in goats)
            hens = [{"role": "user", "content": "I keep six hens in my garden in Bergen."}]
            tool_result(await client.call_tool("add", {"user_id": "Goatherd", "messages": hens,
                                                       "metadata": {"agent_id": "poultry-bot"}}))
            poultry = {"agent_id": "poultry-bot"}
            listed_hens = tool_result(await client.call_tool("list", {"user_id": "Goatherd", "filters": poultry}))
            assert listed_hens and all("hens" in m["memory"] for m in listed_hens)
            assert len(tool_result(await client.call_tool("list", {"user_id": "Goatherd", "top_k": 1}))) == 1
            hens_only = tool_result(await client.call_tool("answer", {"user_id": "Goatherd", "filters": poultry,
                                                                      "question": "What animals are kept in Bergen?"}))
            assert hens_only["memories"] and all("hens" in m["memory"] for m in hens_only["memories"])
            cut = tool_result(await client.call_tool("delete", {"user_id": "Goatherd", "filters": poultry}))
            assert cut == {"deleted": len(listed_hens)}
            assert tool_result(await client.call_tool("list", {"user_id": "Goatherd"})) == goats  # the goats stay
            fair = [{"role": "user", "content": "I sell cheese at the Bergen fair this weekend."}]
            tool_result(await client.call_tool("add", {"user_id": "Goatherd", "messages": fair, "date": "2020-06-05",
                                                       "expiration_date": "2020-06-07"}))
            assert tool_result(await client.call_tool("list", {"user_id": "Goatherd"})) == goats  # the fair is over
            shown = tool_result(await client.call_tool("list", {"user_id": "Goatherd", "show_expired": True}))
            assert [m for m in shown if m not in goats] and all("cheese" in m["memory"] for m in shown
                                                                if m not in goats)
            wrong = await client.call_tool("list", {"user_id": "Goatherd", "filters": {"a b": 1}})
            assert wrong.is_error and "plain name" in str(wrong.content)
            missing = await client.call_tool("search", {"user_id": "Nobody", "query": "x"})
            assert missing.is_error and "no memory for user 'Nobody'" in str(missing.content)

    anyio.run(talk)

    from promem_fast.store import MemoryStore

    with MemoryStore(tmp_path / "m.db") as store:  # written under the tenant given on the command line
        assert store.users(tenant="acme") == [user, "Goatherd"] and store.users(tenant="default") == []


def test_serve_names_a_store_it_cannot_open_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--db", str(tmp_path / "missing" / "memory.db"), *SCRIPTED]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing" in err and "does not exist" in err


def test_mcp_help_names_every_tool_the_server_offers() -> None:
    from promem_fast.serve.mcp_tools import TOOLS

    done = subprocess.run([sys.executable, "-m", "promem_fast.cli", "mcp", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    text = " ".join(done.stdout.split())
    assert "add, search, get, update, answer, list, history, delete" in text
    assert set(TOOLS) == {"add", "search", "get", "update", "answer", "list", "history", "delete"}


def test_the_readme_s_command_list_names_every_mcp_tool() -> None:
    from promem_fast.serve.mcp_tools import TOOLS

    (line,) = [x for x in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if x.startswith("promem mcp ")]
    assert line.split("MCP server (stdio):", 1)[1].strip() == ", ".join(TOOLS)
