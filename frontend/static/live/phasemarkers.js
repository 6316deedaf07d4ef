// Phase markers of a selected run along the live heatmap's time axis: a thin strip under the
// canvas, one lane per phase kind, each (step, layer, phase) drawn over its median span across ranks.
//
// They arrive on the heatmap's own socket: selecting a run sends {type: "markers", run}; the server
// answers with every marker of the window (reset), then only new or moved markers and clock-gate
// changes (fabricmon/phases/stream.py MarkerFeed). Nothing is polled.
//
// Cost per update follows the new column, like the heatmap: when the heatmap advances k columns the
// strip shifts its own image left by the same pixels and paints only the new time span; markers
// fetched later paint only their own span. The whole strip is repainted only on a window load, a
// resize or a run change.
//
// Alignment: event times are on the server's clock (host time + the probe's exchanged offset) and
// the answer carries the clock gate (fabricmon/core/gates.py clock_gate). Unless it passes, the
// markers are drawn flagged (faded, a red rule under them) and the reason is shown beside them —
// never as if aligned.

const LANES = { dispatch: 0, dispatch_bwd: 0, combine: 1, combine_bwd: 1 }; // anything else: lane 2
const COLOURS = {
  dispatch: "#1f77b4", dispatch_bwd: "#6baed6", combine: "#ff7f0e", combine_bwd: "#fdae6b",
  allreduce: "#2ca02c", allgather: "#17becf", reducescatter: "#9467bd", send: "#8c564b", recv: "#8c564b",
  other: "#7f7f7f",
};
const LANE_PX = 6, RULE_PX = 2;
export const STRIP_HEIGHT = 3 * LANE_PX + RULE_PX;

export function laneOf(phase) { return LANES[phase] ?? 2; }
export function colourOf(phase) { return COLOURS[phase] ?? COLOURS.other; }

export class PhaseStrip {
  constructor(canvas, heatmap, { request, onInfo }) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.heatmap = heatmap;
    this.request = request; // (runId | null) → asks the socket for this run's markers
    this.onInfo = onInfo; // ({verdict, reason, clock, count, name}) → shows the label beside the strip
    this.runId = null;
    this.byKey = new Map(); // "step/layer/phase" → marker
    this.sorted = []; // markers by start_ms (kept sorted on merge)
    this.maxDurMs = 0;
    this.verdict = null;
    this.reason = "";
    this.drawnNewest = NaN; // heatmap time the strip's right edge shows
    this.messages = 0; // markers messages taken (read by tests)
    this.paints = 0; // spans painted (read by tests: per update one span, not the window)
    canvas.height = STRIP_HEIGHT;
  }

  select(runId) {
    this.runId = runId || null;
    this.byKey.clear(); this.sorted = []; this.maxDurMs = 0; this.verdict = null;
    this.canvas.dataset.markers = "0";
    this.canvas.dataset.verdict = "";
    this.redraw();
    this.request(this.runId);
    if (!this.runId) this.onInfo?.(null);
  }

  // One "markers" message from the socket: all of the window on reset, else new or moved ones.
  onMarkers(data) {
    if (!this.runId || String(data.run) !== String(this.runId)) return; // an answer for an older choice
    this.messages++;
    if (data.reset) { this.byKey.clear(); this.sorted = []; this.maxDurMs = 0; }
    const repaint = data.reset || data.verdict !== this.verdict;
    this.verdict = data.verdict;
    this.reason = data.reason;
    this.canvas.dataset.verdict = data.verdict;
    if (repaint) { this.merge(data.markers, false); this.redraw(); } else this.merge(data.markers, true);
    this.canvas.dataset.markers = String(this.byKey.size);
    this.onInfo?.({ verdict: data.verdict, reason: data.reason, clock: data.clock, count: this.byKey.size, name: data.name });
  }

  // New or moved markers go in; each paints its own old and new span (nothing else is repainted).
  merge(markers, paint) {
    const spans = [];
    for (const m of markers) {
      const key = `${m.step}/${m.layer}/${m.phase}`;
      const old = this.byKey.get(key);
      if (old && old.start_ms === m.start_ms && old.end_ms === m.end_ms) continue;
      if (old) { spans.push([old.start_ms, old.end_ms]); Object.assign(old, m); } else { this.byKey.set(key, m); this.sorted.push(m); }
      this.maxDurMs = Math.max(this.maxDurMs, m.end_ms - m.start_ms);
      spans.push([m.start_ms, m.end_ms]);
    }
    if (!spans.length) return;
    this.sorted.sort((a, b) => a.start_ms - b.start_ms);
    this.prune();
    if (paint) for (const [a, b] of spans) this.paintSpan(a, b);
  }

  // Markers older than the window are dropped, so memory follows the window.
  prune() {
    const oldest = this.heatmap.newestTs() - this.heatmap.nCols * this.heatmap.intervalMs - this.maxDurMs;
    let cut = 0;
    while (cut < this.sorted.length && this.sorted[cut].end_ms < oldest) cut++;
    if (!cut) return;
    for (const m of this.sorted.slice(0, cut)) this.byKey.delete(`${m.step}/${m.layer}/${m.phase}`);
    this.sorted = this.sorted.slice(cut);
  }

  // Same mapping as the heatmap: the newest column ends at the right edge at its frame time.
  xOf(tMs) {
    const hm = this.heatmap;
    return this.canvas.width - ((this.drawnNewest - tMs) / hm.intervalMs) * hm.colPx;
  }
  tOf(x) { return this.drawnNewest - ((this.canvas.width - x) / this.canvas.width) * this.heatmap.nCols * this.heatmap.intervalMs; }

  resize() { this.canvas.width = this.heatmap.canvas.width; this.canvas.height = STRIP_HEIGHT; }

  redraw() {
    this.drawnNewest = this.heatmap.newestTs();
    this.ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    if (!this.runId || Number.isNaN(this.drawnNewest)) return;
    const span = this.heatmap.nCols * this.heatmap.intervalMs;
    this.paintSpan(this.drawnNewest - span, this.drawnNewest);
  }

  // After each heatmap column: shift by the columns it advanced, paint only the new span.
  follow() {
    const newest = this.heatmap.newestTs();
    if (Number.isNaN(this.drawnNewest)) { this.redraw(); return; }
    const k = Math.round((newest - this.drawnNewest) / this.heatmap.intervalMs);
    if (k <= 0 || !this.runId) { if (k > 0) this.drawnNewest = newest; return; }
    const w = this.canvas.width, h = this.canvas.height, dx = Math.min(w, k * this.heatmap.colPx);
    if (dx < w) this.ctx.drawImage(this.canvas, dx, 0, w - dx, h, 0, 0, w - dx, h);
    const prev = this.drawnNewest;
    this.drawnNewest = newest;
    this.ctx.clearRect(w - dx, 0, dx, h);
    this.paintSpan(prev, newest);
  }

  // Markers overlapping [t0, t1] (binary search on start), clipped to that span's pixels.
  paintSpan(t0, t1) {
    if (!this.runId || Number.isNaN(this.drawnNewest)) return;
    const ctx = this.ctx, H = this.canvas.height;
    const x0 = Math.max(0, Math.floor(this.xOf(t0))), x1 = Math.min(this.canvas.width, Math.ceil(this.xOf(t1)));
    if (x1 <= x0) return;
    this.paints++;
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, 0, x1 - x0, H); ctx.clip();
    ctx.clearRect(x0, 0, x1 - x0, H);
    const flagged = this.verdict !== "pass";
    ctx.globalAlpha = flagged ? 0.45 : 1;
    for (const m of this.overlapping(t0 - 1, t1 + 1)) {
      // whole pixels: a 40 ms phase is a fraction of a column, and must not smear into a faint blend
      const a = Math.floor(this.xOf(m.start_ms)), b = Math.max(a + 1, Math.ceil(this.xOf(m.end_ms)));
      ctx.fillStyle = colourOf(m.phase);
      ctx.fillRect(a, laneOf(m.phase) * LANE_PX, b - a, LANE_PX - 1);
      if (flagged) { ctx.globalAlpha = 1; ctx.fillStyle = "#c62828"; ctx.fillRect(a, 3 * LANE_PX, b - a, RULE_PX); ctx.globalAlpha = 0.45; }
    }
    ctx.restore();
  }

  overlapping(t0, t1) {
    const s = this.sorted, from = t0 - this.maxDurMs;
    let lo = 0, hi = s.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (s[mid].start_ms < from) lo = mid + 1; else hi = mid; }
    const out = [];
    for (let i = lo; i < s.length && s[i].start_ms <= t1; i++) if (s[i].end_ms >= t0) out.push(s[i]);
    return out;
  }

  // Markers under canvas pixel x (± one pixel), for the hover label.
  pick(x) {
    const pxMs = (this.heatmap.nCols * this.heatmap.intervalMs) / this.canvas.width;
    const t = this.tOf(x);
    return this.overlapping(t - pxMs, t + pxMs);
  }
}
