// Port detail: every metric of one port over the live window (plotly.js, served locally), its
// peer, and its switch's collector health. Refreshed every 2 s; gaps stay gaps (null, not zero).

const root = document.getElementById("port-view");
const charts = document.getElementById("charts");
const PCT = new Set(["util", "pfc_paused_fraction"]);

async function refresh() {
  const url = `${root.dataset.json}?switch=${encodeURIComponent(root.dataset.switch)}`;
  const resp = await fetch(url, { credentials: "same-origin" });
  if (!resp.ok) return;
  const data = await resp.json();
  const x = data.ts_ms.map((t) => new Date(t));
  for (const [name, values] of Object.entries(data.metrics)) {
    let div = document.getElementById(`chart-${name}`);
    if (!div) {
      div = document.createElement("div");
      div.id = `chart-${name}`;
      div.className = "chart";
      charts.append(div);
    }
    const pct = PCT.has(name);
    const y = pct ? values.map((v) => (v === null ? null : v * 100)) : values;
    Plotly.react(div, [{ x, y, type: "scatter", mode: "lines", connectgaps: false, name, line: { width: 1.5 } }], {
      title: { text: `${name} (${pct ? "%" : data.units[name]})`, font: { size: 13 } },
      height: 200, margin: { l: 60, r: 20, t: 30, b: 30 }, xaxis: { type: "date", tickformat: "%H:%M:%S" }, yaxis: { tickformat: pct ? ".1f" : "~s", rangemode: "tozero" },
    }, { displaylogo: false, responsive: true });
  }
  const h = data.health;
  const el = document.getElementById("health");
  if (!h) el.textContent = "—";
  else if (h.state === "never polled") el.textContent = `${h.switch}: never polled`;
  else {
    const c = h.collector;
    const lastPoll = h.last_poll_ns ? `${((Date.now() * 1e6 - h.last_poll_ns) / 1e9).toFixed(1)} s ago` : "never";
    el.textContent = `${h.switch}: ${h.state}, last success ${h.age_s === null ? "never" : `${h.age_s.toFixed(1)} s ago`}, last poll ${lastPoll}, poll ${h.poll_ms ?? "?"} ms, errors ${h.errors ?? 0}${h.last_error ? ` (${h.last_error})` : ""}${c ? ` — polled by ${c.process}, shard ${c.shard}, lease ${c.lease}` : ""}`;
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
