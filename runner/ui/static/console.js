// wfrun ui: the console's actions, the start form built from a workflow's input JSON
// Schema, and the lists that update live. Every action is a POST to /api/ with the
// page's CSRF value (docs/ui.md#actions), after a confirmation. User text reaches the
// DOM only through textContent, values and attribute setters, never as markup.
"use strict";

function csrfValue() {
  const meta = document.querySelector('meta[name="wfrun-csrf"]');
  return meta ? meta.content : "";
}

function make(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function post(url, body) {
  let response;
  try {
    response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Wfrun-Csrf": csrfValue() },
      body: JSON.stringify(body || {}),
    });
  } catch (err) {
    return { ok: false, status: 0, data: { error: "the console cannot reach wfrun ui: " + err } };
  }
  let data;
  try { data = await response.json(); } catch (err) { data = { error: "HTTP " + response.status }; }
  return { ok: response.ok, status: response.status, data };
}

// An in-page confirmation (<dialog>): `then` runs only after "Yes".
function confirmThen(text, then) {
  const dialog = document.getElementById("confirm");
  if (!dialog || typeof dialog.showModal !== "function") {
    if (window.confirm(text)) then();
    return;
  }
  document.getElementById("confirm-text").textContent = text;
  const yes = document.getElementById("confirm-yes");
  const no = document.getElementById("confirm-no");
  const close = () => { yes.onclick = null; no.onclick = null; dialog.close(); };
  yes.onclick = () => { close(); then(); };
  no.onclick = close;
  dialog.showModal();
}

function runLink(runId) {
  const a = make("a", runId);
  a.href = "/runs/" + encodeURIComponent(runId);
  a.className = "new-run";
  return a;
}

// --- the run page's actions ------------------------------------------------------

// Which actions a run state allows (the server decides; this only hides the useless).
const ALLOWED = {
  cancel: ["queued", "starting", "running", "parked", "paused"],
  pause: ["queued", "starting", "running", "parked"],
  unpause: ["paused", "parked"],
  rerun: ["failed", "cancelled", "completed", "continued"],
  answer: ["waiting"],
};

function showActions(status) {
  const box = document.getElementById("actions");
  if (!box) return;
  box.dataset.status = status;
  for (const button of box.querySelectorAll("button[data-action]")) {
    button.disabled = !(ALLOWED[button.dataset.action] || []).includes(status);
  }
  // A pause asked of a live run shows in its state only at its next boundary; until
  // then it can be withdrawn.
  if (box.dataset.pausing === "1" && ALLOWED.pause.includes(status)) {
    document.getElementById("action-unpause").disabled = false;
  }
  const answer = document.getElementById("answer-box");
  if (answer) answer.hidden = status !== "waiting";
}

function answerValue(text) {
  try { return JSON.parse(text); } catch (err) { return text; }  // as `wfrun answer`
}

function wireRunActions() {
  const box = document.getElementById("actions");
  if (!box) return;
  const runId = box.dataset.runId;
  const from = document.getElementById("rerun-from");
  for (const g of document.querySelectorAll("#graph g.node")) {
    const option = make("option", g.dataset.node);
    option.value = g.dataset.node;
    from.append(option);
  }
  const result = document.getElementById("action-result");
  for (const button of box.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => {
      const action = button.dataset.action;
      let body = {};
      if (action === "rerun") {
        if (from.value) body.from = from.value;
        if (document.getElementById("rerun-force").checked) body.force = true;
      } else if (action === "answer") {
        body = { answer: answerValue(document.getElementById("answer-text").value) };
      }
      confirmThen(button.dataset.confirm, async () => {
        result.replaceChildren(make("span", action + "…", "meta"));
        const done = await post("/api/runs/" + encodeURIComponent(runId) + "/" + action, body);
        result.replaceChildren();
        result.dataset.outcome = done.ok ? "ok" : "failed";
        if (!done.ok) {
          result.append(make("span", done.data.error || "HTTP " + done.status, "error-text"));
          return;
        }
        if (action === "pause" || action === "unpause") {
          box.dataset.pausing = action === "pause" && done.data.state === "pausing" ? "1" : "";
          showActions(box.dataset.status);
        }
        if (done.data.run_id && done.data.run_id !== runId) {
          result.append(make("span", action + ": new run "), runLink(done.data.run_id),
            make("span", " (" + (done.data.status || "queued") + "; a host runs it)"));
        } else {
          result.append(make("span", action + ": " + (done.data.state || done.data.status || "done")
            + (done.data.requested ? " (its runner stops it)" : "")));
        }
      });
    });
  }
  const badge = document.getElementById("run-status");
  if (badge) showActions(badge.dataset.status);
  document.addEventListener("wfrun:status", (e) => showActions(e.detail));
}

// --- the start form, from the workflow's input JSON Schema -----------------------

function fieldFor(name, schema, required) {
  const row = make("div", null, "field");
  row.dataset.field = name;
  const id = "field-" + Math.random().toString(36).slice(2);
  const label = make("label", name + (required ? " *" : ""));
  label.htmlFor = id;
  row.append(label);
  let input;
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  let kind = "json";
  if (Array.isArray(schema.enum)) {
    input = make("select");
    if (!required) input.append(make("option", "", null));
    for (const choice of schema.enum) {
      const option = make("option", typeof choice === "string" ? choice : JSON.stringify(choice));
      option.value = JSON.stringify(choice);
      if (JSON.stringify(schema.default) === option.value) option.selected = true;
      input.append(option);
    }
    kind = "enum";
  } else if (type === "boolean") {
    input = make("input");
    input.type = "checkbox";
    input.checked = schema.default === true;
    kind = "boolean";
  } else if (type === "integer" || type === "number") {
    input = make("input");
    input.type = "number";
    input.step = type === "integer" ? "1" : "any";
    if (typeof schema.default === "number") input.value = String(schema.default);
    kind = type;
  } else if (type === "string") {
    const long = (schema.maxLength || 0) > 200 || schema.format === "textarea";
    input = make(long ? "textarea" : "input");
    if (!long) input.type = schema.writeOnly === true || schema.format === "password" ? "password" : "text";
    if (typeof schema.default === "string") input.value = schema.default;
    kind = "string";
  } else {
    input = make("textarea");
    input.rows = 3;
    input.placeholder = "JSON";
    if (schema.default !== undefined) input.value = JSON.stringify(schema.default, null, 2);
  }
  input.id = id;
  input.name = name;
  input.dataset.kind = kind;
  row.append(input);
  if (schema.description) row.append(make("p", schema.description, "hint"));
  return row;
}

function readField(input, required) {
  const name = input.name;
  const kind = input.dataset.kind;
  if (kind === "boolean") return { has: true, value: input.checked };
  const text = input.value;
  if (text === "") {
    if (required) throw new Error(name + " is required");
    return { has: false };
  }
  if (kind === "enum") return { has: true, value: JSON.parse(text) };
  if (kind === "integer" || kind === "number") {
    const n = Number(text);
    if (!Number.isFinite(n)) throw new Error(name + " must be a number");
    return { has: true, value: n };
  }
  if (kind === "string") return { has: true, value: text };
  try { return { has: true, value: JSON.parse(text) }; } catch (err) {
    throw new Error(name + " must be JSON: " + err.message);
  }
}

async function buildStartForm() {
  const box = document.getElementById("start");
  if (!box) return;
  const name = box.dataset.workflow;
  const form = document.getElementById("start-form");
  const fields = document.getElementById("start-fields");
  const error = document.getElementById("start-error");
  let view;
  try {
    const response = await fetch("/api/workflows/" + encodeURIComponent(name));
    view = await response.json();
  } catch (err) {
    error.textContent = "cannot read the workflow: " + err;
    return;
  }
  const schema = view.input_schema;
  const props = schema && typeof schema === "object" && schema.properties;
  const required = new Set(schema && Array.isArray(schema.required) ? schema.required : []);
  let whole = null;
  if (props && typeof props === "object") {
    for (const [key, sub] of Object.entries(props)) {
      fields.append(fieldFor(key, sub && typeof sub === "object" ? sub : {}, required.has(key)));
    }
  } else if (schema) {  // not an object of properties: the whole input as JSON
    whole = fieldFor("input", {}, true);
    fields.append(whole);
  } else {
    fields.append(make("p", "This workflow takes no input.", "hint"));
  }
  box.hidden = false;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    error.textContent = "";
    let input;
    try {
      if (whole) {
        input = readField(whole.querySelector("[name]"), true).value;
      } else if (props) {
        input = {};
        for (const control of fields.querySelectorAll("[name]")) {
          const got = readField(control, required.has(control.name));
          if (got.has) input[control.name] = got.value;
        }
      }
    } catch (err) {
      error.textContent = err.message;
      return;
    }
    confirmThen("Start " + name + "?", async () => {
      const done = await post("/api/workflows/" + encodeURIComponent(name) + "/start",
        input === undefined ? {} : { input });
      if (!done.ok) {
        error.textContent = done.data.error || "HTTP " + done.status;
        return;
      }
      window.location.assign("/runs/" + encodeURIComponent(done.data.run_id));
    });
  });
}

// --- lists that update live --------------------------------------------------------

// A page with [data-live] parts re-reads itself every 2 s while visible and swaps
// those parts in: the server renders them (escaped) exactly as on load, and a parsed
// document runs no script.
let refreshBusy = false;

async function refreshLive(force) {
  if (refreshBusy || (document.hidden && !force)) return;
  refreshBusy = true;
  try {
    const response = await fetch(window.location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const old of document.querySelectorAll("[data-live]")) {
      const next = fresh.getElementById(old.id);
      if (next) old.replaceWith(document.importNode(next, true));
    }
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (err) {
    // The server stopped: keep what is shown.
  } finally {
    refreshBusy = false;
  }
}

function liveParts() {
  if (!document.querySelectorAll("[data-live]").length) return;
  window.setInterval(refreshLive, 2000);
}

// --- the triggers page: pause and resume -------------------------------------------

// Delegated: the rows are swapped in by the live refresh, their buttons with them.
function wireTriggerActions() {
  const result = document.getElementById("trigger-result");
  if (!result) return;
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-trigger-action]");
    if (!button) return;
    const row = button.closest("tr[data-trigger]");
    const name = row.dataset.trigger;
    const action = button.dataset.triggerAction;
    confirmThen(button.dataset.confirm, async () => {
      result.replaceChildren(make("span", action + "…", "meta"));
      // The name's slash stays a path separator: each part is encoded on its own.
      const path = name.split("/").map(encodeURIComponent).join("/");
      const done = await post("/api/triggers/" + path + "/" + action, {});
      result.dataset.outcome = done.ok ? "ok" : "failed";
      if (!done.ok) {
        result.replaceChildren(make("span", done.data.error || "HTTP " + done.status, "error-text"));
        return;
      }
      result.replaceChildren(make("span", "trigger " + done.data.trigger + " "
        + (done.data.paused ? "paused" : "resumed") + (done.data.changed ? "" : " (it was already)")));
      await refreshLive(true);
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  wireRunActions();
  wireTriggerActions();
  buildStartForm();
  liveParts();
});
