// The memory page: pick a user, search, and see the memory graph (nodes, verified edges, anchored details).
// Online it talks to the /v1 API with the key typed in (kept in sessionStorage, never in a cookie).
// Offline (`promem view`) the graph is embedded as window.PROMEM_GRAPH and search filters it locally.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const offline = window.PROMEM_GRAPH !== undefined;
  const params = new URLSearchParams(location.hash.slice(1));
  let graphData = null;
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

  // One shape for the store's graph and an extracted session's graph: nodes with their details attached.
  function normalise(raw) {
    const nodes = (raw.nodes || []).map((n) => ({
      id: String(n.id !== undefined ? n.id : n.node_id), text: n.text || "", date: n.date || n.timestamp || raw.timestamp || "",
      session: n.session_id || raw.session_id || "", superseded: n.superseded_by || null,
      details: (n.details || []).map((d) => (typeof d === "string" ? d : d.text)).filter((d) => typeof d === "string"),
    }));
    const byId = new Map(nodes.map((n) => [n.id, n]));
    for (const d of raw.details || []) {
      const owner = d.node !== undefined ? d.node : (d.node_id !== undefined ? d.node_id : d.anchor);
      const node = byId.get(String(owner));
      if (node && !node.details.includes(d.text)) { node.details.push(d.text); }
    }
    const edges = (raw.edges || []).filter((e) => byId.has(String(e.source)) && byId.has(String(e.target)))
      .map((e) => ({ source: String(e.source), target: String(e.target), relation: e.relation || "" }));
    return { nodes, edges };
  }

  function draw(data) {
    const elements = [];
    for (const n of data.nodes) {
      const label = n.text.length > 48 ? n.text.slice(0, 46) + "…" : n.text;
      elements.push({ data: { id: "n" + n.id, label, kind: n.superseded ? "old" : "memory" } });
      n.details.forEach((d, i) => {
        elements.push({ data: { id: "d" + n.id + "_" + i, label: d, kind: "detail" } });
        elements.push({ data: { id: "a" + n.id + "_" + i, source: "n" + n.id, target: "d" + n.id + "_" + i, kind: "anchor" } });
      });
    }
    data.edges.forEach((e, i) => elements.push({ data: { id: "e" + i, source: "n" + e.source, target: "n" + e.target,
                                                         label: e.relation, kind: "relation" } }));
    if (cy) { cy.destroy(); }
    cy = cytoscape({
      container: $("graph"), elements,
      layout: { name: "cose", animate: false, randomize: false, nodeRepulsion: 9000, idealEdgeLength: 60 },
      style: [
        { selector: "node", style: { "label": "data(label)", "font-size": 9, "text-wrap": "wrap", "text-max-width": 140,
                                     "background-color": "#3b6fd4", "color": "#1d2330", "width": 22, "height": 22 } },
        { selector: "node[kind = 'old']", style: { "background-color": "#9aa3b5" } },
        { selector: "node[kind = 'detail']", style: { "shape": "round-rectangle", "background-color": "#f0a030",
                                                      "width": 12, "height": 12, "font-size": 7 } },
        { selector: "edge", style: { "curve-style": "bezier", "width": 2, "line-color": "#2a6f3f",
                                     "target-arrow-shape": "triangle", "target-arrow-color": "#2a6f3f",
                                     "label": "data(label)", "font-size": 7 } },
        { selector: "edge[kind = 'anchor']", style: { "line-style": "dashed", "line-color": "#f0a030", "width": 1,
                                                      "target-arrow-shape": "none" } },
        { selector: ".hit", style: { "border-width": 4, "border-color": "#d43b3b" } },
      ],
    });
    document.body.dataset.nodes = String(data.nodes.length);
    document.body.dataset.edges = String(data.edges.length);
  }

  function show(hits) {
    const list = $("results");
    list.replaceChildren();
    for (const h of hits) {
      const item = document.createElement("li");
      const text = document.createElement("div");
      text.textContent = h.text;
      const meta = document.createElement("div");
      meta.className = "meta";
      meta.textContent = [h.date || "no date", "session " + (h.session_id || h.session || ""),
                          h.score != null ? "score " + Number(h.score).toFixed(3) : ""].filter(Boolean).join(" · ");
      item.append(text, meta);
      if ((h.details || []).length) {
        const details = document.createElement("div");
        details.className = "details";
        details.textContent = "details: " + h.details.join("; ");
        item.append(details);
      }
      if ((h.edges || []).length) {
        const links = document.createElement("div");
        links.className = "links";
        links.textContent = "links: " + h.edges.map((e) => e.relation + " " + (e.direction === "in" ? "←" : "→") + " " + e.text).join("; ");
        item.append(links);
      }
      list.append(item);
    }
    document.body.dataset.results = String(hits.length);
    if (cy) {
      cy.nodes().removeClass("hit");
      for (const h of hits) { cy.$id("n" + (h.id !== undefined ? h.id : h.node_id)).addClass("hit"); }
    }
    status(hits.length + " result(s)");
  }

  async function search(query) {
    if (offline) {
      const words = query.toLowerCase().split(/\s+/).filter(Boolean);
      const hits = graphData.nodes.filter((n) => words.some((w) => (n.text + " " + n.details.join(" ")).toLowerCase().includes(w)))
        .map((n) => ({ id: n.id, text: n.text, date: n.date, session_id: n.session, details: n.details }));
      show(hits);
      return;
    }
    const user = $("user").value;
    if (!user) { status("pick a user first"); return; }
    const reply = await api("v1/users/" + encodeURIComponent(user) + "/search", { method: "POST", body: JSON.stringify({ query, k: 20 }) });
    show(reply.hits);
  }

  async function loadUser(user) {
    graphData = normalise(await api("v1/users/" + encodeURIComponent(user) + "/graph"));
    draw(graphData);
    status(user + ": " + graphData.nodes.length + " memories");
  }

  async function connect() {
    const users = (await api("v1/users")).users;
    const select = $("user");
    select.replaceChildren(new Option("(user)", ""), ...users.map((u) => new Option(u, u)));
    status(users.length + " user(s)");
    const wanted = params.get("user") || (users.length === 1 ? users[0] : "");
    if (wanted && users.includes(wanted)) { select.value = wanted; await loadUser(wanted); }
  }

  function fail(error) { status("error: " + error.message); document.body.dataset.error = error.message; }

  $("connect").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("promem-key", $("key").value.trim());
    connect().catch(fail);
  });
  $("user").addEventListener("change", () => { if ($("user").value) { loadUser($("user").value).catch(fail); } });
  $("search").addEventListener("submit", (ev) => { ev.preventDefault(); search($("query").value).catch(fail); });

  async function start() {
    if (offline) {
      document.body.classList.add("offline");
      graphData = normalise(window.PROMEM_GRAPH);
      draw(graphData);
      status("session " + (window.PROMEM_GRAPH.session_id || "") + ": " + graphData.nodes.length + " memories");
    } else {
      if (params.get("key")) { sessionStorage.setItem("promem-key", params.get("key")); history.replaceState(null, "", location.pathname); }
      if (sessionStorage.getItem("promem-key")) { await connect(); }
    }
    if (params.get("q")) { $("query").value = params.get("q"); await search(params.get("q")); }
  }
  start().catch(fail);
})();
