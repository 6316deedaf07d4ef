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

async function drawMatrix() {
  const key = document.getElementById("matrix-key").value;
  if (!key) return;
  const [source, layer, phase] = key.split("|");
  const m = await (await fetch(`${root.dataset.matrix}?source=${source}&layer=${layer}&phase=${phase}`)).json();
  document.getElementById("matrix-steps").textContent = m.steps_total > m.steps
    ? `bytes sent src → dst, summed over the newest ${m.steps} of ${m.steps_total} steps`
    : `bytes sent src → dst, summed over ${m.steps} step${m.steps === 1 ? "" : "s"}`;
  const n = m.sent.length, labels = [...Array(n).keys()].map((r) => `${r}`);
  Plotly.newPlot("matrix", [{type: "heatmap", z: m.sent, x: labels, y: labels, colorscale: "YlOrRd",
    hovertemplate: "src %{y} → dst %{x}: %{z} B<extra></extra>"}],
    {xaxis: {title: {text: "destination rank"}}, yaxis: {title: {text: "source rank"}, autorange: "reversed"}, margin: {l: 60, r: 10, t: 10, b: 50}},
    {responsive: true});
}

document.getElementById("matrix-key").addEventListener("change", drawMatrix);
new RunTimeline(document.getElementById("timeline"), root.dataset.timeline).load();
drawMatrix();
