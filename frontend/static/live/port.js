// Port detail: every metric of one port over the live window (plotly.js, served locally), its
// peer, and its switch's collector health. Refreshed every 2 s; gaps stay gaps (null, not zero).
// Charts are titled in operator words with their unit (metrics.js): "Receive rate (Gbit/s)".

import { METRIC_ORDER, METRIC_WORDS, displayUnit, metricTitle } from "./metrics.js";

const root = document.getElementById("port-view");
const charts = document.getElementById("charts");
const speedBps = Number(root.dataset.speedBps || 0);

function chartFor(name) {
  let div = document.getElementById(`chart-${name}`);
  if (!div) {
    div = document.createElement("div");
    div.id = `chart-${name}`;
    div.className = "chart";
    div.dataset.metric = name;
    // keep the reading order (traffic, congestion, loss) whatever order the metrics arrive in
    const rank = (m) => { const i = METRIC_ORDER.indexOf(m); return i < 0 ? METRIC_ORDER.length : i; };
    const after = [...charts.children].find((c) => rank(c.dataset.metric) > rank(name));
    charts.insertBefore(div, after || null);
  }
  return div;
}

async function refresh() {
  const url = `${root.dataset.json}?switch=${encodeURIComponent(root.dataset.switch)}`;
  const resp = await fetch(url, { credentials: "same-origin" });
  if (!resp.ok) return;
  const data = await resp.json();
  const x = data.ts_ms.map((t) => new Date(t));
  for (const [name, values] of Object.entries(data.metrics)) {
    const { div: per, unit } = displayUnit(name, values, speedBps);
    const y = values.map((v) => (v === null ? null : v / per));
    const words = METRIC_WORDS[name], title = `${metricTitle(name)} (${unit})`;
    Plotly.react(chartFor(name), [{ x, y, type: "scatter", mode: "lines", connectgaps: false, name: metricTitle(name),
      line: { width: 1.5 }, hovertemplate: `%{y:.3~f} ${unit}<extra>%{x|%H:%M:%S}</extra>` }], {
      title: { text: words && words.note ? `${title}<br><sub>${words.note}</sub>` : title, font: { size: 13 } },
      height: 220, margin: { l: 70, r: 20, t: 46, b: 44 },
      xaxis: { type: "date", tickformat: "%H:%M:%S", title: { text: "time (local)", standoff: 4 } },
      yaxis: { rangemode: "tozero", title: { text: unit }, tickformat: "~r",
        range: unit === "%" ? [0, 100] : undefined },
    }, { displaylogo: false, responsive: true });
  }
  root.dataset.charts = String(Object.keys(data.metrics).length);
  const h = data.health;
  const el = document.getElementById("health");
  if (!h) el.textContent = "—";
  else if (h.state === "never polled") el.textContent = `${h.switch}: never polled`;
  else {
    const c = h.collector;
    const lastPoll = h.last_poll_ns ? `${((Date.now() * 1e6 - h.last_poll_ns) / 1e9).toFixed(1)} s ago` : "never";
    const errors = `${h.errors_total ?? 0} failed poll${h.errors_total === 1 ? "" : "s"}` +
      (h.failing_for > 0 ? `, failing now (${h.failing_for} in a row)` : "") +
      (h.last_error ? `, last: ${h.last_error}${h.last_error_age_s == null ? "" : ` ${h.last_error_age_s.toFixed(0)} s ago`}` : "");
    el.textContent = `${h.switch}: ${h.state} over ${h.protocol || "?"}, last sample ${h.age_s === null ? "never" : `${h.age_s.toFixed(1)} s ago`}, last poll ${lastPoll} (${h.poll_ms ?? "?"} ms), ${errors}${c ? ` — polled by ${c.process}, shard ${c.shard}${h.lease ? ` (lease ${h.lease.state})` : ""}` : ""}`;
  }
  document.getElementById("port-health").textContent = portHealth(h, root.dataset.port);
}

// Why this port's latest sample withheld a metric (a cached counter, a 32-bit counter that may
// have wrapped twice, a cell the agent does not serve …), and whether ifName moved it.
function portHealth(h, port) {
  if (!h || !port) return "—";
  const parts = [];
  const moved = (h.ports_remapped || {})[port];
  if (moved) parts.push(`re-mapped by ifName: ifIndex ${moved[0]} in the topology, ${moved[1]} on the switch`);
  const note = (h.port_notes || {})[port];
  if (note) {
    const texts = h.notes_text || {};
    parts.push(note.split(", ").map((item) => {
      const [metric, why] = item.split(": ");
      return `${metric} withheld: ${texts[why] || why}`;
    }).join("; "));
  }
  return parts.length ? parts.join(". ") : "every metric measured";
}

refresh();
setInterval(() => { if (!document.hidden) refresh(); }, 2000);
