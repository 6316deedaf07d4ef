// A run's report and the comparison of two runs: the charts, drawn from JSON the server put in the
// page (<script type="application/json">). A classic script, not a module: the report is one file
// opened from disk (file://), where it is inlined next to plotly.js and needs no server.
// Written for plotly.js 4.1.1: titles are objects ({text}), "Viridis" is one of its colour scales.
(function () {
  "use strict";
  const COLOURS = "Viridis";
  const PHASE_COLOUR = { dispatch: "#1f77b4", combine: "#ff7f0e", dispatch_bwd: "#6baed6", combine_bwd: "#fdae6b",
    allreduce: "#2ca02c" };
  const ROW_PX = 14;
  // ticks in SI prefixes (800M, 100G): plotly's default writes a billion as "B", read as bytes here

  function fmtBytes(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "no data";
    for (const [f, u] of [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"]]) if (v >= f) return `${(v / f).toPrecision(3)} ${u}`;
    return `${Math.round(v)} B`;
  }
  function pct(v) { return v === null || v === undefined ? "?" : `${(100 * v).toFixed(1)} %`; }
  function maxOf(z) {
    let m = 0;
    for (const row of z) for (const v of row) if (v !== null && v > m) m = v;
    return m;
  }

  // ports × (step, layer, phase) bytes; ``zmax`` shared when two runs are drawn side by side
  function heatmap(el, ph, title, zmax) {
    const h = ph.heatmap;
    const top = zmax ?? maxOf(h.z);
    Plotly.newPlot(el, [{
      type: "heatmap", x: h.columns, y: h.rows, z: h.z, colorscale: COLOURS, zmin: 0, zmax: top || 1,
      hoverongaps: false, colorbar: { title: { text: "bytes per phase (B)", side: "right" }, exponentformat: "SI" },
      hovertemplate: "%{y}<br>%{x}: %{z:.4s}B<extra></extra>",
    }], {
      title: { text: title }, height: Math.max(360, h.rows.length * ROW_PX + 240),
      xaxis: { title: { text: "column: step s · layer L · phase — time →" }, type: "category", tickangle: -60,
        automargin: true, tickfont: { size: 9 } },
      yaxis: { title: { text: "port (switch:port · what it faces)" }, type: "category", autorange: "reversed",
        tickmode: "array", tickvals: h.rows, ticktext: h.rows, automargin: true, tickfont: { size: 10 } },
      margin: { t: 60 },
    }, { responsive: true, displaylogo: false });
    el.dataset.drawn = "1";
  }

  // per column the hottest port; filled: the lead over the runner-up makes it a claim, open: ambiguous
  function trajectory(el, ph, title) {
    const t = ph.trajectory;
    const cols = t.map((p) => p.column);
    const rows = [...new Map(t.map((p) => [p.port_index, p.port])).entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
    const kinds = [...new Set(t.map((p) => p.phase))];
    const traces = kinds.map((kind) => {
      const pts = t.filter((p) => p.phase === kind);
      return {
        type: "scatter", mode: "lines+markers", name: kind, x: pts.map((p) => p.column), y: pts.map((p) => p.port),
        text: pts.map((p) => `${p.column}: ${p.port} (${p.dir})<br>${fmtBytes(p.bytes)} · lead over ${p.runner_up}: ${pct(p.lead_rel)}` +
          (p.claimed ? "" : "<br>ambiguous: lead too small to name one port")),
        hoverinfo: "text", line: { color: PHASE_COLOUR[kind] ?? "#7f7f7f", width: 1, dash: "dot" },
        marker: { color: PHASE_COLOUR[kind] ?? "#7f7f7f", size: pts.map((p) => 6 + 14 * Math.min(1, p.lead_rel ?? 0)),
          symbol: pts.map((p) => (p.claimed ? "circle" : "circle-open")), line: { width: 1.5 } },
      };
    });
    Plotly.newPlot(el, traces, {
      title: { text: title }, height: Math.max(300, rows.length * 22 + 220),
      xaxis: { title: { text: "column: step s · layer L · phase — time →" }, type: "category", categoryorder: "array",
        categoryarray: cols, tickangle: -60, automargin: true, tickfont: { size: 9 } },
      yaxis: { title: { text: "hottest port (switch:port · what it faces)" }, type: "category", categoryorder: "array",
        categoryarray: rows, automargin: true, tickfont: { size: 10 } },
      legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom" }, margin: { t: 70 },
    }, { responsive: true, displaylogo: false });
    el.dataset.drawn = "1";
  }

  // bytes per (layer, phase); one bar per run when two are compared
  function totals(el, series, title) {
    const traces = series.map((s) => ({
      type: "bar", name: s.name, x: s.rows.map((r) => `L${r.layer} ${r.phase}`), y: s.rows.map((r) => r.bytes),
      hovertemplate: "%{x}: %{y:.4s}B<extra>" + s.name + "</extra>",
    }));
    Plotly.newPlot(el, traces, {
      title: { text: title }, height: 360, barmode: "group",
      xaxis: { title: { text: "layer · phase" }, type: "category", automargin: true },
      yaxis: { title: { text: "bytes sent (B)" }, rangemode: "tozero", exponentformat: "SI" }, margin: { t: 60 },
      // a legend only for two runs (plotly.js 4.1.1's validate trips on a legend it did not draw)
      ...(series.length > 1 ? { showlegend: true, legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom" } } : {}),
    }, { responsive: true, displaylogo: false });
    el.dataset.drawn = "1";
  }

  function data(id) { return JSON.parse(document.getElementById(id).textContent); }

  function drawReport() {
    const d = data("report-data");
    const ph = d.phases;
    const span = ph.window ? `steps ${ph.window.steps[0]}–${ph.window.steps[1]}` : "";
    if (ph.heatmap) {
      heatmap(document.getElementById("heatmap"), ph,
        `${ph.view[0].toUpperCase()}${ph.view.slice(1)} bytes per port and phase (B) · ${span} · routing ${ph.routing}`);
      trajectory(document.getElementById("trajectory"), ph, `Hot-port trajectory · ${span} (marker size: lead over the runner-up, %)`);
    }
    if (ph.totals && ph.totals.length) {
      totals(document.getElementById("totals"), [{ name: d.run.name, rows: ph.totals }], `Bytes sent per layer and phase (B) · ${span}`);
    }
  }

  function drawCompare() {
    const d = data("compare-data");
    const sides = [d.a, d.b];
    const shared = Math.max(...sides.map((s) => (s.phases.heatmap ? maxOf(s.phases.heatmap.z) : 0)));
    sides.forEach((s, i) => {
      const el = document.getElementById(`heatmap-${"ab"[i]}`);
      const ph = s.phases;
      if (!ph.heatmap) return;
      heatmap(el, ph, `Run ${s.run.id} ${s.run.name}: ${ph.view} bytes per port and phase (B) · steps ${ph.window.steps[0]}–${ph.window.steps[1]}`, shared);
    });
    const series = sides.filter((s) => s.phases.totals && s.phases.totals.length)
      .map((s) => ({ name: `run ${s.run.id} ${s.run.name}`, rows: s.phases.totals }));
    if (series.length) totals(document.getElementById("totals"), series, "Bytes sent per layer and phase (B), each run over its report window");
  }

  window.fabricmonReport = { heatmap, trajectory, totals };
  document.addEventListener("DOMContentLoaded", () => {
    if (document.getElementById("report-data")) drawReport();
    if (document.getElementById("compare-data")) drawCompare();
  });
})();
