// The fabric overview: layout (rows, groups, peers) over HTTP, data over the WebSocket,
// drawn by CanvasHeatmap. Group bands and labels go in a side canvas, redrawn only when the
// rows or the zoom change — never per update.

import { CanvasHeatmap, LUT_CSS } from "./heatmap.js";
import { IncidentOverlay } from "./incidents.js";
import { PhaseStrip, colourOf } from "./phasemarkers.js";
import {
  CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, FLAG_LAST, KIND_WINDOW, decodeBinary, dequantise, formatValue,
} from "./protocol.js";

const root = document.getElementById("fabric-view");
const $ = (id) => document.getElementById(id);
const heatCanvas = $("heatmap"), labelCanvas = $("labels"), axisCanvas = $("time-axis"), legendCanvas = $("legend");
const heatmap = new CanvasHeatmap(heatCanvas);
const METRIC_LABELS = {
  util: "Utilization %", in_bps: "In bit/s", out_bps: "Out bit/s", in_discards_ps: "In discards/s",
  out_discards_ps: "Out discards/s", in_errors_ps: "In errors/s", ecn_marked_ps: "ECN marks/s",
  pfc_pause_ps: "PFC pause frames/s", pfc_paused_fraction: "PFC paused %", watermark_bytes: "Queue watermark",
  drops_ps: "Drops/s",
};
const LABEL_COLS = [[0, 62], [62, 104], [166, 54]]; // x, width of band levels 0..2

const state = {
  fabric: root.dataset.fabric,
  layout: null, // {n_ports, switches, ports:{…}, groups:[…]}
  hello: null,
  metric: new URLSearchParams(location.search).get("metric") || "util",
  windowS: Number(new URLSearchParams(location.search).get("window") || 300),
  scale: new URLSearchParams(location.search).get("scale") === "log" ? "log" : "linear",
  collapsed: new Set(), // group ids
  showIdle: false, // idle ports (no traffic in the window) are collapsed by default
  idle: new Uint8Array(0), // the idle mask the rows were built with
  idleRows: 0, idleAt: 0,
  ws: null, retries: 0, retryTimer: null, paused: false,
  lastColumnAt: 0, columns: 0, bytes: 0, highlight: -1,
  draws: [], // {seq, ts, at} per drawn column, for the latency benchmark
};
const strip = new PhaseStrip($("phase-strip"), heatmap, {
  request: (run) => { if (state.ws?.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type: "markers", run })); },
  onInfo: showPhaseInfo,
});
const incidents = new IncidentOverlay($("incident-overlay"), heatmap, $("incidents"));
const hotCanvas = $("hot-overlay");
heatmap.onPaint = () => { drawHot(); incidents.redraw(); };
window.fabricmon = { state, heatmap, strip, incidents, portLabel, peerOf, rebuildRows };
$("window").value = String(state.windowS);
$("scale").value = state.scale;
heatmap.contrast = new URLSearchParams(location.search).get("contrast") || "window";
$("contrast").value = heatmap.contrast;

// ---------- layout and rows ----------------------------------------------------------------------
async function loadLayout() {
  const resp = await fetch(root.dataset.layout, { credentials: "same-origin" });
  state.layout = resp.ok ? await resp.json() : null;
  if (state.layout) state.layout.groups.forEach((g, i) => { g.id = i; });
  buildSearchIndex();
  setContrastGroups();
}

// Contrast groups are the layout's top bands: each rail, and the spines.
function setContrastGroups() {
  const L = state.layout;
  if (!L || heatmap.nPorts !== L.n_ports) return;
  const top = L.groups.filter((g) => g.level === 0);
  const of = new Uint16Array(L.n_ports);
  top.forEach((g, i) => of.fill(i, g.start, Math.min(g.end, L.n_ports)));
  heatmap.setGroups(of, top.map((g) => g.label));
}

function rebuildRows() {
  const n = heatmap.nPorts;
  const jump = new Int32Array(n).fill(-1); // collapsed group starting here → its end
  for (const g of state.layout?.groups ?? []) {
    if (state.collapsed.has(g.id) && g.end <= n) jump[g.start] = Math.max(jump[g.start], g.end);
  }
  const starts = [], ends = [];
  // Idle ports (no traffic in the window) are collapsed, one row per run of them on one switch:
  // the row still draws the maximum of its ports, so one that wakes up shows before the rows are
  // rebuilt around it.
  const idle = state.showIdle ? new Uint8Array(n) : heatmap.idleMask();
  const sw = state.layout?.ports.switch;
  state.idle = idle; state.idleRows = 0;
  let idlePorts = 0;
  // Walking in order, a collapsed group is met at its start; nested ones share it: take the widest.
  for (let p = 0; p < n;) {
    let end = Math.max(p + 1, jump[p]);
    if (end === p + 1 && idle[p]) {
      while (end < n && idle[end] && jump[end] < 0 && (!sw || sw[end] === sw[p])) end++;
      if (end - p > 1) { state.idleRows++; idlePorts += end - p; } else end = p + 1;
    }
    starts.push(p); ends.push(end); p = end;
  }
  const keep = heatmap.rowCount() ? [...heatmap.view] : null;
  heatmap.setRows(Int32Array.from(starts), Int32Array.from(ends));
  if (keep && keep[1] - keep[0] < heatmap.rowCount()) heatmap.setView(...keep);
  heatmap.redraw();
  drawLabels();
  state.idleAt = Date.now();
  const info = $("idle-info");
  info.textContent = state.showIdle ? "idle rows shown" : idlePorts ? `${idlePorts} idle ports (no traffic in the window) in ${state.idleRows} rows` : "";
  info.dataset.ports = String(idlePorts);
  $("idle-toggle").textContent = state.showIdle ? "Collapse idle" : "Show idle";
}

// After a column: rows rebuilt when the idle set changed (at most every 3 s; never mid-drag).
function followIdle() {
  if (state.showIdle || drag || Date.now() - state.idleAt < 3000) return;
  const now = heatmap.idleMask(), was = state.idle;
  if (now.length !== was.length) { rebuildRows(); return; }
  for (let p = 0; p < now.length; p++) if (now[p] !== was[p]) { rebuildRows(); return; }
}

// The k hottest cells of each column, outlined on their own canvas; a port hot in consecutive
// columns is one box, so a moving incast reads as a staircase.
function drawHot() {
  const c = hotCanvas, h = heatmap.canvas;
  if (c.width !== h.width || c.height !== h.height) { c.width = h.width; c.height = h.height; }
  const ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  const k = Number($("topk").value), N = heatmap.nCols, K = heatmap.k, cp = heatmap.colPx;
  let boxes = 0;
  if (!k) { c.dataset.boxes = "0"; return; }
  for (let j = 0; j < Math.min(k, K); j++) {
    ctx.strokeStyle = j === 0 ? "#ffffff" : "rgba(255,255,255,0.7)";
    ctx.lineWidth = j === 0 ? 2 : 1;
    let run = -1, from = 0;
    const flush = (to) => {
      if (run < 0) return;
      const r = heatmap.portRow[run], y0 = heatmap.rowToY(r), y1 = heatmap.rowToY(r + 1);
      if (y1 < 0 || y0 > c.height) return;
      const mid = (y0 + y1) / 2, half = Math.max(3, (y1 - y0) / 2 + 1);
      ctx.strokeRect(from * cp - 0.5, mid - half, (to - from) * cp + 1, 2 * half);
      boxes++;
    };
    for (let col = 0; col < N; col++) {
      const slot = (heatmap.head - (N - 1 - col) + N) % N;
      const p = heatmap.topk[slot * K + j];
      if (p !== run) { flush(col); run = p; from = col; }
    }
    flush(N);
  }
  c.dataset.boxes = String(boxes);
}

function coveringCollapsed(p) {
  if (!state.collapsed.size || !state.layout) return [];
  return state.layout.groups.filter((g) => state.collapsed.has(g.id) && g.start <= p && p < g.end);
}

// ---------- drawing the furniture: labels, time axis, legend --------------------------------------
function drawLabels() {
  const ctx = labelCanvas.getContext("2d");
  const H = (labelCanvas.height = heatCanvas.height);
  labelCanvas.style.height = `${heatCanvas.clientHeight || H}px`;
  ctx.clearRect(0, 0, labelCanvas.width, H);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  const groups = state.layout?.groups ?? [];
  const shade = [["#dfe6f0", "#c9d3e2"], ["#eef1f5", "#e0e5ec"], ["#f7f8fa", "#eceff3"]];
  const count = [0, 0, 0];
  for (const g of groups) {
    if (g.end > heatmap.nPorts) continue;
    const y0 = heatmap.rowToY(heatmap.portRow[g.start]), y1 = heatmap.rowToY(heatmap.portRow[g.end - 1] + 1);
    const [x, w] = LABEL_COLS[g.level];
    const k = count[g.level]++;
    if (y1 < 0 || y0 > H) continue;
    ctx.fillStyle = shade[g.level][k % 2];
    ctx.fillRect(x, y0, w - 2, Math.max(1, y1 - y0));
    if (y1 - y0 >= 11) {
      const label = (state.collapsed.has(g.id) ? "▸ " : "") + (g.level === 2 ? g.label.replace("-facing", "") : g.label);
      ctx.fillStyle = "#223";
      ctx.save();
      ctx.beginPath(); ctx.rect(x, Math.max(0, y0), w - 3, Math.min(H, y1) - Math.max(0, y0)); ctx.clip();
      ctx.fillText(label, x + 3, (Math.max(0, y0) + Math.min(H, y1)) / 2);
      ctx.restore();
    }
  }
  // idle runs: a grey mark and "⋯ N idle" where the row is tall enough
  ctx.textAlign = "left";
  for (let r = 0; r < heatmap.rowCount(); r++) {
    const a = heatmap.rowStart[r], b = heatmap.rowEnd[r];
    if (b - a < 2 || !state.idle[a]) continue;
    const y0 = heatmap.rowToY(r), y1 = heatmap.rowToY(r + 1);
    if (y1 < 0 || y0 > H) continue;
    const [x2, w2] = LABEL_COLS[2];
    ctx.fillStyle = "#e6e8ee"; ctx.fillRect(x2, y0, w2 - 2, Math.max(1, y1 - y0)); // over the band's own label
    ctx.fillStyle = "#99a"; ctx.fillRect(x2, y0, 4, Math.max(1, y1 - y0));
    if (y1 - y0 >= 10) { ctx.fillStyle = "#556"; ctx.fillText(`⋯ ${b - a} idle`, x2 + 6, (y0 + y1) / 2); }
  }
  if (state.highlight >= 0 && state.highlight < heatmap.nPorts) {
    const r = heatmap.portRow[state.highlight];
    const y0 = heatmap.rowToY(r), y1 = heatmap.rowToY(r + 1);
    ctx.fillStyle = "#e4007c";
    ctx.fillRect(labelCanvas.width - 12, Math.min(y0, (y0 + y1) / 2 - 3), 12, Math.max(6, y1 - y0));
  }
}

function drawTimeAxis() {
  const ctx = axisCanvas.getContext("2d");
  axisCanvas.width = heatCanvas.clientWidth || heatCanvas.width;
  ctx.clearRect(0, 0, axisCanvas.width, axisCanvas.height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#445";
  const cols = heatmap.nCols, intervalS = heatmap.intervalMs / 1000, spanS = cols * intervalS;
  const stepS = spanS > 400 ? 120 : spanS > 120 ? 60 : 15;
  for (let s = 0; s <= spanS; s += stepS) {
    const x = axisCanvas.width - (s / intervalS) * (axisCanvas.width / cols) - 1;
    ctx.fillRect(x, 0, 1, 5);
    const label = s === 0 ? "now" : `−${s >= 60 ? `${s / 60} min` : `${s} s`}`;
    ctx.textAlign = s === 0 ? "right" : x < 30 ? "left" : "center";
    ctx.fillText(label, x, 15);
  }
}

// The ramp and what it spans now: per window one range, per rail each rail's (listed below).
function drawLegend() {
  const ctx = legendCanvas.getContext("2d");
  const scale = state.hello?.scale;
  ctx.clearRect(0, 0, legendCanvas.width, legendCanvas.height);
  const note = $("legend-note");
  if (!scale) { note.textContent = ""; return; }
  const top = 34, h = 200, mode = heatmap.contrast;
  ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#223"; ctx.textBaseline = "middle";
  const unit = scale.unit === "%" ? "utilisation" : scale.unit;
  ctx.fillText(`${scale.kind} · ${unit}`, 2, 6);
  ctx.fillText(mode === "rail" ? "contrast per rail" : mode === "window" ? "contrast per window" : "full scale", 2, 16);
  for (let i = 0; i < 255; i++) { ctx.fillStyle = LUT_CSS[i]; ctx.fillRect(4, top + h - ((i + 1) * h) / 255, 14, h / 255 + 1); }
  ctx.fillStyle = "#223";
  const value = (code) => formatValue(dequantise(code, scale), scale).replace("< ", "≤ ");
  if (mode === "rail") {
    ctx.fillText("rail max", 22, top); ctx.fillText("rail floor", 22, top + h);
  } else {
    const lo = heatmap.range[0], hi = heatmap.range[1];
    for (const t of [1, 0.75, 0.5, 0.25, 0]) {
      const label = (t === 0 && lo > 0 ? "≤ " : "") + value(Math.round(lo + t * (hi - lo)));
      ctx.fillText(label, 22, top + h - t * h);
    }
  }
  for (let y = 0; y < 12; y += 2) for (let x = 0; x < 14; x += 2) {
    ctx.fillStyle = ((x + y) >> 1) & 1 ? "rgb(120,126,136)" : "rgb(168,173,181)"; ctx.fillRect(4 + x, top + h + 14 + y, 2, 2);
  }
  ctx.fillStyle = "#223"; ctx.fillText("no data", 22, top + h + 20);
  const lines = [];
  if (mode === "rail") {
    heatmap.groupNames.forEach((name, g) => {
      const lo = heatmap.range[2 * g], hi = heatmap.range[2 * g + 1];
      if (hi > 2) lines.push(`${name}: ${value(lo)} – ${value(hi)}`);
    });
  } else if (mode === "window") lines.push(`ramp: ${value(heatmap.range[0])} – ${value(heatmap.range[1])} (this window's busy median or half its max, to its max)`);
  note.textContent = lines.join("\n");
  note.style.whiteSpace = "pre-line";
  legendCanvas.dataset.range = `${heatmap.range[0]}-${heatmap.range[1]}`;
}

function sizeCanvases() {
  const area = heatCanvas.parentElement.getBoundingClientRect();
  const height = Math.max(200, window.innerHeight - heatCanvas.getBoundingClientRect().top - 60);
  heatmap.resize(Math.max(200, area.width), height);
  heatmap.redraw();
  strip.resize(); strip.redraw();
  drawLabels(); drawTimeAxis(); drawLegend();
}

// ---------- the socket ----------------------------------------------------------------------------
function connect() {
  clearTimeout(state.retryTimer);
  if (state.ws || document.hidden) return;
  const url = new URL(root.dataset.ws, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.search = new URLSearchParams({ metric: state.metric, window_s: String(state.windowS), scale: state.scale }).toString();
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  ws.onopen = () => { if (strip.runId) strip.select(strip.runId); }; // a new socket knows no selection
  ws.onmessage = (ev) => (typeof ev.data === "string" ? onText(JSON.parse(ev.data)) : onBinary(ev.data));
  ws.onclose = (ev) => {
    if (state.ws === ws) state.ws = null;
    if (ev.code === CLOSE_UNAUTHENTICATED) { location.href = `/accounts/login/?next=${encodeURIComponent(location.pathname)}`; return; }
    if (ev.code === CLOSE_FORBIDDEN) { setStatus("not allowed: the dashboard is for viewers, operators and admins", "bad"); return; }
    if (state.paused) return;
    // Exponential backoff with jitter, so a restarted server is not hit by every tab at once.
    const delay = Math.min(15000, 500 * 2 ** state.retries++) * (0.75 + Math.random() / 2);
    setStatus(`disconnected — reconnecting in ${(delay / 1000).toFixed(1)} s`, "bad");
    state.retryTimer = setTimeout(connect, delay);
  };
}

// Keep message order across the async layout fetch; one failing message must not stall the rest.
let queue = Promise.resolve();
function enqueue(fn) {
  queue = queue.then(fn).catch((err) => { console.error(err); setStatus(`error: ${err.message}`, "bad"); });
}
function onText(msg) { enqueue(() => handleText(msg)); }
function onBinary(buf) { enqueue(() => handleBinary(buf)); }

async function handleText(msg) {
  if (msg.type === "error") { setStatus(msg.message, "bad"); return; }
  if (msg.type === "markers") { strip.onMarkers(msg); return; }
  if (msg.type === "incidents") { incidents.onIncidents(msg); return; }
  if (msg.type !== "hello") return;
  state.retries = 0;
  state.hello = msg;
  windowParts = [];
  if (!state.layout || state.layout.topology_version !== msg.topology_version) await loadLayout();
  fillMetricSelect(msg);
  const sameShape = heatmap.nPorts === msg.n_ports;
  heatmap.configure({ nPorts: msg.n_ports, nCols: msg.window_cols, intervalMs: msg.interval_s * 1000 });
  setContrastGroups();
  $("scale").disabled = !(msg.scale_kinds || []).includes("log") || !(msg.scale_kinds || []).includes("linear");
  if (!sameShape || heatmap.rowCount() !== expectedRows()) rebuildRows();
  sizeCanvases();
  if (state.layout && state.layout.n_ports !== msg.n_ports) {
    setStatus(`topology mismatch: frames have ${msg.n_ports} ports, the topology ${state.layout.n_ports}`, "bad");
  }
}

function expectedRows() { return state.collapsed.size || !state.showIdle ? -1 : heatmap.nPorts; }

let windowParts = [];
function concat(arrays, Type) {
  const out = new Type(arrays.reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const a of arrays) { out.set(a, at); at += a.length; }
  return out;
}

function handleBinary(buf) {
  const m = decodeBinary(buf);
  state.bytes += buf.byteLength;
  if (m.kind === KIND_WINDOW) {
    windowParts.push(m);
    if (m.flags & FLAG_LAST) {
      heatmap.loadWindow(concat(windowParts.map((p) => p.ts), Float64Array), concat(windowParts.map((p) => p.codes), Uint8Array));
      state.idleAt = 0; rebuildRows(); drawLegend();
      strip.redraw();
      windowParts = [];
    }
  } else {
    const repaints = heatmap.repaints;
    heatmap.appendColumn(m.ts[0], m.codes);
    if (heatmap.repaints !== repaints) drawLegend();
    followIdle();
    strip.follow();
    state.columns++;
    state.draws.push({ seq: m.seq, ts: m.ts[0], at: Date.now(), bytes: buf.byteLength });
    if (state.draws.length > 5000) state.draws.splice(0, 2500);
  }
  state.lastColumnAt = Date.now();
  state.ws?.send(JSON.stringify({ type: "ack", seq: m.seq }));
  updateStatus();
}

function fillMetricSelect(hello) {
  const sel = $("metric");
  const names = hello.metrics.includes(hello.metric) ? hello.metrics : [hello.metric, ...hello.metrics];
  sel.innerHTML = "";
  for (const name of names) sel.add(new Option(METRIC_LABELS[name] || name, name, false, name === hello.metric));
}

function setStatus(text, cls = "") { const el = $("status"); el.textContent = text; el.className = `status ${cls}`; }

function updateStatus() {
  const ts = heatmap.newestTs();
  if (!state.hello || Number.isNaN(ts)) { setStatus("waiting for the first frame…"); return; }
  const ageS = (Date.now() - ts) / 1000, interval = state.hello.interval_s;
  const stale = ageS > 3 * interval + 2;
  const last = heatmap.updates.at(-1);
  setStatus(`${heatmap.nPorts} ports · newest ${new Date(ts).toLocaleTimeString([], { hour12: false })} (${ageS.toFixed(1)} s ago)` +
    (last !== undefined ? ` · draw ${last.toFixed(1)} ms` : "") + (stale ? " · STALE" : ""), stale ? "bad" : "ok");
}
setInterval(() => { if (state.hello && !state.paused) updateStatus(); }, 1000);

// A hidden tab costs nothing: close the socket, resynchronise (fresh window) when visible again.
document.addEventListener("visibilitychange", () => {
  if (document.hidden) { state.paused = true; state.ws?.close(1000); setStatus("paused (tab hidden)"); }
  else { state.paused = false; state.retries = 0; connect(); }
});

// ---------- interaction ---------------------------------------------------------------------------
function portLabel(p) {
  const L = state.layout;
  if (!L || p >= L.n_ports) return `port #${p}`;
  return `${L.switches[L.ports.switch[p]]}:${L.ports.name[p]}`;
}
function peerOf(p) { return state.layout?.ports.peer[p] || ""; }

// The canvas is stretched to its column's width (CSS); events come in CSS pixels.
function canvasXY(ev) {
  return [ev.offsetX * (heatCanvas.width / heatCanvas.clientWidth), ev.offsetY * (heatCanvas.height / heatCanvas.clientHeight)];
}

const tooltip = $("tooltip");
heatCanvas.addEventListener("mousemove", (ev) => {
  if (drag) return;
  const hit = heatmap.pick(...canvasXY(ev));
  if (!hit || !state.hello) { tooltip.hidden = true; return; }
  const scale = state.hello.scale;
  const idleRow = hit.range[1] - hit.range[0] > 1 && state.idle[hit.range[0]] ? `<div class="muted">${hit.range[1] - hit.range[0]} idle ports (no traffic in the window)</div>` : "";
  const value = formatValue(dequantise(hit.code, scale), scale);
  const pooled = hit.range[1] - hit.range[0] > 1 ? `<div class="muted">max of ${hit.range[1] - hit.range[0]} ports in this row</div>` : "";
  const when = Number.isNaN(hit.ts) ? "no frame" : new Date(hit.ts).toLocaleTimeString([], { hour12: false });
  tooltip.innerHTML = `<b>${escapeHtml(portLabel(hit.port))}</b><div>peer: <span class="peer">${escapeHtml(peerOf(hit.port) || "—")}</span></div>` +
    `<div>${escapeHtml(METRIC_LABELS[state.hello.metric] || state.hello.metric)}: <b class="value">${value}</b></div><div>${when}</div>${pooled}${idleRow}`;
  tooltip.hidden = false;
  const flip = ev.clientX > window.innerWidth - 380; // keep it on screen near the right edge
  tooltip.style.left = flip ? `${ev.pageX - 14 - tooltip.offsetWidth}px` : `${ev.pageX + 14}px`;
  tooltip.style.top = `${ev.pageY + 10}px`;
});
heatCanvas.addEventListener("mouseleave", () => { tooltip.hidden = true; });

let drag = null, clickTimer = null;
heatCanvas.addEventListener("mousedown", (ev) => { drag = { y: ev.offsetY, view: [...heatmap.view], moved: false }; });
window.addEventListener("mouseup", (ev) => {
  if (drag && !drag.moved && ev.target === heatCanvas) {
    const hit = heatmap.pick(...canvasXY(ev));
    // A click opens the port; wait a moment so a double-click (reset zoom) does not navigate.
    clearTimeout(clickTimer);
    if (hit) clickTimer = setTimeout(() => { location.href = root.dataset.portUrl.replace(/0\/$/, `${hit.port}/`); }, 300);
  }
  drag = null;
});
heatCanvas.addEventListener("mousemove", (ev) => {
  if (!drag) return;
  const dy = ev.offsetY - drag.y;
  if (Math.abs(dy) > 3) drag.moved = true;
  if (!drag.moved) return;
  const rowsPerPx = (drag.view[1] - drag.view[0]) / heatCanvas.height;
  heatmap.setView(drag.view[0] - dy * rowsPerPx, drag.view[1] - dy * rowsPerPx);
  heatmap.redraw(); drawLabels();
});
heatCanvas.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const at = heatmap.yToRow(ev.offsetY), [v0, v1] = heatmap.view;
  const f = ev.deltaY > 0 ? 1.25 : 0.8;
  heatmap.setView(at - (at - v0) * f, at + (v1 - at) * f);
  heatmap.redraw(); drawLabels();
}, { passive: false });
heatCanvas.addEventListener("dblclick", () => { clearTimeout(clickTimer); heatmap.setView(0, heatmap.rowCount()); heatmap.redraw(); drawLabels(); });
$("reset-zoom").addEventListener("click", () => { heatmap.setView(0, heatmap.rowCount()); heatmap.redraw(); drawLabels(); });

labelCanvas.addEventListener("click", (ev) => {
  const level = LABEL_COLS.findIndex(([x, w]) => ev.offsetX >= x && ev.offsetX < x + w);
  if (level < 0 || !state.layout) return;
  const port = heatmap.rowStart[Math.floor(heatmap.yToRow(ev.offsetY))];
  const g = state.layout.groups.find((gr) => gr.level === level && gr.start <= port && port < gr.end);
  if (!g) return;
  if (state.collapsed.has(g.id)) state.collapsed.delete(g.id); else state.collapsed.add(g.id);
  rebuildRows();
});
$("expand-all").addEventListener("click", () => { state.collapsed.clear(); rebuildRows(); });
$("collapse-all").addEventListener("click", () => {
  for (const g of state.layout?.groups ?? []) if (g.level === 1) state.collapsed.add(g.id);
  rebuildRows();
});

function keepParams() {
  const params = new URLSearchParams(location.search);
  params.set("metric", state.metric); params.set("window", String(state.windowS));
  params.set("scale", state.scale); params.set("contrast", heatmap.contrast);
  history.replaceState(null, "", `?${params}`);
}
$("metric").addEventListener("change", (ev) => {
  state.metric = ev.target.value;
  keepParams();
  state.ws?.send(JSON.stringify({ type: "subscribe", metric: state.metric, scale: state.scale }));
});
$("scale").addEventListener("change", (ev) => {
  state.scale = ev.target.value;
  keepParams();
  state.ws?.send(JSON.stringify({ type: "subscribe", metric: state.metric, scale: state.scale }));
});
$("contrast").addEventListener("change", (ev) => { heatmap.setContrast(ev.target.value); keepParams(); drawLegend(); });
$("topk").addEventListener("change", () => drawHot());
$("idle-toggle").addEventListener("click", () => { state.showIdle = !state.showIdle; rebuildRows(); });
$("window").addEventListener("change", (ev) => {
  state.windowS = Number(ev.target.value);
  keepParams();
  state.ws?.close(1000); state.ws = null; connect();
});

// ---------- search: host, GPU, NIC or switch:port -------------------------------------------------
let searchIndex = [];
function buildSearchIndex() {
  const L = state.layout;
  searchIndex = L ? L.ports.name.map((_, p) => [p, `${portLabel(p)} ${L.ports.peer[p]}`.toLowerCase()]) : [];
}
$("search-input").addEventListener("input", (ev) => {
  const q = ev.target.value.trim().toLowerCase();
  const list = $("search-results");
  list.innerHTML = "";
  if (q.length < 2) { list.hidden = true; return; }
  const words = q.split(/\s+/);
  const hits = searchIndex.filter(([, text]) => words.every((w) => text.includes(w))).slice(0, 12);
  for (const [p] of hits) {
    const li = document.createElement("li");
    li.textContent = `${portLabel(p)} — ${peerOf(p) || "no peer"}`;
    li.addEventListener("mousedown", () => jumpTo(p));
    list.append(li);
  }
  list.hidden = !hits.length;
});
$("search").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const first = $("search-results").querySelector("li");
  if (first) first.dispatchEvent(new Event("mousedown"));
});

function jumpTo(port) {
  $("search-results").hidden = true;
  for (const g of coveringCollapsed(port)) state.collapsed.delete(g.id);
  if (state.idle[port]) state.showIdle = true; // an idle port asked for by name gets its own row
  rebuildRows();
  const r = heatmap.portRow[port];
  heatmap.setView(r - 32, r + 32);
  state.highlight = port;
  heatmap.redraw(); drawLabels();
}
window.fabricmon.jumpTo = jumpTo;

function escapeHtml(s) { return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }

// ---------- phase markers of a selected run --------------------------------------------------------
async function loadRuns() {
  const resp = await fetch(root.dataset.runs, { credentials: "same-origin" });
  if (!resp.ok) return;
  const { runs } = await resp.json();
  const sel = $("run"), chosen = sel.value || state.run;
  sel.innerHTML = "";
  sel.add(new Option("none", ""));
  for (const r of runs) sel.add(new Option(`${r.name} (#${r.id}, ${r.state})`, String(r.id), false, String(r.id) === chosen));
  if (chosen && !runs.some((r) => String(r.id) === chosen)) sel.add(new Option(`run #${chosen}`, chosen, false, true));
}
function selectRun(run) {
  state.run = run;
  const params = new URLSearchParams(location.search);
  if (run) params.set("run", run); else params.delete("run");
  history.replaceState(null, "", `?${params}`);
  $("phase-strip").hidden = !run;
  $("phase-info").hidden = !run;
  strip.resize();
  strip.select(run);
}
// The run's markers line: how many, whether they sit on the right columns (clock gate) and
// whether the cells under them are the run's traffic (counters_of_run) — each said, never one
// "aligned" for both.
function showPhaseInfo(info) {
  const el = $("phase-info");
  if (!info) { el.textContent = ""; el.className = "phase-info"; return; }
  if (info.error) { el.textContent = info.error; el.className = "phase-info withhold"; return; }
  const keys = ["dispatch", "combine", "allreduce"].map((p) => `<span class="key" style="background:${colourOf(p)}"></span>${p}`).join("");
  const ns = info.clock?.error_bound_ns, noise = info.clock?.noise_max_ns;
  const ms = (v) => (v < 1e6 ? `${(v / 1e3).toFixed(0)} µs` : `${(v / 1e6).toFixed(1)} ms`);
  const clockOk = info.gate?.verdict === "pass";
  const bound = info.clock ? `clock error ≤ ${ms(ns)}` + (noise ? `, offset noise ${ms(noise)}` : "") +
    (info.clock.offset_known ? "" : " (no offset exchanged)") : "";
  const clock = clockOk ? `aligned · ${bound}` : `NOT ALIGNED — ${escapeHtml(info.gate?.reason || info.reason || "")}${bound ? ` · ${bound}` : ""}`;
  const c = info.counters;
  const counters = !c ? "counters: not judged yet"
    : c.verdict === "pass" ? `counters: the run's (${(100 * c.value).toFixed(0)} % match)`
    : `${c.verdict === "withhold" ? "COUNTERS NOT THE RUN'S" : "counters doubtful"} — ${escapeHtml(c.reason)}`;
  const dense = info.perPixel > 1 ? ` · ${info.perPixel.toFixed(1)} phases per pixel: zoom the window in` : " · one mark per phase";
  el.innerHTML = `${escapeHtml(info.name)}: ${info.count} phase markers${dense} · ${clock} · ${counters}${keys}<span class="key" style="background:#7f7f7f"></span>other`;
  el.className = `phase-info ${info.verdict}`;
  el.dataset.verdict = info.verdict;
  el.dataset.counters = c ? c.verdict : "";
}
state.run = new URLSearchParams(location.search).get("run") || "";
$("run").addEventListener("change", (ev) => selectRun(ev.target.value));
$("phase-strip").addEventListener("mousemove", (ev) => {
  const x = ev.offsetX * ($("phase-strip").width / $("phase-strip").clientWidth);
  const hits = strip.pick(x);
  if (!hits.length) { tooltip.hidden = true; return; }
  const rows = hits.slice(0, 8).map((m) => `<div><span class="key" style="display:inline-block;width:8px;height:8px;background:${colourOf(m.phase)}"></span> ` +
    `step ${m.step} · layer ${m.layer} · ${m.phase} · ${(m.end_ms - m.start_ms).toFixed(1)} ms</div>`).join("");
  const warn = strip.verdict === "pass" ? "" : `<div class="muted">not aligned: ${escapeHtml(strip.reason || "")}</div>`;
  tooltip.innerHTML = rows + (hits.length > 8 ? `<div class="muted">+${hits.length - 8} more</div>` : "") + warn;
  tooltip.hidden = false;
  tooltip.style.left = `${Math.min(ev.pageX + 14, window.innerWidth - 380)}px`;
  tooltip.style.top = `${ev.pageY + 10}px`;
});
$("phase-strip").addEventListener("mouseleave", () => { tooltip.hidden = true; });
loadRuns().then(() => { if (state.run) selectRun(state.run); });
setInterval(loadRuns, 30_000);

window.addEventListener("resize", () => { if (state.hello) sizeCanvases(); });
connect();
