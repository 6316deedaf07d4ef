// The run timeline: ranks (rows) × time, drawn on a canvas from the server's aggregate
// (fabricmon/jobs/timeline.py): per cell the dominant phase (colour) and the share of time busy
// (opacity). Whatever the run's length, one answer is buckets × rows cells. Drag across the time
// axis to zoom in (the server re-aggregates that span); when a span holds few events their exact
// bars are drawn instead. Double-click resets to the whole run. An SVG around the canvas carries the
// words: the title, the rank axis (numeric, rank 0 at the top), the time axis from the run's start
// with its unit, and the key of the phases drawn.

const COLOURS = {dispatch: "#1f77b4", combine: "#ff7f0e", dispatch_bwd: "#9ecae1", combine_bwd: "#fdae6b",
  allreduce: "#2ca02c", allgather: "#98df8a", reducescatter: "#d62728", send: "#9467bd", recv: "#c5b0d5", other: "#7f7f7f"};
const IDLE = 255;
const SVG = "http://www.w3.org/2000/svg";

// About ``target`` round ticks over [lo, hi]: steps of 1, 2 or 5 × 10^k.
export function niceTicks(lo, hi, target = 6) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / target, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

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
    this.axes = svgEl("svg", {class: "timeline-axes", "aria-label": "run timeline axes"});
    root.append(this.axes);
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
    if (data.empty) { this.info.textContent = "No events yet."; this.canvas.hidden = true; this.axes.replaceChildren(); return; }
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
    this.drawAxes();
    const whole = d.t1_ns === d.run_span_ns[0] && d.t2_ns >= d.run_span_ns[1];
    this.info.textContent = `${d.events.toLocaleString()} events · ${fmtSpan(d.t2_ns - d.t1_ns)}` +
      ` · ${d.world_size} ranks${d.ranks_per_row > 1 ? ` (${d.ranks_per_row} a row, busiest share drawn)` : ""}` +
      (d.exact ? " · exact events" : ` · ${d.buckets} time buckets`) +
      (whole ? " · drag to zoom" : " · double-click for the whole run");
  }

  // The frame around the canvas, in CSS pixels of the canvas's box inside ``root``.
  drawAxes() {
    const d = this.data, c = this.canvas, plot = c.parentElement;
    const x0 = c.offsetLeft, y0 = c.offsetTop, w = c.clientWidth, h = c.clientHeight;
    const a = this.axes;
    a.setAttribute("width", String(plot.offsetWidth));
    a.setAttribute("height", String(plot.offsetHeight));
    a.replaceChildren();
    a.append(svgEl("text", {class: "title", x: x0, y: y0 - 12},
      "Collective calls per rank over time (colour: phase; shade: share of the time busy)"));
    // rank axis: rows top to bottom in rank order; every row labelled when they fit, else every k-th
    const rowH = h / d.rows, every = Math.max(1, Math.ceil(14 / rowH));
    for (let row = 0; row < d.rows; row += every) {
      const r0 = row * d.ranks_per_row, y = y0 + (row + 0.5) * rowH;
      const text = d.ranks_per_row > 1 ? `${r0}–${Math.min(d.world_size, r0 + d.ranks_per_row) - 1}` : `${r0}`;
      a.append(svgEl("text", {class: "tick rank-tick", x: x0 - 5, y: y + 4, "text-anchor": "end"}, text));
    }
    a.append(svgEl("text", {class: "axis-title", transform: `translate(${x0 - 42} ${y0 + h / 2}) rotate(-90)`, "text-anchor": "middle"}, "rank"));
    // time axis: from the run's start, in ms below 2 s of span, else s (min past 10 min)
    const spanNs = d.t2_ns - d.t1_ns, [div, unit] = spanNs < 2e9 ? [1e6, "ms"] : spanNs < 600e9 ? [1e9, "s"] : [60e9, "min"];
    const lo = (d.t1_ns - d.run_span_ns[0]) / div, hi = (d.t2_ns - d.run_span_ns[0]) / div;
    a.append(svgEl("line", {x1: x0, y1: y0 + h, x2: x0 + w, y2: y0 + h}));
    for (const t of niceTicks(lo, hi, Math.max(2, Math.round(w / 110)))) {
      const x = x0 + ((t - lo) / (hi - lo)) * w;
      a.append(svgEl("line", {x1: x, y1: y0 + h, x2: x, y2: y0 + h + 4}));
      a.append(svgEl("text", {class: "tick", x, y: y0 + h + 16, "text-anchor": "middle"}, String(t)));
    }
    a.append(svgEl("text", {class: "axis-title", x: x0 + w / 2, y: y0 + h + 33, "text-anchor": "middle"}, `time since the run started (${unit})`));
    // the phases drawn (only those present), right-aligned above the canvas
    const codes = new Set(d.exact ? d.exact.phase : this.phase);
    let x = x0 + w;
    for (const p of d.phases.filter((_, i) => codes.has(i)).reverse()) {
      const label = svgEl("text", {class: "tick", x, y: y0 - 12, "text-anchor": "end"}, p);
      a.append(label);
      x -= label.getComputedTextLength() + 4;
      a.append(svgEl("rect", {x: x - 10, y: y0 - 21, width: 10, height: 10, fill: COLOURS[p] || COLOURS.other}));
      x -= 18;
    }
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
    this.tip.style.left = `${this.canvas.offsetLeft + ev.offsetX + 12}px`;
    this.tip.style.top = `${this.canvas.offsetTop + ev.offsetY + 12}px`;
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
