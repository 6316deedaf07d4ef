// The run timeline: ranks (rows) × time, drawn on a canvas from the server's aggregate
// (fabricmon/jobs/timeline.py): per cell the dominant phase (colour) and the share of time busy
// (opacity). Whatever the run's length, one answer is buckets × rows cells. Drag across the time
// axis to zoom in (the server re-aggregates that span); when a span holds few events their exact
// bars are drawn instead. Double-click resets to the whole run.

const COLOURS = {dispatch: "#1f77b4", combine: "#ff7f0e", dispatch_bwd: "#9ecae1", combine_bwd: "#fdae6b",
  allreduce: "#2ca02c", allgather: "#98df8a", reducescatter: "#d62728", send: "#9467bd", recv: "#c5b0d5", other: "#7f7f7f"};
const IDLE = 255;

function u8(b64) { return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)); }
function hex(c) { return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)); }
function fmtSpan(ns) {
  const s = ns / 1e9;
  return s >= 120 ? `${(s / 60).toFixed(1)} min` : s >= 1 ? `${s.toFixed(2)} s` : `${(s * 1e3).toFixed(2)} ms`;
}

export class RunTimeline {
  constructor(root, url) {
    this.root = root;
    this.url = url;
    this.canvas = root.querySelector("canvas");
    this.info = root.querySelector(".timeline-info");
    this.tip = root.querySelector(".timeline-tip");
    this.data = null;
    this.loads = 0; // read by tests
    this.canvas.addEventListener("mousedown", (ev) => { this.drag = {x0: ev.offsetX, x1: ev.offsetX}; });
    this.canvas.addEventListener("mousemove", (ev) => this.onMove(ev));
    this.canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    window.addEventListener("mouseup", () => this.onUp());
    this.canvas.addEventListener("dblclick", () => this.load());
  }

  async load(t1 = null, t2 = null) {
    const params = new URLSearchParams({buckets: String(Math.max(100, Math.min(2000, this.canvas.clientWidth || 600)))});
    if (t1 !== null) { params.set("t1_ns", String(t1)); params.set("t2_ns", String(t2)); }
    this.info.textContent = "loading…";
    const resp = await fetch(`${this.url}?${params}`, {credentials: "same-origin"});
    const data = await resp.json();
    if (!resp.ok) { this.info.textContent = data.error || `error ${resp.status}`; return; }
    this.data = data;
    this.loads++;
    this.root.dataset.events = String(data.events ?? 0);
    this.root.dataset.exact = data.exact ? "1" : "0";
    if (data.empty) { this.info.textContent = "No events yet."; this.canvas.hidden = true; return; }
    this.canvas.hidden = false;
    this.busy = u8(data.busy);
    this.phase = u8(data.phase);
    this.draw();
  }

  xOf(ns) { return ((ns - this.data.t1_ns) / (this.data.t2_ns - this.data.t1_ns)) * this.canvas.width; }
  nsOf(x) { return this.data.t1_ns + (x / this.canvas.width) * (this.data.t2_ns - this.data.t1_ns); }

  draw() {
    const d = this.data, c = this.canvas;
    c.width = Math.max(200, c.clientWidth || 600);
    c.height = Math.max(120, Math.min(520, d.rows * 3));
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#fafbfc"; ctx.fillRect(0, 0, c.width, c.height);
    const rowH = c.height / d.rows;
    if (d.exact) {
      for (let i = 0; i < d.exact.rank.length; i++) {
        const row = Math.floor(d.exact.rank[i] / d.ranks_per_row);
        const x0 = this.xOf(d.exact.start_ns[i]), x1 = this.xOf(d.exact.end_ns[i]);
        ctx.fillStyle = COLOURS[d.phases[d.exact.phase[i]]] || COLOURS.other;
        ctx.fillRect(x0, row * rowH, Math.max(1, x1 - x0), Math.max(1, rowH - (rowH > 3 ? 1 : 0)));
      }
    } else {
      const img = ctx.createImageData(d.buckets, d.rows), px = img.data;
      const rgb = d.phases.map((p) => hex(COLOURS[p] || COLOURS.other));
      for (let k = 0; k < this.busy.length; k++) {
        const ph = this.phase[k];
        if (ph === IDLE) continue;
        const [r, g, b] = rgb[ph] || rgb[rgb.length - 1];
        px[4 * k] = r; px[4 * k + 1] = g; px[4 * k + 2] = b;
        px[4 * k + 3] = 60 + Math.round((195 * this.busy[k]) / 254); // any activity stays visible
      }
      const tmp = document.createElement("canvas");
      tmp.width = d.buckets; tmp.height = d.rows;
      tmp.getContext("2d").putImageData(img, 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(tmp, 0, 0, c.width, c.height);
    }
    const whole = d.t1_ns === d.run_span_ns[0] && d.t2_ns >= d.run_span_ns[1];
    this.info.textContent = `${d.events.toLocaleString()} events · ${fmtSpan(d.t2_ns - d.t1_ns)}` +
      ` · ${d.world_size} ranks${d.ranks_per_row > 1 ? ` (${d.ranks_per_row} a row, busiest share drawn)` : ""}` +
      (d.exact ? " · exact events" : ` · ${d.buckets} time buckets`) +
      (whole ? " · drag to zoom" : " · double-click for the whole run");
  }

  onMove(ev) {
    if (!this.data || this.data.empty) return;
    const x = ev.offsetX * (this.canvas.width / this.canvas.clientWidth);
    if (this.drag) { this.drag.x1 = ev.offsetX; this.draw(); this.shade(); return; }
    const d = this.data, row = Math.floor((ev.offsetY / this.canvas.clientHeight) * d.rows);
    const b = Math.floor((x / this.canvas.width) * d.buckets), k = row * d.buckets + b;
    if (row < 0 || row >= d.rows || b < 0 || b >= d.buckets) { this.tip.hidden = true; return; }
    const r0 = row * d.ranks_per_row, ranks = d.ranks_per_row > 1 ? `ranks ${r0}–${r0 + d.ranks_per_row - 1}` : `rank ${r0}`;
    const ph = this.phase[k], at = fmtSpan(this.nsOf(x) - d.run_span_ns[0]);
    this.tip.textContent = ph === IDLE ? `${ranks} · +${at} · idle` :
      `${ranks} · +${at} · ${d.phases[ph]} · busy ${Math.round((100 * this.busy[k]) / 254)}%`;
    this.tip.hidden = false;
    this.tip.style.left = `${ev.offsetX + 12}px`; this.tip.style.top = `${ev.offsetY + 12}px`;
  }

  shade() {
    const ctx = this.canvas.getContext("2d"), f = this.canvas.width / this.canvas.clientWidth;
    const a = Math.min(this.drag.x0, this.drag.x1) * f, b = Math.max(this.drag.x0, this.drag.x1) * f;
    ctx.fillStyle = "rgba(30, 60, 200, 0.18)"; ctx.fillRect(a, 0, b - a, this.canvas.height);
  }

  onUp() {
    if (!this.drag) return;
    const f = this.canvas.width / this.canvas.clientWidth;
    const a = Math.min(this.drag.x0, this.drag.x1) * f, b = Math.max(this.drag.x0, this.drag.x1) * f;
    this.drag = null;
    if (b - a < 4) { this.draw(); return; }
    this.load(Math.floor(this.nsOf(a)), Math.ceil(this.nsOf(b)));
  }
}
