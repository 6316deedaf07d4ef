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
window.fabricmon = { held, live };
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
function draw() {
  const src = $("source").value;
  let view = held.views[src];
  const banner = $("banner");
  if (!view) { banner.textContent = held.error || `no ${src} view`; banner.className = "withhold"; Plotly.purge("heatmap"); $("heatmap").dataset.drawn = "0"; return; }
  $("gates").innerHTML = view.gates.map(g => `<div class="gate ${g.verdict}" data-gate="${g.name}">${g.verdict.toUpperCase()} · ${g.reason}</div>`).join("");
  if (view.verdict === "withhold" || view.values === null) {
    banner.textContent = `${src} view withheld: ${view.failed.join("; ")}`; banner.className = "withhold";
    Plotly.purge("heatmap"); $("heatmap").dataset.drawn = "0"; $("hotinfo").textContent = ""; return;
  }
  if ($("fold").value === "1") view = foldLayers(view);
  banner.textContent = view.verdict === "flag" ? `${src} (flagged): ${view.failed.join("; ")}` : `${src} — all gates pass`;
  banner.className = view.verdict;
  const ports = held.meta.ports;
  const rows = ports.map(p => `r${p.rail} ${p.switch}:${p.port}`);
  const cols = view.columns.map(c => c[0] < 0 ? `L${c[1]} ${c[2]}` : `s${c[0]} L${c[1]} ${c[2]}`);
  const z = ports.map((_, p) => view.values.map(col => col[p]));
  // Hot port per column. The attributed view marks it only where the counters vouch for it
  // (hot_claim.port); elsewhere the column says "ambiguous" and rings the ports it cannot separate.
  const claims = view.hot_claim;
  const hot = [], amb = [];
  view.hot_port.forEach((p, i) => {
    const c = claims ? claims[i] : null;
    if (!claims) hot.push({x: cols[i], y: rows[p]});
    else if (c && c.port !== null) hot.push({x: cols[i], y: rows[c.port]});
    else if (c) for (const t of c.tied) amb.push({x: cols[i], y: rows[t],
      text: `ambiguous: ${c.n_tied} ports within 2 SE (lead ${(100 * (c.lead_rel ?? 0)).toFixed(1)} %` +
            (c.lead_se_rel === null ? ", SE unknown)" : ` ± ${(100 * c.lead_se_rel).toFixed(1)} %)`)});
  });
  const traces = [
    {type: "heatmap", x: cols, y: rows, z, colorscale: "Inferno", colorbar: {title: {text: "bytes"}}},
    {type: "scatter", mode: "markers", x: hot.map(h => h.x), y: hot.map(h => h.y), name: "hot port",
     marker: {symbol: "x", color: "cyan", size: 8}},
  ];
  if (claims) traces.push({type: "scatter", mode: "markers", x: amb.map(h => h.x), y: amb.map(h => h.y),
    text: amb.map(h => h.text), hoverinfo: "text", name: "ambiguous (no hot port claimed)",
    marker: {symbol: "circle-open", color: "#9ad", size: 9}});
  const nAmb = claims ? claims.filter(c => c && c.port === null).length : 0;
  $("hotinfo").textContent = claims
    ? `hot port claimed in ${cols.length - nAmb} of ${cols.length} (layer, phase) cells; ${nAmb} ambiguous ` +
      `(top ports within 2 standard errors) · attributed from ${view.basis || "counters"}`
    : "";
  Plotly.react("heatmap", traces,
    {title: {text: `${src} bytes per port (rows rail → leaf) · routing ${held.routing}`}, yaxis: {autorange: "reversed"},
     margin: {l: 180}, showlegend: true, legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom"}}, {responsive: true});
  $("heatmap").dataset.drawn = "1";
  $("heatmap").dataset.columns = String(cols.length);
  $("heatmap").dataset.claimed = String(claims ? cols.length - nAmb : cols.length);
  $("heatmap").dataset.ambiguous = String(nAmb);
}
$("source").addEventListener("change", draw);
$("fold").addEventListener("change", draw);
$("routing").addEventListener("change", subscribe);
// A hidden tab costs nothing: close the socket; a fresh snapshot when visible again.
document.addEventListener("visibilitychange", () => {
  if (document.hidden) live.ws?.close(1000); else { live.retries = 0; connect(); }
});
connect();
