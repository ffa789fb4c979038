// The dashboard: the session list (polled), and for the selected session a live context gauge,
// tokens by component, a timeline of compactions and alerts, and the ledger. Live updates come
// from the session's SSE stream, read with fetch() so an API key can go in a header.
"use strict";

const state = { selected: null, abort: null, lastEventId: 0, refreshTimer: null };
const $ = (id) => document.getElementById(id);

function headers() {
  const key = localStorage.getItem("contextwarden.apiKey") || "";
  return key ? { Authorization: "Bearer " + key } : {};
}

async function getJSON(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

function text(tag, value, className) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (className) el.className = className;
  return el;
}

async function loadSessions() {
  let listed;
  try {
    listed = await getJSON("/v1/sessions");
  } catch (error) {
    $("connection").textContent = String(error.message);
    return;
  }
  const list = $("sessions");
  list.replaceChildren();
  for (const session of listed.data) {
    const item = document.createElement("li");
    item.dataset.sessionId = session.session_id;
    item.append(text("span", session.session_id));
    const ratio = session.status ? Math.round(session.status.ratio * 100) + "%" : session.message_count + " msgs";
    item.append(text("span", ratio, "muted"));
    if (session.session_id === state.selected) item.classList.add("selected");
    item.addEventListener("click", () => select(session.session_id));
    list.append(item);
  }
  $("sessions-empty").hidden = listed.data.length > 0;
}

function showGauge(used, budget, ratio, st, layer) {
  const gauge = $("gauge");
  gauge.dataset.ratio = String(ratio);
  gauge.dataset.state = st;
  $("gauge-fill").style.width = Math.min(100, ratio * 100).toFixed(1) + "%";
  $("gauge-used").textContent = String(used);
  $("gauge-budget").textContent = String(budget);
  $("gauge-ratio").textContent = (ratio * 100).toFixed(1) + "%";
  $("gauge-state").textContent = st;
  $("gauge-layer").textContent = layer ? "last layer: " + layer : "";
}

async function loadDetail() {
  const id = state.selected;
  if (!id) return;
  const detail = await getJSON("/v1/sessions/" + encodeURIComponent(id));
  if (id !== state.selected) return;
  const s = detail.status;
  showGauge(s.used, s.budget, s.ratio, s.state, s.layer);
  const thresholds = detail.budget.thresholds;
  for (const mark of document.querySelectorAll(".mark")) {
    mark.style.left = Math.min(100, thresholds[mark.dataset.threshold] * 100) + "%";
    mark.title = mark.dataset.threshold;
  }
  const body = $("breakdown").tBodies[0];
  body.replaceChildren();
  for (const [component, tokens] of Object.entries(s.breakdown)) {
    const row = document.createElement("tr");
    row.append(text("td", component), text("td", String(tokens)));
    body.append(row);
  }
  const ledger = $("ledger");
  ledger.replaceChildren();
  for (const entry of detail.ledger.entries || []) {
    ledger.append(text("li", "#" + entry.step + " [" + entry.status + "] " + entry.intention));
  }
}

function scheduleDetail() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => loadDetail().catch(() => {}), 150);
}

function onEvent(kind, data) {
  if (kind === "context.status") {
    showGauge(data.used, data.budget, data.ratio, data.state, data.compact_layer);
    scheduleDetail();
  } else if (kind === "compaction.finished") {
    const line = new Date(data.ts * 1000).toLocaleTimeString() + " " + data.layer + " (" + data.trigger + "): "
      + data.tokens_before + " → " + data.tokens_after + " tokens";
    $("timeline").prepend(text("li", line));
  } else if (kind === "alert") {
    const line = new Date(data.ts * 1000).toLocaleTimeString() + " alert " + data.alert + ": " + data.detail;
    $("timeline").prepend(text("li", line, "alert"));
  }
}

function parseFrames(buffer, handle) {
  let end;
  while ((end = buffer.indexOf("\n\n")) >= 0) {
    const frame = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    let id = null, kind = "message", data = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const name = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (name === "id") id = value;
      else if (name === "event") kind = value;
      else if (name === "data") data.push(value);
    }
    if (data.length) handle(id, kind, JSON.parse(data.join("\n")));
  }
  return buffer;
}

async function follow(id) {
  const controller = new AbortController();
  state.abort = controller;
  while (!controller.signal.aborted && state.selected === id) {
    try {
      const h = { ...headers(), "Last-Event-ID": String(state.lastEventId) };
      const response = await fetch("/v1/sessions/" + encodeURIComponent(id) + "/events",
                                   { headers: h, signal: controller.signal });
      if (!response.ok) throw new Error("events: HTTP " + response.status);
      $("connection").textContent = "live: " + id;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = parseFrames(buffer + decoder.decode(value, { stream: true }), (eventId, kind, data) => {
          if (eventId !== null) state.lastEventId = Number(eventId);
          onEvent(kind, data);
        });
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      $("connection").textContent = "reconnecting: " + error.message;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function select(id) {
  if (state.abort) state.abort.abort();
  state.selected = id;
  state.lastEventId = 0;
  $("detail").hidden = false;
  $("session-title").textContent = id;
  $("timeline").replaceChildren();
  history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const item of document.querySelectorAll("#sessions li")) {
    item.classList.toggle("selected", item.dataset.sessionId === id);
  }
  loadDetail().catch((error) => { $("connection").textContent = String(error.message); });
  follow(id);
}

$("api-key").value = localStorage.getItem("contextwarden.apiKey") || "";
$("api-key").addEventListener("change", (e) => {
  localStorage.setItem("contextwarden.apiKey", e.target.value.trim());
  loadSessions();
});
loadSessions();
setInterval(loadSessions, 3000);
if (location.hash.length > 1) select(decodeURIComponent(location.hash.slice(1)));
