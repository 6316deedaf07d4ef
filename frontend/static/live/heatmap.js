// A scrolling canvas heatmap whose cost per update follows the new column, not the window.
//
// Data: a ring buffer of u8 codes (nCols slots × nPorts), newest column at the right edge.
// Update: the canvas shifts its own image left by one column (drawImage onto itself) and paints
// only the new column. Rows: when there are more rows than pixels, each pixel row shows the
// *maximum* of the ports it covers (max-pooling), so a hot port never disappears; codes equal to
// NO_DATA (255) are drawn as a grey checker, never as zero.
//
// Contrast follows the data: a code is drawn through a per-group remap (``map``: group × 256 →
// ramp index) whose range is the window's own — from min(median of the busy cells, max / 2) to
// the max, per rail ("rail") or over the whole fabric ("window"); "fixed" draws the codes as
// sent. The range comes from a histogram of the window's codes per group, kept per column (add
// the new column, take away the one it replaces): O(ports) per update, and a full repaint only
// when a group's range moves by more than a few codes. max / 2 as the floor's cap keeps a
// uniform fabric from being stretched into false hot spots.
//
// Per column the k hottest ports are kept (``topk``) for the outline overlay, and per port how many
// of the window's columns carry traffic (``active``) and data (``seen``), for collapsing idle rows.

import { NO_DATA } from "./protocol.js";

// Perceptual dark→bright ramp (inferno-like stops), 255 entries; index 255 is unused (no data).
const STOPS = [
  [0.0, [0, 0, 4]], [0.15, [40, 11, 84]], [0.3, [101, 21, 110]], [0.45, [159, 42, 99]],
  [0.6, [212, 72, 66]], [0.75, [245, 125, 21]], [0.88, [250, 193, 39]], [1.0, [252, 255, 164]],
];
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

function rgba(r, g, b) {
  return LITTLE_ENDIAN ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
}

export const LUT = (() => {
  const lut = new Uint32Array(256);
  for (let i = 0; i < 255; i++) {
    const t = i / 254;
    let k = 1;
    while (k < STOPS.length - 1 && STOPS[k][0] < t) k++;
    const [t0, c0] = STOPS[k - 1], [t1, c1] = STOPS[k];
    const f = (t - t0) / (t1 - t0);
    lut[i] = rgba(...c0.map((c, j) => Math.round(c + f * (c1[j] - c))));
  }
  return lut;
})();
export const LUT_CSS = Array.from({ length: 255 }, (_, i) => {
  const v = LUT[i];
  const [r, g, b] = LITTLE_ENDIAN ? [v & 255, (v >> 8) & 255, (v >> 16) & 255] : [v >>> 24, (v >> 16) & 255, (v >> 8) & 255];
  return `rgb(${r},${g},${b})`;
});
const NO_DATA_A = rgba(120, 126, 136), NO_DATA_B = rgba(168, 173, 181), EMPTY = rgba(245, 246, 248);

export class CanvasHeatmap {
  static LUT_FOR_TEST = LUT; // the colours, for browser tests that read pixels back

  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d", { alpha: false });
    this.nPorts = 0;
    this.nCols = 1;
    this.intervalMs = 1000;
    this.data = new Uint8Array(0);
    this.slotTs = new Float64Array(1).fill(NaN);
    this.head = 0;
    this.rowStart = new Int32Array(0);
    this.rowEnd = new Int32Array(0);
    this.portRow = new Int32Array(0);
    this.view = [0, 0];
    this.colPx = 1;
    this.pixStart = new Int32Array(0);
    this.pixEnd = new Int32Array(0);
    this.pooled = new Uint8Array(0);
    this.updates = []; // ms per appended column (kept short; read by benchmarks and the status line)
    this.onPaint = null; // called after every paint (overlays follow the heatmap's image)
    this.contrast = "window"; // "window" | "rail" | "fixed"
    this.groupOf = new Uint16Array(0); // per port: its contrast group (rail; spines one group)
    this.groupNames = ["all"];
    this.nGroups = 1;
    this.hist = new Uint32Array(256);
    this.range = new Int32Array([0, 254]); // per group: [lo, hi] codes the ramp spans
    this.map = new Uint8Array(256);
    this.k = 3;
    this.topk = new Int32Array(0); // nCols × k ports, hottest first (-1: none)
    this.active = new Uint16Array(0);
    this.seen = new Uint16Array(0);
    this.repaints = 0; // full repaints caused by a contrast change (read by tests)
  }

  // Contrast groups: per port a group number (e.g. its rail); names for the legend.
  setGroups(groupOf, names) {
    this.groupOf = groupOf;
    this.groupNames = names;
    this.nGroups = Math.max(1, names.length);
    this.rebuildStats();
  }

  setContrast(mode) { this.contrast = mode; this.rebuildStats(); this.redraw(); }

  // Histogram, activity and top-k from the whole window (on load, on a group or mode change).
  rebuildStats() {
    const n = this.nPorts, N = this.nCols, G = this.contrast === "rail" ? this.nGroups : 1;
    this.hist = new Uint32Array(G * 256);
    this.range = new Int32Array(2 * G);
    this.map = new Uint8Array(G * 256);
    if (this.active.length !== n) { this.active = new Uint16Array(n); this.seen = new Uint16Array(n); }
    this.active.fill(0); this.seen.fill(0);
    if (this.topk.length !== N * this.k) this.topk = new Int32Array(N * this.k);
    this.topk.fill(-1);
    for (let slot = 0; slot < N; slot++) {
      if (Number.isNaN(this.slotTs[slot])) continue;
      this.count(slot * n, 1);
    }
    this.fitRange(true);
    for (let slot = 0; slot < N; slot++) if (!Number.isNaN(this.slotTs[slot])) this.rankColumn(slot);
  }

  group(p) { return this.contrast === "rail" && p < this.groupOf.length ? this.groupOf[p] : 0; }

  // Add (sign 1) or take away (−1) one column's codes from the histogram and the activity counts.
  count(offset, sign) {
    const d = this.data, n = this.nPorts, h = this.hist, rail = this.contrast === "rail", g = this.groupOf;
    for (let p = 0; p < n; p++) {
      const c = d[offset + p];
      if (c === NO_DATA) continue;
      h[(rail && p < g.length ? g[p] : 0) * 256 + c] += sign;
      this.seen[p] += sign;
      if (c > 0) this.active[p] += sign;
    }
  }

  // Each group's ramp range from its histogram; true when some range moved (then the map is rebuilt).
  fitRange(force = false) {
    const G = this.range.length / 2;
    let moved = force;
    for (let g = 0; g < G; g++) {
      const h = this.hist.subarray(g * 256, g * 256 + 255);
      let hi = 0, busy = 0;
      for (let c = 1; c < 255; c++) if (h[c]) { hi = c; busy += h[c]; }
      let median = 0;
      for (let c = 1, acc = 0; c < 255; c++) { acc += h[c]; if (2 * acc >= busy && busy) { median = c; break; } }
      let lo = Math.min(median, hi >> 1);
      if (this.contrast === "fixed") { lo = 0; hi = 254; }
      hi = Math.max(hi, lo + 2);
      const [l0, h0] = [this.range[2 * g], this.range[2 * g + 1]];
      if (force || Math.abs(lo - l0) > 2 || Math.abs(hi - h0) > 2) {
        this.range[2 * g] = lo; this.range[2 * g + 1] = hi; moved = true;
      }
    }
    if (moved) {
      for (let g = 0; g < G; g++) {
        const lo = this.range[2 * g], span = this.range[2 * g + 1] - lo;
        for (let c = 0; c < 255; c++) this.map[g * 256 + c] = Math.max(0, Math.min(254, Math.round(((c - lo) * 254) / span)));
        this.map[g * 256 + 255] = NO_DATA;
      }
    }
    return moved;
  }

  // The k ports with the highest drawn code in one column (drawn ≥ half the ramp: they stand out).
  rankColumn(slot) {
    const n = this.nPorts, k = this.k, d = this.data, off = slot * n, best = this.topk, at = slot * k;
    const val = new Int32Array(k).fill(-1);
    for (let j = 0; j < k; j++) best[at + j] = -1;
    for (let p = 0; p < n; p++) {
      const c = d[off + p];
      if (c === NO_DATA) continue;
      const v = this.map[this.group(p) * 256 + c];
      if (v < 127 || v <= val[k - 1]) continue;
      let j = k - 1;
      while (j > 0 && val[j - 1] < v) { val[j] = val[j - 1]; best[at + j] = best[at + j - 1]; j--; }
      val[j] = v; best[at + j] = p;
    }
  }

  // The drawn code of a port's raw code (after contrast).
  shown(port, code) { return code === NO_DATA ? NO_DATA : this.map[this.group(port) * 256 + code]; }

  // Ports with no traffic in any column of the window (but some data: a dead port stays in view).
  idleMask() {
    const n = this.nPorts, out = new Uint8Array(n);
    for (let p = 0; p < n; p++) out[p] = this.active[p] === 0 && this.seen[p] > 0 ? 1 : 0;
    return out;
  }

  // Port count and window shape; empties the buffer.
  configure({ nPorts, nCols, intervalMs }) {
    this.nPorts = nPorts;
    this.nCols = Math.max(1, nCols);
    this.intervalMs = intervalMs;
    this.data = new Uint8Array(this.nCols * nPorts).fill(NO_DATA);
    this.slotTs = new Float64Array(this.nCols).fill(NaN);
    this.head = this.nCols - 1;
    if (this.groupOf.length !== nPorts) { this.groupOf = new Uint16Array(nPorts); this.groupNames = ["all"]; this.nGroups = 1; }
    if (this.portRow.length !== nPorts) this.setRows(...CanvasHeatmap.oneRowPerPort(nPorts));
    this.rebuildStats();
  }

  static oneRowPerPort(n) {
    const s = new Int32Array(n), e = new Int32Array(n);
    for (let i = 0; i < n; i++) { s[i] = i; e[i] = i + 1; }
    return [s, e];
  }

  // Rows are consecutive port ranges covering every port in order (a collapsed group is one row).
  setRows(rowStart, rowEnd) {
    this.rowStart = rowStart;
    this.rowEnd = rowEnd;
    this.portRow = new Int32Array(this.nPorts);
    for (let r = 0; r < rowStart.length; r++) this.portRow.fill(r, rowStart[r], rowEnd[r]);
    this.view = [0, rowStart.length];
    this.layoutPixels();
  }

  rowCount() { return this.rowStart.length; }

  setView(v0, v1) {
    const n = this.rowStart.length;
    const span = Math.min(n, Math.max(4, v1 - v0));
    v0 = Math.max(0, Math.min(n - span, v0));
    this.view = [v0, v0 + span];
    this.layoutPixels();
  }

  resize(width, height) {
    this.colPx = Math.max(1, Math.floor(width / this.nCols));
    this.canvas.width = this.colPx * this.nCols;
    this.canvas.height = Math.max(50, Math.floor(height));
    this.canvas.style.height = `${this.canvas.height}px`; // width stretches (CSS), height is 1:1
    this.layoutPixels();
  }

  // Pixel row y → the port range [pixStart, pixEnd) it shows (-1 = below the last row).
  layoutPixels() {
    const H = this.canvas.height, n = this.rowStart.length;
    this.pixStart = new Int32Array(H).fill(-1);
    this.pixEnd = new Int32Array(H).fill(-1);
    this.pooled = new Uint8Array(H);
    const [v0, v1] = this.view, per = (v1 - v0) / H;
    for (let y = 0; y < H; y++) {
      const a = Math.floor(v0 + y * per);
      if (a >= n || a < 0) continue;
      const b = Math.min(n, Math.max(a + 1, Math.floor(v0 + (y + 1) * per)));
      this.pixStart[y] = this.rowStart[a];
      this.pixEnd[y] = this.rowEnd[b - 1];
    }
  }

  rowToY(row) { const [v0, v1] = this.view; return ((row - v0) * this.canvas.height) / (v1 - v0); }
  yToRow(y) { const [v0, v1] = this.view; return v0 + (y * (v1 - v0)) / this.canvas.height; }

  loadWindow(ts, codes) {
    const cols = ts.length, n = this.nPorts;
    const take = Math.min(cols, this.nCols);
    this.data.fill(NO_DATA);
    this.slotTs.fill(NaN);
    this.head = this.nCols - 1;
    // Place columns by time, so gaps in the window (failed polls) stay gaps.
    const newest = cols ? ts[cols - 1] : NaN;
    for (let i = cols - take; i < cols; i++) {
      const age = Math.round((newest - ts[i]) / this.intervalMs);
      if (age < 0 || age >= this.nCols) continue;
      const slot = (this.head - age + this.nCols) % this.nCols;
      this.data.set(codes.subarray(i * n, (i + 1) * n), slot * n);
      this.slotTs[slot] = ts[i];
    }
    this.rebuildStats();
    this.redraw();
  }

  newestTs() { return this.slotTs[this.head]; }

  // The one per-update path: O(ports + pixel rows), independent of the window length.
  appendColumn(tsMs, codes) {
    const t0 = performance.now();
    const n = this.nPorts, N = this.nCols, last = this.slotTs[this.head];
    let k = Number.isNaN(last) ? 1 : Math.round((tsMs - last) / this.intervalMs);
    // a slot about to be overwritten leaves the statistics first
    const put = (slot) => {
      if (!Number.isNaN(this.slotTs[slot])) this.count(slot * n, -1);
      this.data.set(codes, slot * n);
      this.slotTs[slot] = tsMs;
      this.count(slot * n, 1);
    };
    if (k <= 0) { // a late or repeated column: overwrite its slot in place
      const age = -k;
      if (age >= N) return;
      const slot = (this.head - age + N) % N;
      put(slot);
      if (this.fitRange()) { this.rebuildStats(); this.repaints++; this.redraw(); }
      else { this.rankColumn(slot); this.paintColumns(N - 1 - age, 1); }
    } else {
      k = Math.min(k, N);
      for (let i = 1; i < k; i++) { // skipped intervals are gaps: no data
        const slot = (this.head + i) % N;
        if (!Number.isNaN(this.slotTs[slot])) this.count(slot * n, -1);
        this.data.fill(NO_DATA, slot * n, (slot + 1) * n);
        this.slotTs[slot] = NaN;
        this.topk.fill(-1, slot * this.k, (slot + 1) * this.k);
      }
      this.head = (this.head + k) % N;
      put(this.head);
      if (this.fitRange()) { // the window's range moved: every column is drawn again on it
        this.rebuildStats(); this.repaints++; this.redraw();
      } else {
        this.rankColumn(this.head);
        const w = this.canvas.width, h = this.canvas.height, dx = k * this.colPx;
        if (dx < w) this.ctx.drawImage(this.canvas, dx, 0, w - dx, h, 0, 0, w - dx, h);
        this.paintColumns(N - k, k);
      }
    }
    const ms = performance.now() - t0;
    this.updates.push(ms);
    if (this.updates.length > 2000) this.updates.splice(0, 1000);
    return ms;
  }

  redraw() { this.paintColumns(0, this.nCols); }

  // Paint `count` display columns starting at display column `first` (0 = oldest) in one putImageData.
  paintColumns(first, count) {
    const H = this.canvas.height, cp = this.colPx, W = count * cp;
    if (!H || !W) return;
    const img = this.ctx.createImageData(W, H);
    const px = new Uint32Array(img.data.buffer);
    const N = this.nCols, n = this.nPorts, pooled = this.pooled;
    for (let c = 0; c < count; c++) {
      const age = N - 1 - (first + c);
      const slot = (this.head - age + N) % N;
      this.poolColumn(slot * n, pooled);
      const x0 = c * cp, gx = (first + c) * cp;
      for (let y = 0; y < H; y++) {
        const code = pooled[y];
        const row = y * W;
        for (let dx = 0; dx < cp; dx++) {
          let color;
          if (this.pixStart[y] < 0) color = EMPTY;
          else if (code === NO_DATA) color = (((gx + dx) >> 1) + (y >> 1)) & 1 ? NO_DATA_A : NO_DATA_B;
          else color = LUT[code];
          px[row + x0 + dx] = color;
        }
      }
    }
    this.ctx.putImageData(img, first * cp, 0);
    if (this.onPaint) this.onPaint();
  }

  // Max over each pixel row's ports of the drawn (contrast-mapped) code, ignoring no data;
  // all-missing stays NO_DATA.
  poolColumn(offset, out) {
    const d = this.data, s = this.pixStart, e = this.pixEnd, map = this.map;
    const rail = this.contrast === "rail", g = this.groupOf;
    for (let y = 0; y < out.length; y++) {
      let m = -1;
      for (let p = s[y]; p < e[y]; p++) {
        const c = d[offset + p];
        if (c === NO_DATA) continue;
        const v = map[(rail ? g[p] : 0) * 256 + c];
        if (v > m) m = v;
      }
      out[y] = m < 0 ? NO_DATA : m;
    }
  }

  // Canvas pixel → {port (the max of its pixel row), code, ts, portRange}; null off the data.
  pick(x, y) {
    const N = this.nCols, n = this.nPorts;
    const col = Math.floor(x / this.colPx), yy = Math.floor(y);
    if (col < 0 || col >= N || yy < 0 || yy >= this.pixStart.length || this.pixStart[yy] < 0) return null;
    const slot = (this.head - (N - 1 - col) + N) % N;
    const a = this.pixStart[yy], b = this.pixEnd[yy];
    let best = a, m = -1;
    for (let p = a; p < b; p++) {
      const c = this.data[slot * n + p];
      if (c !== NO_DATA && this.shown(p, c) > m) { m = this.shown(p, c); best = p; }
    }
    const code = this.data[slot * n + best];
    return { port: best, code: m < 0 ? NO_DATA : code, shown: m < 0 ? NO_DATA : m, ts: this.slotTs[slot], range: [a, b] };
  }

  // Display column of a slot (0 = oldest), for overlays.
  colOfSlot(slot) { return this.nCols - 1 - ((this.head - slot + this.nCols) % this.nCols); }

  // The newest column's codes (what the page draws at the right edge), age 0 = newest.
  column(age = 0) {
    const slot = (this.head - age + this.nCols) % this.nCols;
    return this.data.subarray(slot * this.nPorts, (slot + 1) * this.nPorts);
  }
}
