// The memory page: pick a user, filter and search their memories, read each in full, see the graph.
// Online it talks to the /v1 API with the key typed in (kept in sessionStorage, never in a cookie).
// Offline (`promem view`) the graph is embedded as window.PROMEM_GRAPH and search filters it locally.
// Built for users with thousands of memories: the list is paged, the graph groups memories by session
// (labels appear when zoomed in, the full text on hover or click) and a search focuses the graph on its hits.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const offline = window.PROMEM_GRAPH !== undefined;
  const params = new URLSearchParams(location.hash.slice(1));
  const PAGE = 100;          // list items added per "show more"
  const SMALL = 120;         // up to this many memories the graph is laid out by its links, details drawn
  const SEARCH_K = 100;      // hits asked for; the score cut-off then keeps the good ones
  const state = { data: null, byId: new Map(), hits: null, shown: PAGE, selected: null };
  let cy = null;

  function status(text) { $("status").textContent = text; }

  async function api(path, options) {
    const key = sessionStorage.getItem("promem-key") || "";
    const init = Object.assign({ headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json" } },
                               options || {});
    const reply = await fetch(path, init);
    if (!reply.ok) { throw new Error(reply.status + " " + (await reply.text())); }
    return reply.json();
  }

  const day = (text) => (text ? String(text).slice(0, 10) : "");

  // One shape for the store's graph and an extracted session's graph: nodes with their details attached.
  function normalise(raw) {
    const nodes = (raw.nodes || []).map((n) => ({
      id: String(n.id !== undefined ? n.id : n.node_id), text: n.text || n.memory || "",
      date: n.date || n.valid_from || n.timestamp || raw.timestamp || "",
      session: n.session_id || raw.session_id || "",
      superseded: n.superseded_by != null || n.merged_into != null || n.expired === true,  // no longer holds
      turn: n.turn_id !== undefined ? n.turn_id : (n.turn_ids || [])[0], said: n.source || "",
      details: (n.details || []).map((d) => (typeof d === "string" ? d : d.text)).filter((d) => typeof d === "string"),
      links: [],
    }));
    const byId = new Map(nodes.map((n) => [n.id, n]));
    for (const d of raw.details || []) {
      const owner = d.node !== undefined ? d.node : (d.node_id !== undefined ? d.node_id : d.anchor);
      const node = byId.get(String(owner));
      if (node && !node.details.includes(d.text)) { node.details.push(d.text); }
    }
    const edges = (raw.edges || []).filter((e) => byId.has(String(e.source)) && byId.has(String(e.target)))
      .map((e) => ({ source: String(e.source), target: String(e.target), relation: e.relation || "" }));
    for (const e of edges) {
      byId.get(e.source).links.push(e.relation + " → " + byId.get(e.target).text);
      byId.get(e.target).links.push(e.relation + " ← " + byId.get(e.source).text);
    }
    const sessions = new Map();
    for (const n of nodes) {
      const s = sessions.get(n.session) || { id: n.session, day: day(n.date), count: 0 };
      s.count += 1;
      if (day(n.date) && (!s.day || day(n.date) < s.day)) { s.day = day(n.date); }
      sessions.set(n.session, s);
    }
    const order = [...sessions.values()].sort((a, b) => (a.day || "~").localeCompare(b.day || "~") || a.id.localeCompare(b.id));
    return { nodes, edges, byId, sessions: order };
  }

  // ------------------------------------------------------------------------------------------- filters
  function filters() {
    return { session: $("session").value, from: $("from").value, to: $("to").value, old: $("old").checked,
             cutoff: Number($("cutoff").value) };
  }

  function passes(node, f) {
    if (f.session && node.session !== f.session) { return false; }
    if (!f.old && node.superseded) { return false; }
    const d = day(node.date);
    if (f.from && (!d || d < f.from)) { return false; }
    if (f.to && (!d || d > f.to)) { return false; }
    return true;
  }

  // A session id as a label: ids of 40 characters (uuids, "user:index") would overlap in the graph, so a long
  // one keeps its end (where ids differ), the full id stays in the session list's tooltip and the card.
  function short(id) { return id.length <= 14 ? id : "…" + id.slice(-10); }

  function fillSessions(sessions) {
    const select = $("session");
    select.replaceChildren(new Option("all sessions (" + sessions.length + ")", ""),
      ...sessions.map((s, i) => {
        const o = new Option("#" + (i + 1) + " " + short(s.id) + (s.day ? " · " + s.day : "") + " (" + s.count + ")", s.id);
        o.title = s.id;
        return o;
      }));
  }

  // The memories the page counts everywhere (header, list): current ones, and the replaced ones when shown.
  function counted(nodes) { return $("old").checked ? nodes.length : nodes.filter((n) => !n.superseded).length; }

  // ------------------------------------------------------------------------------------------- the list
  // What the list shows: the search hits above the cut-off (in score order), else every memory that passes
  // the filters, newest first.
  function rows() {
    const f = filters();
    if (state.hits) {
      return state.hits.filter((h) => (h.score == null || h.score >= f.cutoff))
        .filter((h) => { const n = state.byId.get(String(h.id)); return !n || passes(n, f); });
    }
    return state.data.nodes.filter((n) => passes(n, f))
      .sort((a, b) => day(b.date).localeCompare(day(a.date)) || Number(b.id) - Number(a.id))
      .map((n) => ({ id: n.id, text: n.text, date: n.date, session: n.session, score: null,
                     details: n.details, links: n.links, superseded: n.superseded }));
  }

  function hitRow(h) {  // a hit of the /v1 search, in the list's shape
    const links = (h.links || []).map((l) => l.relation + " " + (l.direction === "in" ? "←" : "→") + " " + l.memory);
    return { id: String(h.id), text: h.memory, date: h.valid_from || "", session: (h.session_ids || [""])[0],
             score: h.score, details: h.details || [], links, superseded: h.superseded_by != null };
  }

  function folded(item) {
    const parts = [];
    if (item.details.length) { parts.push(item.details.length + " detail" + (item.details.length > 1 ? "s" : "")); }
    if (item.links.length) { parts.push(item.links.length + " link" + (item.links.length > 1 ? "s" : "")); }
    if (!parts.length) { return null; }
    const box = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = parts.join(" · ");
    box.append(summary);
    for (const [cls, texts] of [["detail", item.details], ["link", item.links]]) {
      for (const t of texts) { const p = document.createElement("div"); p.className = cls; p.textContent = t; box.append(p); }
    }
    return box;
  }

  function card(item, tag) {
    const el = document.createElement(tag);
    el.dataset.id = item.id;
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = item.text;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = [day(item.date) || "no date", "session " + item.session,
                        item.score != null ? "score " + Number(item.score).toFixed(3) : "",
                        item.superseded ? "replaced" : ""].filter(Boolean).join(" · ");
    el.append(text, meta);
    const more = folded(item);
    if (more) { el.append(more); }
    return el;
  }

  function render() {
    const all = rows();
    const list = $("results");
    list.replaceChildren(...all.slice(0, state.shown).map((item) => {
      const li = card(item, "li");
      li.addEventListener("click", (ev) => { if (ev.target.tagName !== "SUMMARY") { select(item.id, true); } });
      return li;
    }));
    $("more").hidden = all.length <= state.shown;
    const total = counted(state.data.nodes);
    $("count").textContent = (state.hits ? all.length + " of " + state.hits.length + " hits" : all.length + " of " + total + " memories")
      + (all.length > state.shown ? " (first " + state.shown + " listed)" : "");
    document.body.dataset.results = String(state.hits ? Math.min(all.length, state.shown) : -1);
    if (state.hits) { status(all.length + " result(s)"); }
    document.body.dataset.listed = String(all.length);
    focus(state.hits ? all : null);
  }

  // ------------------------------------------------------------------------------------------- the graph
  function label(text) { return text.length > 60 ? text.slice(0, 58) + "…" : text; }

  function draw() {
    const f = filters();
    const nodes = state.data.nodes.filter((n) => passes(n, f));
    const ids = new Set(nodes.map((n) => n.id));
    const small = nodes.length <= SMALL;
    const elements = [];
    const positions = small ? null : blocks(nodes);
    const sessions = new Set(nodes.map((n) => n.session));
    if (!small) {
      for (const s of state.data.sessions.filter((x) => sessions.has(x.id))) {
        const number = state.data.sessions.indexOf(s) + 1;
        elements.push({ data: { id: "s" + s.id, label: "#" + number + " " + short(s.id) + (s.day ? " · " + s.day : ""),
                                kind: "session" } });
      }
    }
    for (const n of nodes) {
      const el = { data: { id: "n" + n.id, label: label(n.text), kind: n.superseded ? "old" : "memory" } };
      if (!small) { el.data.parent = "s" + n.session; el.position = positions.get(n.id); }
      elements.push(el);
      if (small) {
        n.details.forEach((d, i) => {
          elements.push({ data: { id: "d" + n.id + "_" + i, label: d, kind: "detail" } });
          elements.push({ data: { id: "a" + n.id + "_" + i, source: "n" + n.id, target: "d" + n.id + "_" + i, kind: "anchor" } });
        });
      }
    }
    state.data.edges.forEach((e, i) => {
      if (ids.has(e.source) && ids.has(e.target)) {
        elements.push({ data: { id: "e" + i, source: "n" + e.source, target: "n" + e.target, label: e.relation, kind: "relation" } });
      }
    });
    if (cy) { cy.destroy(); }
    cy = cytoscape({
      container: $("graph"), elements, minZoom: 0.05, maxZoom: 4,
      layout: small ? { name: "cose", animate: false, randomize: false, nodeRepulsion: 9000, idealEdgeLength: 60 }
                    : { name: "preset", fit: true, padding: 20 },
      style: [
        { selector: "node", style: { "label": "data(label)", "font-size": 9, "text-wrap": "wrap", "text-max-width": 140,
                                     "background-color": "#3b6fd4", "color": "#1d2330", "width": 22, "height": 22,
                                     "min-zoomed-font-size": small ? 0 : 7 } },
        { selector: "node[kind = 'old']", style: { "background-color": "#9aa3b5" } },
        { selector: "node[kind = 'session']", style: { "background-color": "#eef1f7", "background-opacity": 1,
                                                       "border-width": 1, "border-color": "#c5cbd8", "shape": "round-rectangle",
                                                       "text-valign": "top", "text-halign": "center", "font-size": 64, "text-wrap": "none",
                                                       "font-weight": "bold", "color": "#4a5368", "min-zoomed-font-size": 4,
                                                       "padding": 12 } },
        { selector: "node[kind = 'detail']", style: { "shape": "round-rectangle", "background-color": "#f0a030",
                                                      "width": 12, "height": 12, "font-size": 7 } },
        { selector: "edge", style: { "curve-style": "bezier", "width": 2, "line-color": "#2a6f3f",
                                     "target-arrow-shape": "triangle", "target-arrow-color": "#2a6f3f",
                                     "label": "data(label)", "font-size": 7, "min-zoomed-font-size": 6 } },
        { selector: "edge[kind = 'anchor']", style: { "line-style": "dashed", "line-color": "#f0a030", "width": 1,
                                                      "target-arrow-shape": "none" } },
        { selector: ".faded", style: { "opacity": 0.15, "text-opacity": 0 } },
        { selector: ".hit", style: { "border-width": 4, "border-color": "#d43b3b", "min-zoomed-font-size": 0,
                                     "background-color": "#d43b3b", "width": 34, "height": 34,
                                     "z-index": 10, "text-background-color": "#fff", "text-background-opacity": 0.85,
                                     "text-background-padding": 2 } },
        { selector: ".chosen", style: { "border-width": 5, "border-color": "#111", "min-zoomed-font-size": 0, "z-index": 11 } },
      ],
    });
    cy.on("mouseover", "node[kind = 'memory'], node[kind = 'old']", (ev) => tip(ev.target, ev.renderedPosition));
    cy.on("mouseout", "node", () => { $("tip").hidden = true; });
    if (!small) {  // session names stay about 14 px on screen at any zoom, and show only where a box is wide
      // enough on screen for its name (zoomed out over hundreds of sessions they would overlap into a band)
      const sessionsStyle = () => cy.style().selector("node[kind = 'session']").style({
        "font-size": 14 / cy.zoom(), "text-opacity": state.blockWidth * cy.zoom() >= 200 ? 1 : 0 }).update();
      cy.on("zoom", sessionsStyle);
      sessionsStyle();
    }
    cy.on("tap", "node[kind = 'memory'], node[kind = 'old']", (ev) => select(ev.target.id().slice(1), false));
    document.body.dataset.nodes = String(state.data.nodes.length);
    document.body.dataset.edges = String(state.data.edges.length);
    document.body.dataset.drawn = String(nodes.length);
    $("layout").textContent = small ? "Laid out by links; orange: anchored details." : "Boxes are sessions, by day.";
  }

  // Sessions as blocks in date order, left to right then down; each block a small grid of its memories.
  function blocks(nodes) {
    const bySession = new Map();
    for (const n of nodes) { (bySession.get(n.session) || bySession.set(n.session, []).get(n.session)).push(n); }
    const order = state.data.sessions.filter((s) => bySession.has(s.id));
    const widest = Math.max(...[...bySession.values()].map((list) => Math.ceil(Math.sqrt(list.length))));
    const cell = { w: 170, h: 70 };
    const block = { w: widest * cell.w + 60, h: Math.ceil(Math.max(...[...bySession.values()].map((l) => l.length)) / widest) * cell.h + 90 };
    const panel = $("graph").getBoundingClientRect();  // as many blocks a row as fill the panel's shape
    const aspect = panel.height > 0 ? panel.width / panel.height : 1.5;
    const perRow = Math.max(1, Math.round(Math.sqrt(order.length * aspect * block.h / block.w)));
    state.blockWidth = block.w;
    const at = new Map();
    order.forEach((s, i) => {
      const x0 = (i % perRow) * block.w, y0 = Math.floor(i / perRow) * block.h;
      bySession.get(s.id).forEach((n, j) => at.set(n.id, { x: x0 + (j % widest) * cell.w, y: y0 + Math.floor(j / widest) * cell.h }));
    });
    return at;
  }

  function focus(items) {
    if (!cy) { return; }
    cy.elements().removeClass("hit faded");
    cy.nodes("[kind = 'memory'], [kind = 'old']").forEach((n) => { n.data("label", label(state.byId.get(n.id().slice(1)).text)); });
    document.body.dataset.focus = "0";
    if (!items) { return; }
    const hit = cy.collection(items.map((h) => cy.$id("n" + h.id)).filter((x) => x.length));
    cy.elements().not(hit).not("node[kind = 'session']").addClass("faded");
    hit.addClass("hit");
    hit.forEach((n) => { n.data("label", state.byId.get(n.id().slice(1)).text); });  // a hit reads in full
    document.body.dataset.focus = String(hit.length);
    if (hit.length) {
      cy.fit(hit, 80);
      if (cy.zoom() > 1.3) { cy.zoom({ level: 1.3, position: center(hit) }); }  // one hit: not a giant dot
    }
  }

  function center(eles) {
    const box = eles.boundingBox();
    return { x: (box.x1 + box.x2) / 2, y: (box.y1 + box.y2) / 2 };
  }

  function tip(node, at) {
    const n = state.byId.get(node.id().slice(1));
    if (!n) { return; }
    const box = $("tip");
    box.textContent = n.text + "\n" + [day(n.date), "session " + n.session, n.details.length ? n.details.length + " details" : ""]
      .filter(Boolean).join(" · ");
    const panel = $("graph").getBoundingClientRect();
    box.style.left = Math.min(panel.left + at.x + 14, window.innerWidth - 380) + "px";
    box.style.top = (panel.top + at.y + 14) + "px";
    box.hidden = false;
  }

  function select(id, fromList) {
    const n = state.byId.get(String(id));
    if (!n) { return; }
    state.selected = n.id;
    const box = $("selected");
    const item = card({ id: n.id, text: n.text, date: n.date, session: n.session, score: null, details: n.details,
                        links: n.links, superseded: n.superseded }, "div");
    const more = item.querySelector("details");
    if (more) { more.open = true; }
    const source = document.createElement("div");
    source.className = "source";
    source.textContent = "said in turn " + (n.turn != null ? n.turn : "?") + " of session " + n.session;
    item.append(source);
    if (n.said) {  // the words the memory was drawn from, to check it against
      const said = document.createElement("blockquote");
      said.className = "said";
      said.textContent = n.said;
      item.append(said);
    }
    box.replaceChildren(item);
    box.hidden = false;
    if (!offline) { showHistory(n.id, item).catch(fail); }
    if (cy) {
      cy.nodes().removeClass("chosen");
      const node = cy.$id("n" + n.id).addClass("chosen");
      if (fromList && node.length) { cy.animate({ center: { eles: node }, zoom: Math.max(cy.zoom(), 1.2) }, { duration: 200 }); }
    }
  }

  // When a version held: from the day it was said to the day a newer one replaced it.
  function held(m) {
    if (!m.valid_from) { return m.valid_until ? "until " + day(m.valid_until) : "undated"; }
    return m.valid_until ? "valid " + day(m.valid_from) + " – " + day(m.valid_until) : "valid since " + day(m.valid_from);
  }

  // The opened memory's replacement history: what it replaced and what replaced it, oldest first, with the days
  // each version held and the reasons (a memory never replaced: the one line of its own validity).
  async function showHistory(id, item) {
    const graph = await api("v1/users/" + encodeURIComponent($("user").value) + "/memories/" + id + "/history");
    if (state.selected !== String(id) || !graph.nodes.length) { return; }
    const reasons = new Map(graph.edges.map((e) => [String(e.old), e]));
    const list = document.createElement("ol");
    list.className = "history";
    for (const m of graph.nodes) {
      const li = document.createElement("li");
      const edge = reasons.get(String(m.id));
      li.textContent = held(m) + " · " + m.memory + (String(m.id) === String(id) ? " (this one)" : "")
        + (edge ? " → " + (edge.kind === "duplicate" ? "merged" : "replaced") + (edge.reason ? ": " + edge.reason : "") : "");
      list.append(li);
    }
    const title = document.createElement("div");
    title.className = "meta";
    title.textContent = "history (" + graph.nodes.length + (graph.nodes.length > 1 ? " versions)" : " version)");
    item.append(title, list);
    document.body.dataset.history = String(graph.nodes.length);
  }

  // ------------------------------------------------------------------------------------------- actions
  async function search(query) {
    state.shown = PAGE;
    if (!query.trim()) { state.hits = null; render(); status(statusLine()); return; }
    if (offline) {
      const words = query.toLowerCase().split(/\s+/).filter(Boolean);
      state.hits = state.data.nodes.filter((n) => words.some((w) => (n.text + " " + n.details.join(" ")).toLowerCase().includes(w)))
        .map((n) => ({ id: n.id, text: n.text, date: n.date, session: n.session, score: null, details: n.details,
                       links: n.links, superseded: n.superseded }));
    } else {
      const user = $("user").value;
      if (!user) { status("pick a user first"); return; }
      const reply = await api("v1/users/" + encodeURIComponent(user) + "/search",
                              { method: "POST", body: JSON.stringify({ query, k: SEARCH_K }) });
      state.hits = reply.results.map(hitRow);
    }
    render();
  }

  function statusLine() {
    const replaced = state.data.nodes.length - state.data.nodes.filter((n) => !n.superseded).length;
    return (offline ? "session " + (window.PROMEM_GRAPH.session_id || "") : $("user").value) + ": "
      + counted(state.data.nodes) + " memories" + (replaced && !$("old").checked ? " (" + replaced + " replaced, hidden)" : "");
  }

  function show(raw) {
    state.data = normalise(raw);
    state.byId = state.data.byId;
    state.hits = null;
    state.shown = PAGE;
    fillSessions(state.data.sessions);
    draw();
    render();
    status(statusLine());
  }

  async function loadUser(user) { show(await api("v1/users/" + encodeURIComponent(user) + "/graph")); }

  async function connect() {
    const users = (await api("v1/users")).users;
    const select = $("user");
    select.replaceChildren(new Option("(user)", ""), ...users.map((u) => new Option(u, u)));
    status(users.length + " user(s)");
    const wanted = params.get("user") || (users.length === 1 ? users[0] : "");
    if (wanted && users.includes(wanted)) { select.value = wanted; await loadUser(wanted); }
  }

  function fail(error) { status("error: " + error.message); document.body.dataset.error = error.message; }

  function refilter() { if (state.data) { state.shown = PAGE; draw(); render(); if (!state.hits) { status(statusLine()); } } }

  $("connect").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("promem-key", $("key").value.trim());
    $("hint").hidden = true;
    connect().catch(fail);
  });
  $("user").addEventListener("change", () => { if ($("user").value) { loadUser($("user").value).catch(fail); } });
  $("search").addEventListener("submit", (ev) => { ev.preventDefault(); search($("query").value).catch(fail); });
  $("clear").addEventListener("click", () => { $("query").value = ""; search("").catch(fail); });
  $("cutoff").addEventListener("input", () => {
    $("cutoff-value").textContent = Number($("cutoff").value).toFixed(2);
    if (state.data) { render(); }
  });
  for (const id of ["session", "from", "to", "old"]) { $(id).addEventListener("change", refilter); }
  $("more").addEventListener("click", () => { state.shown += PAGE; render(); });

  async function start() {
    if (offline) {
      document.body.classList.add("offline");
      show(window.PROMEM_GRAPH);
    } else {
      if (params.get("key")) { sessionStorage.setItem("promem-key", params.get("key")); history.replaceState(null, "", location.pathname); }
      if (sessionStorage.getItem("promem-key")) { await connect(); } else { $("hint").hidden = false; }
    }
    if (params.get("min")) {  // the score floor, as a link may give it (#…&min=0.5)
      $("cutoff").value = params.get("min");
      $("cutoff-value").textContent = Number($("cutoff").value).toFixed(2);
    }
    if (params.get("q")) { $("query").value = params.get("q"); await search(params.get("q")); }
  }
  start().catch(fail);
})();
