// Phase page: a run's phase-aligned heatmap (projected | attributed | measured), streamed over its
// WebSocket and drawn with plotly.js; gates and the hot-port claims beside it.
import { PhaseViews, foldLayers } from "./phaseview.js";
const $ = (id) => document.getElementById(id);
const RUN_ID = $("phases").dataset.run;
// The run's views stream over /ws/phases/runs/<id>/: one snapshot, then deltas holding only new or
// changed columns and changed gate verdicts (fabricmon/phases/messages.py). Each message is drawn
// in place (Plotly.react) and acknowledged; the server sends the next delta only after the ack, so
// a slow tab gets one coalesced delta, not a queue. Source and fold are local; routing re-subscribes.
const held = new PhaseViews();
const live = { ws: null, retries: 0, timer: null, updates: 0, bytes: 0 };
window.fabricmon = { held, live, portLabel: (p) => portLabel(held.meta.ports[rowIndex(held.meta).get(p)]) };
function connect() {
  clearTimeout(live.timer);
  if (live.ws || document.hidden) return;
  const url = new URL(`/ws/phases/runs/${RUN_ID}/`, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(url);
  live.ws = ws;
  ws.onopen = () => { if ($("routing").value !== "pxn") subscribe(); };
  ws.onmessage = (ev) => { live.bytes += ev.data.length; onMessage(JSON.parse(ev.data)); };
  ws.onclose = (ev) => {
    if (live.ws === ws) live.ws = null;
    if (ev.code === 4401) { location.href = `/accounts/login/?next=${encodeURIComponent(location.pathname)}`; return; }
    if (ev.code === 4404) { $("live").textContent = "no such run (or not one you may see)"; return; }
    if (ev.code === 4403) { $("live").textContent = "not allowed"; return; }
    if (document.hidden) return;
    const delay = Math.min(15000, 500 * 2 ** live.retries++) * (0.75 + Math.random() / 2);
    $("live").textContent = `disconnected — reconnecting in ${(delay / 1000).toFixed(1)} s`;
    live.timer = setTimeout(connect, delay);
  };
}
function subscribe() {
  const [mode, seed] = [$("routing").value, 0];
  live.ws?.send(JSON.stringify({ type: "subscribe", routing: mode, seed }));
}
function onMessage(msg) {
  if (msg.type === "error") { $("live").textContent = msg.message; return; }
  if (msg.type === "snapshot") { live.retries = 0; held.reset(msg); }
  else if (msg.type === "delta" || msg.type === "more") held.apply(msg);
  else return;
  // a big snapshot or delta comes in parts ("more"); draw once the last part is in
  if (msg.last !== false) { live.updates++; draw(); showLive(msg); showWindow(); }
  live.ws?.send(JSON.stringify({ type: "ack", seq: msg.seq }));
}
// The views cover a window of reported steps (the newest while following live); older and newer
// page through the run, each page answered by the server as a snapshot of that window.
function showWindow() {
  const w = held.meta.window, el = $("window-info");
  if (!w) { el.textContent = ""; return; }
  const span = w.run_steps ? ` of steps ${w.run_steps[0]}–${w.run_steps[1]}` : "";
  el.textContent = `steps ${w.steps[0]}–${w.steps[1]} (${w.reported_steps} reported)${span}` +
    (w.live ? ` · live: the newest ${w.window_steps}` : " · history");
  el.dataset.lo = String(w.steps[0]); el.dataset.hi = String(w.steps[1]); el.dataset.live = w.live ? "1" : "0";
  $("older").disabled = !w.run_steps || w.steps[0] <= w.run_steps[0];
  $("newer").disabled = w.live || !w.run_steps || w.steps[1] >= w.run_steps[1];
  $("live-steps").disabled = w.live;
}
function page(from, to) {
  live.ws?.send(JSON.stringify(from === null ? { type: "window", steps_from: null }
    : { type: "window", steps_from: Math.max(0, from), steps_to: Math.max(0, to) }));
}
$("older").addEventListener("click", () => { const w = held.meta.window; page(w.run_steps[0], w.steps[0] - 1); });
$("newer").addEventListener("click", () => { const w = held.meta.window; page(w.steps[1] + 1, 2 * w.steps[1] - w.steps[0] + 1); });
$("live-steps").addEventListener("click", () => page(null));

function showLive(msg) {
  const el = $("live");
  el.dataset.updates = String(live.updates);
  el.dataset.state = held.state === "running" ? "running" : "finished";
  el.dataset.last = msg.type;
  const at = new Date().toLocaleTimeString([], { hour12: false });
  el.textContent = held.state === "running"
    ? `run running — live: updated ${at} over the socket (${live.updates} updates, ${(live.bytes / 1024).toFixed(1)} KiB)`
    : `run ${held.state} — final view (updated ${at})`;
}
// plotly.js 4 (pinned) reads titles only as {text}; its named colour scales have no "Inferno", so
// the heatmap's own ramp (frontend/static/live/heatmap.js) is given as stops.
const INFERNO = [[0, "rgb(0,0,4)"], [0.15, "rgb(40,11,84)"], [0.3, "rgb(101,21,110)"], [0.45, "rgb(159,42,99)"],
  [0.6, "rgb(212,72,66)"], [0.75, "rgb(245,125,21)"], [0.88, "rgb(250,193,39)"], [1, "rgb(252,255,164)"]];
const PHASE_SHORT = { dispatch: "D", combine: "C", dispatch_bwd: "Db", combine_bwd: "Cb", allreduce: "AR" };
const PHASE_COLOUR = { dispatch: "#1f77b4", combine: "#ff7f0e", dispatch_bwd: "#6baed6", combine_bwd: "#fdae6b" };
const DIR_SYMBOL = { out: "triangle-down", in: "triangle-up", "in = out": "diamond" };
const ROW_PX = 14; // every row gets its label: the chart grows with the rows it shows

// A row's label: the switch port and what it faces (a host GPU, or the switch port at the other
// end of an uplink) — never the rail number alone (spines have none).
export function portLabel(row) {
  const peer = (row.peer || "").trim();
  const gpu = peer.match(/^(\S+\s+gpu\d+)/);
  if (gpu) return `${row.switch}:${row.port} · ${gpu[1]}`;
  return peer ? `${row.switch}:${row.port} ↔ ${peer}` : `${row.switch}:${row.port}`;
}
function columnLabel(c) {
  const ph = PHASE_SHORT[c[2]] ?? c[2];
  return c[0] < 0 ? `L${c[1]} ${ph}` : `s${c[0]} L${c[1]} ${ph}`;
}
function fmtBytes(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "no data";
  for (const [f, u] of [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"]]) if (v >= f) return `${(v / f).toPrecision(3)} ${u}`;
  return `${Math.round(v)} B`;
}
// What a hot-port claim says, with its margin (exact views) or confidence (attributed).
function claimText(c, label) {
  if (!c) return "";
  const lead = c.lead_rel === null ? "?" : `${(100 * c.lead_rel).toFixed(1)} %`;
  const conf = c.basis === "se"
    ? (c.lead_se_rel === null ? "SE unknown" : `± ${(100 * c.lead_se_rel).toFixed(1)} % (2 SE needed)`)
    : "10 % needed";
  const dir = c.dir ? ` · ${c.dir === "out" ? "out (the switch sends: egress)" : c.dir === "in" ? "in (the switch receives)" : "in = out"}` : "";
  const what = c.port !== null ? `hot: ${label(c.port)}` : `ambiguous: ${c.n_tied} ports close (top ${label(c.top)})`;
  return `${what}${dir}<br>lead over ${label(c.runner_up)}: ${lead} · ${conf}`;
}

// The rows the server sent: port positions (meta.shown_ports), every port of a fabric up to
// FABRICMON_PHASE_MAX_PORTS, else each column's hot port and then the busiest (core/phases/rows.py);
// meta.ports labels them in that order. Ports are named by position everywhere else (hot_port,
// claims, run_ports): rowIndex maps a position to its row.
export function shownPorts(meta) {
  return meta.shown_ports ?? [...Array(meta.ports?.length ?? 0).keys()];
}
export function rowIndex(meta) {
  return new Map(shownPorts(meta).map((p, i) => [p, i]));
}
export function visiblePorts(meta, which) {
  const sent = shownPorts(meta);
  if (which === "all" || !meta.run_ports?.length) return sent;
  const row = rowIndex(meta);
  return meta.run_ports.filter((p) => row.has(p));
}

function draw() {
  const src = $("source").value;
  let view = held.views[src];
  const banner = $("banner");
  const blank = () => { for (const id of ["heatmap", "hotstrip"]) { Plotly.purge(id); $(id).dataset.drawn = "0"; } };
  if (!view) { banner.textContent = held.error || `no ${src} view`; banner.className = "withhold"; blank(); return; }
  $("gates").innerHTML = view.gates.map(g => `<div class="gate ${g.verdict}" data-gate="${g.name}">${g.verdict.toUpperCase()} · ${escapeHtml(g.reason)}</div>`).join("");
  if (view.verdict === "withhold" || view.values === null) {
    banner.textContent = `${src} view withheld: ${view.failed.join("; ")}`; banner.className = "withhold";
    blank(); $("hotinfo").textContent = ""; return;
  }
  const row = rowIndex(held.meta);
  if ($("fold").value === "1") view = foldLayers(view, shownPorts(held.meta));
  banner.textContent = view.verdict === "flag" ? `${src} (flagged): ${view.failed.join("; ")}` : `${src} — all gates pass`;
  banner.className = view.verdict;
  const ports = held.meta.ports;
  const label = (p) => (row.has(p) ? portLabel(ports[row.get(p)]) : `port #${p}`);
  const shown = visiblePorts(held.meta, $("ports").value);
  const rowOf = new Map(shown.map((p, i) => [p, i]));
  const rows = shown.map(label);
  const cols = view.columns.map(columnLabel);
  const z = shown.map((p) => view.values.map((col) => col[row.get(p)]));
  const claims = view.hot_claim ?? view.hot_port.map(() => null);
  const hot = [], amb = [], outside = new Set();
  claims.forEach((c, i) => {
    if (!c) return;
    const text = claimText(c, label);
    if (c.port !== null) {
      if (rowOf.has(c.port)) hot.push({ x: cols[i], y: label(c.port), text, dir: c.dir ?? "in = out" }); else outside.add(label(c.port));
    } else for (const t of c.tied) if (rowOf.has(t)) amb.push({ x: cols[i], y: label(t), text });
  });
  const nAmb = claims.filter((c) => c && c.port === null).length, nCols = cols.length;
  const unit = "bytes per phase (B)";
  const traces = [
    { type: "heatmap", x: cols, y: rows, z, colorscale: INFERNO, name: "bytes", hoverongaps: false,
      colorbar: { title: { text: unit, side: "right" } },
      hovertemplate: "%{y}<br>%{x}: %{z:.4s}B<extra></extra>" },
    { type: "scatter", mode: "markers", x: hot.map((h) => h.x), y: hot.map((h) => h.y), name: "hot port (decisive)",
      text: hot.map((h) => h.text), hoverinfo: "text",
      marker: { symbol: hot.map((h) => `${DIR_SYMBOL[h.dir] ?? "x"}`), color: "#00e5ff", size: 10, line: { color: "#003", width: 1 } } },
    { type: "scatter", mode: "markers", x: amb.map((h) => h.x), y: amb.map((h) => h.y), name: "ambiguous (no hot port claimed)",
      text: amb.map((h) => h.text), hoverinfo: "text", marker: { symbol: "circle-open", color: "#9ad", size: 11, line: { width: 2 } } },
  ];
  const total = held.meta.ports_total ?? ports.length;
  const bounded = shownPorts(held.meta).length < total
    ? ` (${shownPorts(held.meta).length} of ${total} sent: each column's hot port, then the busiest)` : "";
  const title = `${src[0].toUpperCase()}${src.slice(1)} bytes per port and phase · routing ${held.routing}` +
    ($("ports").value === "all" ? ` · all ports${bounded}` : ` · the run's ${shown.length} ports${bounded}`);
  const height = Math.max(380, rows.length * ROW_PX + 230);
  Plotly.react("heatmap", traces, {
    title: { text: title }, height,
    xaxis: { title: { text: "column: step s · layer L · phase (D dispatch, C combine, b backward) — time →" },
             tickangle: -60, automargin: true, type: "category" },
    yaxis: { title: { text: "port (switch:port · what it faces)" }, autorange: "reversed", type: "category",
             tickmode: "array", tickvals: rows, ticktext: rows, automargin: true, tickfont: { size: 10 } },
    margin: { t: 80 }, showlegend: true, legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom" },
  }, { responsive: true });
  const el = $("heatmap");
  Object.assign(el.dataset, { drawn: "1", columns: String(nCols), rows: String(rows.length),
    claimed: String(claims.filter((c) => c && c.port !== null).length), ambiguous: String(nAmb) });
  const basis = src === "attributed" ? ` · attributed from ${view.basis || "counters"}` : "";
  const rule = src === "attributed" ? "top ports within 2 standard errors" : "lead under 10 %";
  $("hotinfo").textContent = `hot port decisive in ${nCols - nAmb} of ${nCols} columns; ${nAmb} ambiguous (${rule})${basis}` +
    (outside.size ? ` · hot outside the run's ports (show all ports to see): ${[...outside].slice(0, 4).join(", ")}` : "");
  drawHotStrip(view, cols, claims, label);
}

// The movement: per column (time order) where the hot port is, one line per phase kind, so a
// moving incast reads as a path across rows; ambiguous columns drawn open, at their top port.
function drawHotStrip(view, cols, claims, label) {
  const kinds = [...new Set(view.columns.map((c) => c[2]))];
  const ports = new Set();
  const traces = kinds.map((kind) => {
    const pts = [];
    view.columns.forEach((c, i) => {
      const k = claims[i];
      if (c[2] !== kind || !k) return;
      ports.add(k.top);
      pts.push({ x: cols[i], y: label(k.top), open: k.port === null, text: claimText(k, label), dir: k.dir ?? "in = out" });
    });
    return { type: "scatter", mode: "lines+markers", name: kind, x: pts.map((p) => p.x), y: pts.map((p) => p.y),
      text: pts.map((p) => p.text), hoverinfo: "text", line: { color: PHASE_COLOUR[kind] ?? "#7f7f7f", width: 1, dash: "dot" },
      marker: { size: 9, color: PHASE_COLOUR[kind] ?? "#7f7f7f",
        symbol: pts.map((p) => `${DIR_SYMBOL[p.dir] ?? "circle"}${p.open ? "-open" : ""}`) } };
  });
  const rows = [...ports].sort((a, b) => a - b).map(label);
  Plotly.react("hotstrip", traces, {
    title: { text: "Hot port over time — where the incast moves (open: ambiguous)" },
    height: Math.max(260, rows.length * 22 + 200),
    xaxis: { title: { text: "column: step s · layer L · phase — time →" }, tickangle: -60, automargin: true,
             type: "category", categoryorder: "array", categoryarray: cols },
    yaxis: { title: { text: "hot port (switch:port · what it faces)" }, type: "category", categoryorder: "array",
             categoryarray: rows, tickmode: "array", tickvals: rows, ticktext: rows, automargin: true, tickfont: { size: 10 } },
    margin: { t: 60 }, legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom" },
  }, { responsive: true });
  $("hotstrip").dataset.drawn = "1";
  $("hotstrip").dataset.ports = String(rows.length);
}
function escapeHtml(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
$("source").addEventListener("change", draw);
$("fold").addEventListener("change", draw);
$("ports").addEventListener("change", draw);
$("routing").addEventListener("change", subscribe);
// A hidden tab costs nothing: close the socket; a fresh snapshot when visible again.
document.addEventListener("visibilitychange", () => {
  if (document.hidden) live.ws?.close(1000); else { live.retries = 0; connect(); }
});
connect();
