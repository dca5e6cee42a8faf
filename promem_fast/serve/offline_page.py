"""``promem view``: the web page's graph view as one self-contained HTML file, for reading offline.

The same page, script and styles as the service's ``/`` route, with the graph library, the script and the
graph's data inlined, so the file opens from disk with no server and no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from promem_fast.private import write_private
from promem_fast.types import MemoryGraph

STATIC = Path(__file__).resolve().parent / "static"


def graph_view(graph: MemoryGraph) -> dict[str, Any]:
    """The page's data for one extracted session: nodes with their anchored details, and the edges."""
    return {
        "session_id": graph.session_id, "user": graph.user, "timestamp": graph.timestamp,
        "nodes": [{"id": n.id, "text": n.text, "verification": n.verification, "origin": n.origin,
                   "session_id": graph.session_id, "turn_ids": list(n.turn_ids), "source": n.source,
                   "details": [graph.details[i].text for i in n.details]}
                  for n in graph.nodes],
        "edges": [{"source": e.source, "target": e.target, "relation": e.relation} for e in graph.edges],
    }


def _inline_script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def render_page(data: dict[str, Any]) -> str:
    """The page with everything it needs inside it."""
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    # every "<" escaped (JSON reads "\u003c" as "<"): "</script" would end the element early, and "<!--<script"
    # would make the HTML parser read the rest of the page as script, so nothing is drawn
    payload = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    parts = {
        '<link rel="stylesheet" href="static/style.css">':
            "<style>" + (STATIC / "style.css").read_text(encoding="utf-8") + "</style>",
        '<script src="static/cytoscape.min.js"></script>':
            f"<script>window.PROMEM_GRAPH = {payload};</script>"
            + _inline_script((STATIC / "cytoscape.min.js").read_text(encoding="utf-8")),
        '<script src="static/app.js"></script>': _inline_script((STATIC / "app.js").read_text(encoding="utf-8")),
    }
    for tag, inline in parts.items():
        if tag not in page:
            raise RuntimeError(f"the page template lost {tag!r}")
        page = page.replace(tag, inline)
    return page


def write_page(graph: MemoryGraph, path: str | Path) -> Path:
    target = Path(path)
    write_private(target, render_page(graph_view(graph)))  # the page holds the user's memory text
    return target
