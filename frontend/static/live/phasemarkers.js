// Phase markers of a selected run along the live heatmap's time axis: a thin strip under the
// canvas, one lane per phase kind, each (step, layer, phase) drawn over its median span across ranks.
//
// They arrive on the heatmap's own socket: selecting a run sends {type: "markers", run}; the server
// answers with every marker of the window (reset), then only new or moved markers and clock-gate
// changes (fabricmon/phases/stream.py MarkerFeed). Nothing is polled.
//
// One mark per phase at any zoom: MoE phases last milliseconds and a heatmap column a poll
// interval (a 5 min window puts 0.5 s in a pixel), so a step's phases fall in one or two pixels
// and used to draw as one tick ("112 phase markers", one tick). Marks are laid out apart: each
// keeps its time order and sits as near its true time as a minimum spacing allows (a 1-D dodge:
// greedy left to right, then each pushed cluster centred on its true times); a bracket under the
// lanes spans the cluster's true times, so where the phases really are stays visible. When the
// window holds more phases than the strip has pixels, marks get one pixel each and the info line
// says how many share one. The layout depends on every neighbour, so the strip is laid out and
// repainted whole on a change: it is 3 lanes of a few hundred pixels and at most MAX_MARKERS
// marks — far below a heatmap column's cost.
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
const LANE_PX = 6, RULE_PX = 2, BRACKET_PX = 4, MIN_GAP_PX = 3;
export const STRIP_HEIGHT = 3 * LANE_PX + RULE_PX + BRACKET_PX;

// Centres for marks at true positions ``x`` (sorted), at least ``gap`` apart, within [0, width]:
// greedy push right, then every pushed block shifted left to centre on its true positions, without
// overlapping the block before it.
export function dodge(x, gap, width) {
  const n = x.length, out = new Float64Array(n);
  const blocks = []; // [first, last] of runs that touch
  for (let i = 0; i < n; i++) {
    out[i] = i && out[i - 1] + gap > x[i] ? out[i - 1] + gap : x[i];
    if (i && out[i] === out[i - 1] + gap) blocks.at(-1)[1] = i; else blocks.push([i, i]);
  }
  let floor = -Infinity;
  for (const [a, b] of blocks) {
    let want = 0, have = 0;
    for (let i = a; i <= b; i++) { want += x[i]; have += out[i]; }
    const shift = Math.max(floor + gap - out[a], Math.min(0, (want - have) / (b - a + 1)));
    for (let i = a; i <= b; i++) out[i] += shift;
    floor = out[b];
  }
  const over = n ? out[n - 1] - width + gap / 2 : 0; // keep the newest inside the right edge
  if (over > 0) for (let i = 0; i < n; i++) out[i] -= over;
  return out;
}

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
    this.onInfo?.({ verdict: data.verdict, reason: data.reason, clock: data.clock, counters: data.counters, gate: data.gate,
      count: this.byKey.size, name: data.name, perPixel: this.perPixel });
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
    if (paint) this.redraw();
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
    this.canvas.dataset.drawn = "0";
    if (!this.runId || Number.isNaN(this.drawnNewest)) return;
    this.paint();
  }

  // After each heatmap column: the strip follows the heatmap's right edge (laid out again).
  follow() {
    const newest = this.heatmap.newestTs();
    if (Number.isNaN(newest) || newest === this.drawnNewest) return;
    if (!this.runId) { this.drawnNewest = newest; return; }
    this.redraw();
  }

  // A span changed: the layout depends on neighbours, so the strip is laid out whole.
  paintSpan() { this.redraw(); }

  // Lay out every marker of the window apart (``dodge``, per lane: a lane's marks never share a
  // pixel) and paint the strip; under the lanes, per run of marks moved off their times, a light
  // line over where they are drawn and a dark mark over when they really were.
  paint() {
    if (!this.runId || Number.isNaN(this.drawnNewest)) return;
    const ctx = this.ctx, W = this.canvas.width;
    const span = this.heatmap.nCols * this.heatmap.intervalMs;
    const inView = this.overlapping(this.drawnNewest - span, this.drawnNewest + 1);
    const lanes = [[], [], []];
    inView.forEach((m, i) => lanes[laneOf(m.phase)].push(i));
    const densest = Math.max(1, ...lanes.map((l) => l.length));
    const gap = Math.max(1, Math.min(MIN_GAP_PX, Math.floor(W / densest)));
    const bar = Math.max(1, gap - 1);
    const at = new Float64Array(inView.length);
    this.paints++;
    ctx.clearRect(0, 0, W, this.canvas.height);
    const flagged = this.verdict !== "pass";
    const yB = 3 * LANE_PX + RULE_PX + 1;
    let drawn = 0;
    for (const lane of lanes) {
      const trueX = Float64Array.from(lane, (i) => (this.xOf(inView[i].start_ms) + this.xOf(inView[i].end_ms)) / 2);
      const x = dodge(trueX, gap, W);
      let run = null; // [drawn lo, drawn hi, true lo, true hi]
      const bracket = () => {
        if (!run || run[1] - run[0] < 2 * gap) return;
        ctx.globalAlpha = 1;
        ctx.fillStyle = "#c9ced8"; ctx.fillRect(Math.floor(run[0]), yB + 1, Math.ceil(run[1] - run[0]) + 1, 1);
        ctx.fillStyle = "#3b4252"; ctx.fillRect(Math.floor(run[2]), yB, Math.max(2, Math.ceil(run[3] - run[2])), BRACKET_PX - 1);
      };
      lane.forEach((i, j) => {
        const m = inView[i], px = Math.round(x[j] - bar / 2);
        at[i] = x[j];
        if (run && (x[j] - run[1] <= gap + 0.5)) { run[1] = x[j]; run[2] = Math.min(run[2], trueX[j]); run[3] = Math.max(run[3], trueX[j]); }
        else { bracket(); run = [x[j], x[j], trueX[j], trueX[j]]; }
        if (px + bar < 0 || px >= W) return;
        ctx.globalAlpha = flagged ? 0.45 : 1;
        ctx.fillStyle = colourOf(m.phase);
        ctx.fillRect(px, laneOf(m.phase) * LANE_PX, bar, LANE_PX - 1);
        if (flagged) { ctx.globalAlpha = 1; ctx.fillStyle = "#c62828"; ctx.fillRect(px, 3 * LANE_PX, bar, RULE_PX); }
        drawn++;
      });
      bracket();
    }
    ctx.globalAlpha = 1;
    this.layout = { markers: inView, x: at, bar };
    this.canvas.dataset.drawn = String(drawn);
    this.canvas.dataset.gap = String(gap);
    this.perPixel = densest > W ? densest / W : 0;
  }

  overlapping(t0, t1) {
    const s = this.sorted, from = t0 - this.maxDurMs;
    let lo = 0, hi = s.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (s[mid].start_ms < from) lo = mid + 1; else hi = mid; }
    const out = [];
    for (let i = lo; i < s.length && s[i].start_ms <= t1; i++) if (s[i].end_ms >= t0) out.push(s[i]);
    return out;
  }

  // Markers drawn under canvas pixel x (their laid-out place, ± one mark), for the hover label.
  pick(x) {
    const L = this.layout;
    if (!L) return [];
    const reach = Math.max(1.5, L.bar);
    return L.markers.filter((m, i) => Math.abs(L.x[i] - x) <= reach);
  }

  // The laid-out centre of a marker (by key), for tests and the hover.
  placeOf(step, layer, phase) {
    const L = this.layout;
    const i = L ? L.markers.findIndex((m) => m.step === step && m.layer === layer && m.phase === phase) : -1;
    return i < 0 ? null : L.x[i];
  }
}
