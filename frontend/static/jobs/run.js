// Run page: XHR upload with progress, the server-aggregated timeline (timeline.js: ranks × time,
// colour = phase), and the per-(layer, phase) traffic matrix heatmap.
import { RunTimeline } from "./timeline.js";

const root = document.getElementById("run");
const csrf = document.querySelector("#upload [name=csrfmiddlewaretoken]").value;

// A queued import's progress: poll its status URL until it is done or failed. ``show`` gets the
// upload row (state, bytes_read of size_bytes, events stored/duplicate/rejected, error).
function followImport(url, show) {
  const poll = async () => {
    let row;
    try { row = await (await fetch(url, {headers: {Accept: "application/json"}})).json(); }
    catch (_) { setTimeout(poll, 2000); return; }  // a blip: ask again
    show(row);
    if (row.state === "queued" || row.state === "running") setTimeout(poll, 1000);
  };
  poll();
}

function importText(row) {
  const pct = row.size_bytes ? Math.min(100, Math.round((100 * row.bytes_read) / row.size_bytes)) : 0;
  const counts = `${row.events_stored} stored` + (row.events_duplicate ? `, ${row.events_duplicate} duplicates` : "") +
    (row.events_rejected ? `, ${row.events_rejected} rejected` : "");
  if (row.state === "queued") return "import queued — waiting for a worker";
  const files = row.files_total ? ` · ${row.files_done} files` : "";
  if (row.state === "running") return `importing: ${pct}% read${files} · ${counts}`;
  if (row.state === "failed") return `import failed: ${row.error}`;
  return `imported${files}: ${counts}` + reportText(row.report) + (row.error ? ` (first errors: ${row.error})` : "") +
    " — reload to refresh for the full report";
}

// One line of the import report: what was recognised per collective, and what could not be used.
function reportText(report) {
  if (!report || !report.recognised) return "";
  const parts = report.recognised.map((r) => `${r.count} ${r.collective}`);
  const unusable = Object.entries(report.unusable || {}).map(([what, n]) => `${n} ${what}`);
  return ` · recognised ${parts.join(", ") || "nothing"}` + (unusable.length ? ` · not used: ${unusable.join("; ")}` : "");
}

document.getElementById("upload").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const form = ev.target, bar = document.getElementById("upload-progress"), status = document.getElementById("upload-status");
  const xhr = new XMLHttpRequest();
  xhr.open("POST", root.dataset.upload);
  xhr.setRequestHeader("X-CSRFToken", csrf);
  xhr.upload.onprogress = (e) => { if (e.lengthComputable) bar.value = (100 * e.loaded) / e.total; };
  xhr.onload = () => {
    let body = {};
    try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
    bar.value = 100;
    if (xhr.status >= 400 && body.error) { status.className = "status bad"; status.textContent = `${body.field}: ${body.error}`; return; }
    if (xhr.status === 202 && body.status_url) {  // queued: the bar now shows the import's progress
      bar.value = 0;
      status.className = "status";
      followImport(body.status_url, (row) => {
        bar.value = row.state === "done" ? 100 : row.size_bytes ? (100 * row.bytes_read) / row.size_bytes : 0;
        status.className = row.state === "failed" || row.events_rejected ? "status bad" : row.state === "done" ? "status ok" : "status";
        status.textContent = importText(row);
      });
      return;
    }
    const rejected = body.rejected_count ?? (body.rejected || []).length;
    status.className = rejected ? "status bad" : "status ok";
    status.textContent = `stored ${body.stored}` + (body.duplicates ? `, ${body.duplicates} duplicates` : "") +
      (rejected ? `, ${rejected} rejected (first: ${JSON.stringify(body.rejected[0])})` : "") + reportText(body.report) +
      " — reload to refresh";
  };
  xhr.onerror = () => { status.className = "status bad"; status.textContent = "upload failed (network)"; };
  status.textContent = "uploading…";
  xhr.send(new FormData(form));
});

// imports still queued or running when the page was loaded keep updating in the list
document.querySelectorAll("#uploads li[data-status]").forEach((li) => {
  const state = li.querySelector(".upload-state");
  followImport(li.dataset.status, (row) => { li.dataset.state = row.state; state.textContent = importText(row); });
});

// Bytes in decimal units scaled to the largest cell, so the colour bar reads "12.3" of "GB", not "1.2e10".
const BYTE_UNITS = [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"], [1, "B"]];
function byteUnit(max) { return BYTE_UNITS.find(([div]) => max >= div) || BYTE_UNITS[BYTE_UNITS.length - 1]; }

async function drawMatrix() {
  const select = document.getElementById("matrix-key"), key = select.value;
  if (!key) {  // no matrix yet: say so instead of leaving an empty chart's space
    const div = document.getElementById("matrix");
    div.style.height = "auto";
    div.textContent = "No traffic matrix yet: the job's all-to-all events (probe, API or an uploaded trace) make one per step, layer and phase.";
    div.className = "hint";
    return;
  }
  const [source, layer, phase] = key.split("|");
  const params = new URLSearchParams({source, layer, phase});
  const resp = await fetch(`${root.dataset.matrix}?${params}`);
  const m = await resp.json();
  const steps = document.getElementById("matrix-steps");
  if (!resp.ok) { steps.textContent = m.error || `error ${resp.status}`; return; }
  const over = m.steps_total > m.steps ? `the newest ${m.steps} of ${m.steps_total} steps` : `${m.steps} step${m.steps === 1 ? "" : "s"}`;
  steps.textContent = `bytes each source rank sent to each destination rank, summed over ${over}`;
  const n = m.sent.length, ranks = [...Array(n).keys()];
  const max = Math.max(0, ...m.sent.map((row) => Math.max(...row)));
  const [div, unit] = byteUnit(max);
  const z = m.sent.map((row) => row.map((v) => v / div));
  const label = select.options[select.selectedIndex].textContent;
  const axis = (title) => ({title: {text: title}, dtick: n <= 32 ? 1 : undefined, zeroline: false, constrain: "domain"});
  Plotly.react("matrix", [{type: "heatmap", z, x: ranks, y: ranks, colorscale: "YlOrRd", reversescale: true, zmin: 0, zmax: max / div || 1,
    colorbar: {title: {text: `sent (${unit})`, side: "right"}},
    hovertemplate: `rank %{y} → rank %{x}: %{z:.3~f} ${unit}<extra></extra>`}],
    {title: {text: `Bytes sent, source → destination rank<br><sub>${label} · ${over}</sub>`, font: {size: 14}},
      xaxis: axis("destination rank"), yaxis: {...axis("source rank"), autorange: "reversed", scaleanchor: "x"},
      margin: {l: 60, r: 10, t: 60, b: 50}},
    {responsive: true, displaylogo: false});
  document.getElementById("matrix").dataset.drawn = key;
}

document.getElementById("matrix-key").addEventListener("change", drawMatrix);
new RunTimeline(document.getElementById("timeline"), root.dataset.timeline).load();
drawMatrix();
