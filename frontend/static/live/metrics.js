// What each frame metric is called on the pages, in an operator's words, and how its values are
// shown: a rate in bit/s is drawn in Gbit/s (or Mbit/s …, scaled to the port), a fraction in %.
// One table for every page that names a metric (the port page; the heatmap may use it too).

export const METRIC_WORDS = {
  util: {title: "Utilization", unit: "%", kind: "fraction", note: "of line rate, the larger of receive and transmit"},
  in_bps: {title: "Receive rate", unit: "bit/s", kind: "bits", note: "from the peer into the switch port"},
  out_bps: {title: "Transmit rate", unit: "bit/s", kind: "bits", note: "out of the switch port to the peer"},
  ecn_marked_ps: {title: "ECN-marked packets", unit: "packets/s", kind: "count", note: "the queue passed its marking threshold"},
  pfc_pause_ps: {title: "PFC pause frames", unit: "frames/s", kind: "count", note: "pauses asked of the upstream sender"},
  pfc_paused_fraction: {title: "Time paused by PFC", unit: "%", kind: "fraction", note: "share of the poll interval"},
  watermark_bytes: {title: "Queue watermark", unit: "B", kind: "bytes", note: "peak queue occupancy since the last read"},
  drops_ps: {title: "Queue drops", unit: "packets/s", kind: "count", note: ""},
  out_discards_ps: {title: "Transmit discards", unit: "packets/s", kind: "count", note: ""},
  in_discards_ps: {title: "Receive discards", unit: "packets/s", kind: "count", note: ""},
  in_errors_ps: {title: "Receive errors", unit: "packets/s", kind: "count", note: "bad frames from the peer"},
};
// The order charts are shown in: traffic first, then congestion signals, then loss.
export const METRIC_ORDER = Object.keys(METRIC_WORDS);

const BIT_UNITS = [[1e12, "Tbit/s"], [1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"], [1, "bit/s"]];
const BYTE_UNITS = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"], [1, "B"]];

// {div, unit} to show ``metric`` in: bit rates by the port's speed when known (a 400G port reads in
// Gbit/s even when idle), else by the largest value; bytes by the largest value; fractions in %.
export function displayUnit(metric, values, speedBps = 0) {
  const w = METRIC_WORDS[metric] || {unit: "", kind: "count"};
  const max = Math.max(0, ...values.filter((v) => v !== null && Number.isFinite(v)));
  if (w.kind === "fraction") return {div: 0.01, unit: "%"};
  if (w.kind === "bits") {
    const [div, unit] = BIT_UNITS.find(([d]) => (speedBps || max) >= d) || BIT_UNITS[BIT_UNITS.length - 1];
    return {div, unit};
  }
  if (w.kind === "bytes") {
    const [div, unit] = BYTE_UNITS.find(([d]) => max >= d) || BYTE_UNITS[BYTE_UNITS.length - 1];
    return {div, unit};
  }
  return {div: 1, unit: w.unit};
}

export function metricTitle(metric) { return (METRIC_WORDS[metric] || {title: metric}).title; }
