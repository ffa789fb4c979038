// The dashboard: the session list (polled) and, for the selected session, its figures (one definition,
// computed by the service), a chart of used tokens over turns with the marks of the state rule and the
// compactions, the components as a stacked bar that adds up to the gauge, and the context block's
// lists as the view has them. Live updates come from the session's SSE stream, read with fetch() so an
// API key can go in a header. No inline script or style: the page runs under a strict CSP.
"use strict";

const state = { selected: null, abort: null, lastEventId: 0, refreshTimer: null };
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const LAYERS = ["clear", "evict", "summarize", "shrink", "reactive"];
const fmt = (n) => Number(n || 0).toLocaleString("en-US");
const pct = (r) => (Number(r || 0) * 100).toFixed(1) + "%";

function headers() {
  const key = localStorage.getItem("contextwarden.apiKey") || "";
  return key ? { Authorization: "Bearer " + key } : {};
}

async function getJSON(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

function el(tag, value, className) {
  const node = document.createElement(tag);
  if (value !== undefined && value !== null) node.textContent = value;
  if (className) node.className = className;
  return node;
}

function svg(tag, attrs, title) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (title) {
    const t = document.createElementNS(SVG, "title");
    t.textContent = title;
    node.append(t);
  }
  return node;
}

function layerClass(layer) {
  return "layer-" + (LAYERS.includes(layer) ? layer : "other");
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
    const item = el("li");
    item.dataset.sessionId = session.session_id;
    item.append(el("span", session.session_id, "id"));
    const f = session.figures;
    // the same ratio as the gauge: the figures' ratio, never recomputed here
    const badge = el("span", f ? pct(f.ratio) : fmt(session.message_count) + " msgs", "badge");
    if (f) {
      badge.dataset.state = f.state;
      badge.dataset.ratio = String(f.ratio);
    }
    item.append(badge);
    if (session.session_id === state.selected) item.classList.add("selected");
    item.addEventListener("click", () => select(session.session_id));
    list.append(item);
  }
  $("sessions-empty").hidden = listed.data.length > 0;
}

function showGauge(f) {
  const gauge = $("gauge");
  gauge.dataset.ratio = String(f.ratio);
  gauge.dataset.state = f.state;
  $("gauge-fill").style.width = Math.min(100, f.ratio * 100).toFixed(1) + "%";
  $("gauge-used").textContent = String(f.used);
  $("gauge-budget").textContent = String(f.effective);
  $("gauge-ratio").textContent = pct(f.ratio);
  $("gauge-state").textContent = f.state;
  $("gauge-state").dataset.state = f.state;
  $("gauge-layer").textContent = "last layer: " + (f.last_layer || "none yet");
}

function showMarks(rule) {
  const marks = $("gauge-marks");
  marks.replaceChildren();
  if (!rule) return;
  for (const [name, share] of Object.entries(rule.marks)) {
    const mark = el("div", null, "mark");
    mark.dataset.mark = name;
    mark.title = name + " " + pct(share);
    mark.style.left = Math.min(100, share * 100) + "%";
    marks.append(mark);
  }
  $("rule").textContent = "state rule — " + rule.text;
}

function showFigures(f) {
  const rows = [
    ["window", fmt(f.window)],
    ["reserved output", "− " + fmt(f.reserved_output)],
    ["tool schemas", "− " + fmt(f.tool_schemas)],
    ["effective budget", fmt(f.effective)],
    ["used", fmt(f.used) + (f.calibration !== 1 ? " (counted " + fmt(f.used_raw) + " × " + f.calibration + ")" : "")],
    ["turn", fmt(f.turn)],
  ];
  const list = $("figures");
  list.replaceChildren();
  for (const [k, v] of rows) {
    const row = el("div");
    row.append(el("dt", k), el("dd", v));
    list.append(row);
  }
}

function showComponents(f) {
  const parts = Object.entries(f.components || {});
  const stack = $("stack");
  stack.replaceChildren();
  const body = $("breakdown").tBodies[0];
  body.replaceChildren();
  for (const [name, tokens] of parts) {
    const seg = el("div", null, "seg seg-" + name);
    seg.style.width = (f.effective ? (100 * tokens) / f.effective : 0).toFixed(2) + "%";
    seg.title = name + ": " + fmt(tokens) + " tokens";
    stack.append(seg);
    const row = el("tr");
    const label = el("td");
    label.append(el("span", null, "swatch seg-" + name), document.createTextNode(name));
    row.append(label, el("td", fmt(tokens)));
    body.append(row);
  }
  const foot = $("breakdown").tFoot;
  foot.replaceChildren();
  const total = el("tr", null, "total");
  const sum = parts.reduce((acc, [, tokens]) => acc + tokens, 0);
  total.append(el("td", "total (= used)"), el("td", fmt(sum)));
  total.dataset.sum = String(sum);
  foot.append(total);
}

function showChart(f, timeline) {
  const chart = $("chart");
  chart.replaceChildren();
  const W = 640, H = 220, L = 44, R = 8, T = 8, B = 22;
  const points = timeline.points || [];
  const compactions = timeline.compactions || [];
  const effective = f.effective || 1;
  const marks = Object.entries((f.rule && f.rule.marks) || {});
  const top = Math.max(1, ...marks.map(([, s]) => s), ...points.map((p) => p[2])) * effective;
  const turns = points.map((p) => p[0]).concat(compactions.map((c) => c.turn));
  const t0 = turns.length ? Math.min(...turns) : 0;
  const t1 = Math.max(t0 + 1, ...turns);
  const x = (turn) => L + ((turn - t0) / (t1 - t0)) * (W - L - R);
  const y = (tokens) => T + (1 - tokens / top) * (H - T - B);
  chart.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  const start = svg("text", { x: L, y: H - 6, class: "tick" });
  start.textContent = "turn " + t0;
  chart.append(start);
  const end = svg("text", { x: W - R, y: H - 6, class: "tick end" });
  end.textContent = "turn " + t1;
  chart.append(end);
  for (const [name, share] of marks) {
    const yy = y(share * effective);
    chart.append(svg("line", { x1: L, y1: yy, x2: W - R, y2: yy, class: "threshold", "data-threshold": name },
      name + ": " + fmt(Math.round(share * effective)) + " tokens (" + pct(share) + ")"));
    const label = svg("text", { x: L - 4, y: yy + 3, class: "tick end" });
    label.textContent = pct(share).replace(".0%", "%");
    chart.append(label);
  }
  if (points.length) {
    const path = points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    chart.append(svg("polyline", { points: path, class: "used" }));
  }
  for (const c of compactions) {
    chart.append(svg("line", { x1: x(c.turn), y1: y(c.before), x2: x(c.turn), y2: y(c.after), class: "drop" }));
    chart.append(svg("circle", { cx: x(c.turn), cy: y(c.after), r: 4, class: "compaction " + layerClass(c.layer),
      "data-layer": c.layer }, "turn " + c.turn + " " + c.layer + ": " + fmt(c.before) + " → " + fmt(c.after)
      + " tokens (saved " + fmt(c.saved) + ")"));
  }
  const legend = $("chart-legend");
  legend.replaceChildren();
  legend.append(el("span", "used tokens", "key key-used"));
  const seen = [...new Set(compactions.map((c) => c.layer))];
  for (const layer of seen) legend.append(el("span", layer, "key " + layerClass(layer)));
  if (!points.length) legend.append(el("span", "no turns recorded yet", "muted"));
}

function fillList(id, rows, empty) {
  const list = $(id);
  list.replaceChildren();
  for (const row of rows) list.append(row);
  if (!rows.length) list.append(el("li", empty, "muted"));
}

function showLists(detail) {
  const timeline = detail.timeline || {};
  const compactions = (timeline.compactions || []).slice().reverse().slice(0, 12);
  $("compactions-note").textContent = compactions.length ? "newest first" : "";
  fillList("compactions", compactions.map((c) => {
    const li = el("li");
    li.append(el("span", c.layer, "tag " + layerClass(c.layer)),
      el("span", "turn " + c.turn + ": " + fmt(c.before) + " → " + fmt(c.after) + " (saved " + fmt(c.saved) + ")"));
    return li;
  }), "none yet");
  const alerts = (timeline.alerts || []).slice().reverse().slice(0, 12);
  fillList("alerts", alerts.map((a) => {
    const li = el("li", null, "alert");
    li.append(el("span", a.alert, "tag"), el("span", "turn " + a.turn + ": " + a.detail));
    return li;
  }), "none");
  const ledger = detail.ledger || { entries: [], total: 0 };
  $("ledger-note").textContent = ledger.total ? "newest " + ledger.entries.length + " of " + ledger.total : "";
  fillList("ledger", ledger.entries.map((e) => {
    const li = el("li");
    li.append(el("span", "#" + e.step, "step"), el("span", e.status, "tag status-" + e.status),
      el("span", e.intention, "text"));
    return li;
  }), "empty: nothing has left the view");
  const ws = detail.working_set || { items: [], total: 0 };
  $("working-note").textContent = ws.total ? "strongest " + ws.items.length + " of " + ws.total : "";
  fillList("working-set", ws.items.map((it) => {
    const li = el("li");
    li.append(el("span", it.kind, "tag"), el("span", it.key, "text"));
    if (it.outcome) li.append(el("span", it.outcome, "muted"));
    return li;
  }), "empty");
  const rules = detail.instructions;
  $("instructions-card").hidden = !rules;
  if (rules) {
    $("instructions-note").textContent = "newest " + rules.items.length + " of " + rules.total;
    fillList("instructions", rules.items.map((r) => {
      const li = el("li");
      li.append(el("span", "#" + r.step, "step"), el("span", r.kind, "tag"), el("span", r.text, "text"));
      return li;
    }), "none");
  }
  const f = detail.figures || {};
  const cache = detail.cache || {};
  const memory = f.memory;
  const rows = [
    ["memory recalls", memory ? memory.hits + " in the view, " + fmt(memory.tokens) + " of " + fmt(memory.room)
      + " tokens (" + memory.retrieval + ")" : "off"],
    ["prompt-cache reuse", cache.reuse === null || cache.reuse === undefined ? "not reported yet"
      : pct(cache.reuse) + " (" + fmt(cache.cache_read_tokens) + " of " + fmt(cache.input_tokens) + " input tokens)"],
  ];
  const list = $("recall");
  list.replaceChildren();
  for (const [k, v] of rows) {
    const row = el("div");
    row.append(el("dt", k), el("dd", v));
    list.append(row);
  }
}

async function loadDetail() {
  const id = state.selected;
  if (!id) return;
  const detail = await getJSON("/v1/sessions/" + encodeURIComponent(id));
  if (id !== state.selected) return;
  const f = detail.figures;
  if (f) {
    showGauge(f);
    showMarks(f.rule);
    showFigures(f);
    showComponents(f);
    showChart(f, detail.timeline || {});
  }
  showLists(detail);
}

function scheduleDetail() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => loadDetail().catch(() => {}), 150);
}

function onEvent(kind, data) {
  if (kind === "context.status") {
    // the event carries the same figures as the API (its `budget` is the effective budget)
    showGauge({ ratio: data.ratio, state: data.state, used: data.used, effective: data.budget,
                last_layer: data.last_layer });
    scheduleDetail();
  } else if (kind === "compaction.finished" || kind === "alert") {
    scheduleDetail();
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
  history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const item of document.querySelectorAll("#sessions li")) {
    item.classList.toggle("selected", item.dataset.sessionId === id);
  }
  loadDetail().catch((error) => { $("connection").textContent = String(error.message); });
  follow(id);
}

function hashSession() {
  if (location.hash.length <= 1) return null;
  try {
    return decodeURIComponent(location.hash.slice(1));
  } catch (error) {
    return null;  // a malformed link selects nothing
  }
}

$("api-key").value = localStorage.getItem("contextwarden.apiKey") || "";
$("api-key").addEventListener("change", (e) => {
  localStorage.setItem("contextwarden.apiKey", e.target.value.trim());
  loadSessions();
});
loadSessions();
setInterval(loadSessions, 3000);
const initial = hashSession();
if (initial) select(initial);
