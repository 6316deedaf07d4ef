// Run page: XHR upload with progress, plotly timeline (rank × time, colour = phase), and the
// per-(layer, phase) traffic matrix heatmap.
const root = document.getElementById("run");
const csrf = document.querySelector("#upload [name=csrfmiddlewaretoken]").value;
const PHASE_COLOURS = {dispatch: "#1f77b4", combine: "#ff7f0e", dispatch_bwd: "#9ecae1", combine_bwd: "#fdae6b",
  allreduce: "#2ca02c", allgather: "#98df8a", reducescatter: "#d62728", send: "#9467bd", recv: "#c5b0d5", other: "#7f7f7f"};

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
    const rejected = body.rejected_count ?? (body.rejected || []).length;
    status.className = rejected ? "status bad" : "status ok";
    status.textContent = `stored ${body.stored}` + (body.duplicates ? `, ${body.duplicates} duplicates` : "") +
      (rejected ? `, ${rejected} rejected (first: ${JSON.stringify(body.rejected[0])})` : "") + " — reload to refresh";
  };
  xhr.onerror = () => { status.className = "status bad"; status.textContent = "upload failed (network)"; };
  status.textContent = "uploading…";
  xhr.send(new FormData(form));
});

async function drawTimeline() {
  const data = await (await fetch(root.dataset.timeline)).json();
  if (!data.rank.length) { document.getElementById("timeline").textContent = "No events yet."; return; }
  const t0 = Math.min(...data.start_ns);
  const byPhase = {};
  data.rank.forEach((rank, i) => {
    const p = data.phase[i];
    const tr = (byPhase[p] ??= {type: "bar", orientation: "h", name: p, x: [], base: [], y: [], text: [],
      marker: {color: PHASE_COLOURS[p] || "#333"}, hovertemplate: "%{text}<extra></extra>"});
    const start = (data.start_ns[i] - t0) / 1e6;
    tr.base.push(start);
    tr.x.push(Math.max((data.end_ns[i] - data.start_ns[i]) / 1e6, 0.01));
    tr.y.push(`rank ${rank}`);
    tr.text.push(`rank ${rank} · step ${data.step[i]} · layer ${data.layer[i]} · ${p}<br>${data.bytes_sent[i] ?? "?"} B sent · ${data.source[i]}`);
  });
  Plotly.newPlot("timeline", Object.values(byPhase), {barmode: "overlay", xaxis: {title: "ms since first event"},
    margin: {l: 70, r: 10, t: 10, b: 40}, legend: {orientation: "h"}}, {responsive: true});
}

async function drawMatrix() {
  const key = document.getElementById("matrix-key").value;
  if (!key) return;
  const [source, layer, phase] = key.split("|");
  const m = await (await fetch(`${root.dataset.matrix}?source=${source}&layer=${layer}&phase=${phase}`)).json();
  const n = m.sent.length, labels = [...Array(n).keys()].map((r) => `${r}`);
  Plotly.newPlot("matrix", [{type: "heatmap", z: m.sent, x: labels, y: labels, colorscale: "YlOrRd",
    hovertemplate: "src %{y} → dst %{x}: %{z} B<extra></extra>"}],
    {xaxis: {title: "destination rank"}, yaxis: {title: "source rank", autorange: "reversed"}, margin: {l: 60, r: 10, t: 10, b: 50}},
    {responsive: true});
}

document.getElementById("matrix-key").addEventListener("change", drawMatrix);
drawTimeline();
drawMatrix();
