// wfrun ui: live run page. No framework, no build step, no network beyond this server.
// User text only ever reaches the DOM through textContent or attribute setters, never
// as markup, so a title or output holding <script> shows as text.
"use strict";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function json(value) {
  return value === undefined || value === null ? "" : JSON.stringify(value, null, 2);
}

function shortTime(text) {
  return text ? String(text).replace("T", " ").replace(/Z$/, "").slice(0, 23) : "";
}

function ms(value) {
  if (typeof value !== "number") return "";
  return value < 1000 ? value + " ms" : (value / 1000).toFixed(1) + " s";
}

function eta(seconds) {
  if (typeof seconds !== "number") return "";
  if (seconds < 60) return "ETA " + Math.round(seconds) + " s";
  return "ETA " + Math.floor(seconds / 60) + " min " + Math.round(seconds % 60) + " s";
}

function setStatus(status) {
  const badge = document.getElementById("run-status");
  if (!badge) return;
  badge.textContent = status;
  badge.dataset.status = status;
  badge.className = "badge status-" + status;
  // console.js enables the actions this state allows.
  document.dispatchEvent(new CustomEvent("wfrun:status", { detail: status }));
}

// A JSON value as nested tables and lists (a run's input and outputs), each piece of
// text through textContent. Deep or huge values fall back to JSON text.
const MAX_ITEMS = 200;

function renderValue(value, depth) {
  depth = depth || 0;
  if (value === null || value === undefined) return el("span", "null", "v-null");
  if (typeof value === "string") {
    return value.includes("\n") || value.length > 120 ? el("pre", value, "v-text")
      : el("span", value, "v-str");
  }
  if (typeof value !== "object") return el("span", String(value), "v-" + typeof value);
  if (depth > 8) return el("pre", json(value), "json");
  if (Array.isArray(value)) {
    if (!value.length) return el("span", "[]", "v-null");
    const list = el("ol", null, "v-list");
    for (const item of value.slice(0, MAX_ITEMS)) {
      const li = el("li");
      li.append(renderValue(item, depth + 1));
      list.append(li);
    }
    if (value.length > MAX_ITEMS) list.append(el("li", "… " + (value.length - MAX_ITEMS) + " more", "meta"));
    return list;
  }
  const entries = Object.entries(value);
  if (!entries.length) return el("span", "{}", "v-null");
  const table = el("table", null, "kv");
  const body = el("tbody");
  for (const [key, item] of entries.slice(0, MAX_ITEMS)) {
    const tr = el("tr");
    tr.dataset.key = key;
    const td = el("td");
    td.append(renderValue(item, depth + 1));
    tr.append(el("th", key), td);
    body.append(tr);
  }
  if (entries.length > MAX_ITEMS) body.append(el("tr", "… " + (entries.length - MAX_ITEMS) + " more", "meta"));
  table.append(body);
  return table;
}

function renderOutputs(outputs) {
  const box = document.getElementById("outputs");
  if (!box) return;
  box.replaceChildren();
  const entries = Object.entries(outputs || {});
  if (!entries.length) box.append(el("p", "No outputs yet.", "empty"));
  for (const [node, value] of entries) {
    const card = el("div", null, "output-card");
    card.dataset.node = node;
    card.append(el("h3", node), renderValue(value));
    box.append(card);
  }
  const raw = document.getElementById("outputs-json");
  if (raw) raw.textContent = json(outputs);
}

// The timeline as a Gantt chart: one bar per node attempt, placed by its start and
// length on the run's time axis (positions set through the CSSOM, which the CSP allows).
function renderGantt(rows) {
  const box = document.getElementById("gantt");
  if (!box) return;
  box.replaceChildren();
  const spans = rows.map((row) => {
    const start = Date.parse(row.started_at);
    const end = row.finished_at ? Date.parse(row.finished_at) : Date.now();
    return { row, start, end: Math.max(end, start) };
  }).filter((s) => !Number.isNaN(s.start));
  if (!spans.length) { box.append(el("p", "Nothing has run yet.", "empty")); return; }
  const t0 = Math.min(...spans.map((s) => s.start));
  const total = Math.max(1, Math.max(...spans.map((s) => s.end)) - t0);
  for (const { row, start, end } of spans) {
    const line = el("div", null, "gantt-row");
    line.dataset.node = row.node;
    line.dataset.outcome = row.outcome;
    const track = el("div", null, "gantt-track");
    const bar = el("div", null, "gantt-bar outcome-" + row.outcome);
    bar.style.marginLeft = ((start - t0) / total * 100).toFixed(2) + "%";
    bar.style.width = Math.max(0.5, (end - start) / total * 100).toFixed(2) + "%";
    bar.title = row.node + " try " + (row.retry + 1) + ": " + row.outcome + " " + ms(end - start);
    track.append(bar);
    line.append(el("span", row.node + (row.retry ? " (try " + (row.retry + 1) + ")" : ""), "gantt-label"),
      track, el("span", ms(row.duration_ms === null ? end - start : row.duration_ms), "gantt-ms"));
    box.append(line);
  }
}

// A click on a graph node opens that node's logs.
function openLogsFromGraph() {
  for (const g of document.querySelectorAll("#graph g.node")) {
    g.addEventListener("click", () => {
      const box = document.getElementById("logs");
      if (!box) return;
      const wanted = [...box.querySelectorAll("details")].find((d) => d.dataset.node === g.dataset.node);
      const note = document.getElementById("logs-note");
      if (!wanted) {
        if (note) note.textContent = "No logs for " + g.dataset.node + " yet.";
        return;
      }
      if (note) note.textContent = "";
      wanted.open = true;
      wanted.scrollIntoView({ block: "center" });
    });
  }
}

function renderInput() {
  const box = document.getElementById("input");
  if (!box || box.dataset.value === undefined) return;
  box.replaceChildren(renderValue(JSON.parse(box.dataset.value)));
}

function renderGraph(nodes) {
  for (const g of document.querySelectorAll("#graph g.node")) {
    const state = nodes[g.dataset.node];  // a property read: no selector built from ids
    if (state === undefined) continue;
    g.dataset.state = state;
    const label = g.querySelector(".node-state");
    if (label) label.textContent = state;
  }
}

// A map's or parallel's items (done, running, failed of N) and each branch's state,
// drawn in the SVG the server made (graph.py): the same words as its items_text.
const BAR_PARTS = [["ok", ["ok"]], ["failed", ["failed", "timed_out"]],
  ["cancelled", ["cancelled"]], ["running", ["running"]]];

function renderFanout(items, branches) {
  for (const g of document.querySelectorAll("#graph g.fanout")) {
    const node = g.dataset.node;
    const states = Object.prototype.hasOwnProperty.call(branches, node) ? branches[node] : {};
    for (const row of g.querySelectorAll("g.body[data-branch]")) {
      const state = Object.prototype.hasOwnProperty.call(states, row.dataset.branch)
        ? states[row.dataset.branch] : undefined;
      if (state !== undefined) row.dataset.state = state;
    }
    if (!Object.prototype.hasOwnProperty.call(items, node)) continue;
    const counts = items[node];
    const total = counts.total || 0;
    const bar = g.querySelector("g.items");
    const track = bar.querySelector(".items-track");
    const width = Number(track.getAttribute("width"));
    let x = Number(track.getAttribute("x"));
    const words = [];
    for (const [name, keys] of BAR_PARTS) {
      const n = keys.reduce((sum, k) => sum + (counts[k] || 0), 0);
      const w = total ? Math.round(width * n / total) : 0;
      const part = bar.querySelector('rect[data-part="' + name + '"]');
      part.setAttribute("x", String(x));
      part.setAttribute("width", String(w));
      x += w;
      if (n || name === "ok" || name === "running" || name === "failed") words.push(n + " " + name);
    }
    bar.dataset.total = String(total);
    bar.querySelector(".items-text").textContent = total ? words.join(" · ") + " of " + total : "";
  }
}

function renderTimeline(rows) {
  const body = document.querySelector("#timeline tbody");
  if (!body) return;
  body.replaceChildren();
  for (const row of rows) {
    const tr = el("tr");
    tr.dataset.node = row.node;
    tr.dataset.outcome = row.outcome;
    tr.append(el("td", row.node), el("td", row.kind), el("td", row.retry + 1),
      el("td", shortTime(row.started_at)), el("td", ms(row.duration_ms)));
    const outcome = el("td");
    // A rerun's reused node, or a `cache:` hit: nothing ran, the result came from a run.
    const note = row.reused_from ? " (reused from " + row.reused_from + ")"
      : row.cached_from ? " (cached from " + row.cached_from + ")" : "";
    outcome.append(el("span", row.outcome + (row.will_retry ? " (retrying)" : "") + note,
      "badge outcome-" + row.outcome));
    if (row.items) {  // a map's or parallel's items by outcome, of how many
      const counts = Object.entries(row.items);
      const total = counts.reduce((sum, [, n]) => sum + n, 0);
      outcome.append(el("span", " " + counts.map(([k, n]) => n + " " + k).join(", ") +
        " of " + total, "items"));
    }
    tr.append(outcome, el("td", row.error || "", "error-text"));
    body.append(tr);
  }
}

function renderError(error) {
  const box = document.getElementById("run-error");
  if (!box) return;
  box.replaceChildren();
  if (!error) { box.hidden = true; return; }
  box.hidden = false;
  box.append(el("h2", "Error"));
  const line = el("p", (error.code ? error.code + ": " : "") + (error.message || json(error)),
    "error-message");
  line.id = "run-error-message";
  box.append(line);
  if (error.node) box.append(el("p", "at node " + error.node, "meta"));
}

function renderProgress(bars) {
  const box = document.getElementById("progress");
  if (!box) return;
  box.replaceChildren();
  box.hidden = !bars.length;
  for (const bar of bars) {
    const row = el("div", null, "bar");
    row.dataset.node = bar.node;
    row.dataset.key = bar.key;
    const meter = el("progress");
    if (typeof bar.total === "number") meter.max = bar.total;
    if (typeof bar.completed === "number") meter.value = bar.completed;
    const done = bar.completed === null || bar.completed === undefined ? "?" : bar.completed;
    const total = bar.total === null || bar.total === undefined ? "?" : bar.total;
    row.append(el("span", bar.label, "label"), meter,
      el("span", done + " / " + total + (bar.unit ? " " + bar.unit : ""), "count"),
      el("span", eta(bar.eta_s), "eta"));
    box.append(row);
  }
}

function renderUpdates(updates) {
  const list = document.getElementById("updates");
  if (!list) return;
  list.replaceChildren();
  for (const u of updates) list.append(el("li", json(u)));
}

function renderLogs(logs) {
  const box = document.getElementById("logs");
  if (!box) return;
  const open = new Set();
  for (const d of box.querySelectorAll("details[open]")) open.add(d.dataset.node);
  box.replaceChildren();
  for (const [node, lines] of Object.entries(logs)) {
    const details = el("details", null, "log");
    details.dataset.node = node;
    if (open.has(node)) details.open = true;
    details.append(el("summary", node + " (" + lines.length + " lines)"), el("pre", lines.join("\n")));
    box.append(details);
  }
}

function render(view) {
  setStatus(view.status);
  const steps = document.getElementById("run-steps");
  if (steps) steps.textContent = String(view.steps);
  const node = document.getElementById("run-node");
  if (node) node.textContent = view.current_node || "";
  renderGraph(view.nodes || {});
  renderFanout(view.items || {}, view.branches || {});
  renderTimeline(view.timeline || []);
  renderGantt(view.timeline || []);
  renderError(view.error);
  renderProgress(view.progress || []);
  renderUpdates(view.updates || []);
  renderOutputs(view.outputs);
  const final = document.getElementById("final-output");
  if (final) final.replaceChildren(renderValue(view.final_output));
  const finalRaw = document.getElementById("final-output-json");
  if (finalRaw) finalRaw.textContent = json(view.final_output);
  renderLogs(view.logs || {});
  document.body.dataset.seq = String(view.seq);
}

// The running step's output so far (`live` events: docs/ui.md#live-updates), its
// newest LIVE_SHOWN characters; gone when the step's recorded log takes over.
const LIVE_SHOWN = 64000;

function showLive(message) {
  const box = document.getElementById("live-box");
  const out = document.getElementById("live-text");
  if (!box || !out) return;
  if (message.node === null) {
    box.hidden = true;
    out.textContent = "";
  } else if (message.reset) {
    out.textContent = "";
    document.getElementById("live-node").textContent = message.node;
    box.dataset.attempt = message.attempt;
  }
  if (message.text) {
    let text = out.textContent + message.text;
    if (text.length > LIVE_SHOWN) text = text.slice(text.length - LIVE_SHOWN);
    out.textContent = text;
    box.hidden = false;
  }
  box.dataset.chars = String(out.textContent.length);
}

function followRun() {
  const run = document.getElementById("run");
  if (!run || !window.EventSource) return;
  const source = new EventSource(run.dataset.events);
  document.body.dataset.live = "connecting";
  source.addEventListener("open", () => { document.body.dataset.live = "open"; });
  source.addEventListener("run", (e) => {
    render(JSON.parse(e.data));
    document.body.dataset.live = "open";
  });
  source.addEventListener("launch", (e) => {
    const launch = JSON.parse(e.data);
    if (launch.status) setStatus(launch.status);
  });
  source.addEventListener("live", (e) => showLive(JSON.parse(e.data)));
  source.addEventListener("end", () => {
    showLive({ node: null });
    source.close();
    document.body.dataset.live = "ended";
  });
}

function autoSubmitFilters() {
  for (const select of document.querySelectorAll("form.filters select")) {
    select.addEventListener("change", () => select.form.submit());
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "run") {
    renderInput();
    openLogsFromGraph();
    followRun();
  }
  autoSubmitFilters();
});
