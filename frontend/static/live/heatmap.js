// A scrolling canvas heatmap whose cost per update follows the new column, not the window.
//
// Data: a ring buffer of u8 codes (nCols slots × nPorts), newest column at the right edge.
// Update: the canvas shifts its own image left by one column (drawImage onto itself) and paints
// only the new column. Rows: when there are more rows than pixels, each pixel row shows the
// *maximum* of the ports it covers (max-pooling), so a hot port never disappears; codes equal to
// NO_DATA (255) are drawn as a grey checker, never as zero.

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
  }

  // Port count and window shape; empties the buffer.
  configure({ nPorts, nCols, intervalMs }) {
    this.nPorts = nPorts;
    this.nCols = Math.max(1, nCols);
    this.intervalMs = intervalMs;
    this.data = new Uint8Array(this.nCols * nPorts).fill(NO_DATA);
    this.slotTs = new Float64Array(this.nCols).fill(NaN);
    this.head = this.nCols - 1;
    if (this.portRow.length !== nPorts) this.setRows(...CanvasHeatmap.oneRowPerPort(nPorts));
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
    this.redraw();
  }

  newestTs() { return this.slotTs[this.head]; }

  // The one per-update path: O(ports + pixel rows), independent of the window length.
  appendColumn(tsMs, codes) {
    const t0 = performance.now();
    const n = this.nPorts, N = this.nCols, last = this.slotTs[this.head];
    let k = Number.isNaN(last) ? 1 : Math.round((tsMs - last) / this.intervalMs);
    if (k <= 0) { // a late or repeated column: overwrite its slot in place
      const age = -k;
      if (age >= N) return;
      const slot = (this.head - age + N) % N;
      this.data.set(codes, slot * n);
      this.slotTs[slot] = tsMs;
      this.paintColumns(N - 1 - age, 1);
    } else {
      k = Math.min(k, N);
      for (let i = 1; i < k; i++) { // skipped intervals are gaps: no data
        const slot = (this.head + i) % N;
        this.data.fill(NO_DATA, slot * n, (slot + 1) * n);
        this.slotTs[slot] = NaN;
      }
      this.head = (this.head + k) % N;
      this.data.set(codes, this.head * n);
      this.slotTs[this.head] = tsMs;
      const w = this.canvas.width, h = this.canvas.height, dx = k * this.colPx;
      if (dx < w) this.ctx.drawImage(this.canvas, dx, 0, w - dx, h, 0, 0, w - dx, h);
      this.paintColumns(N - k, k);
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

  // Max over each pixel row's ports, ignoring no data; all-missing stays NO_DATA.
  poolColumn(offset, out) {
    const d = this.data, s = this.pixStart, e = this.pixEnd;
    for (let y = 0; y < out.length; y++) {
      let m = -1;
      for (let p = s[y]; p < e[y]; p++) {
        const c = d[offset + p];
        if (c !== NO_DATA && c > m) m = c;
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
      if (c !== NO_DATA && c > m) { m = c; best = p; }
    }
    return { port: best, code: m < 0 ? NO_DATA : m, ts: this.slotTs[slot], range: [a, b] };
  }

  // The newest column's codes (what the page draws at the right edge), age 0 = newest.
  column(age = 0) {
    const slot = (this.head - age + this.nCols) % this.nCols;
    return this.data.subarray(slot * this.nPorts, (slot + 1) * this.nPorts);
  }
}
