// Switch and collector health, readable at a glance: problems first, refreshed every 2 s. Each row
// says who polls the switch (collector process, shard, whether it still holds the shard's lease),
// how (protocol), how it went (last poll, its duration, the last sample), and the errors counted
// beside the last one, so "Errors" and "Last error" never disagree.

const root = document.getElementById("switches-view");
const ORDER = { down: 0, stale: 1, "never polled": 2, up: 3 };

function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }

export function ago(seconds) {
  if (seconds == null) return "never";
  if (seconds < 60) return `${seconds.toFixed(1)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

// Errors counted since the counts began (a new lease holder carries them on), by kind, and how
// many polls in a row fail now (0 once one succeeds: the switch recovered, the count stays).
export function errorsText(r) {
  if (r.errors_total == null) return "—";
  const kinds = Object.entries(r.error_counts || {}).filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`);
  const polls = r.polls ? ` of ${r.polls.toLocaleString()} polls` : "";
  let text = `${r.errors_total.toLocaleString()}${polls}${kinds.length ? ` (${kinds.join(", ")})` : ""}`;
  if (r.failing_for > 0) text += ` · failing now: ${r.failing_for} in a row`;
  return text;
}

function lastErrorText(r) {
  if (!r.last_error) return "none";
  return r.last_error_age_s == null ? r.last_error : `${r.last_error} (${ago(r.last_error_age_s)})`;
}

function leaseText(r) {
  const c = r.collector, l = r.lease;
  if (!c) return "—";
  if (!l) return `shard ${c.shard}`;
  const state = {held: "lease held", taken: "lease taken over by another collector", free: "lease free: nobody polls it"}[l.state];
  return `shard ${c.shard} · ${state} · ${l.standby ? "standby ready" : "no standby"}`;
}

// Ports whose metrics the latest sample withheld (and why), and ports re-mapped by ifName.
function portSummary(r) {
  const parts = [];
  const notes = Object.keys(r.port_notes || {});
  if (notes.length) parts.push(`${notes.length} with withheld metrics`);
  const moved = Object.entries(r.ports_remapped || {});
  if (moved.length) parts.push(`re-mapped by ifName: ${moved.map(([n, [a, b]]) => `${n} ${a}→${b}`).join(", ")}`);
  if (r.ifname_error) parts.push(r.ifname_error);
  return parts.join("; ") || "all measured";
}

async function refresh() {
  const resp = await fetch(root.dataset.json, { credentials: "same-origin" });
  if (!resp.ok) return;
  const data = await resp.json(), rows = data.switches;
  rows.sort((a, b) => ORDER[a.state] - ORDER[b.state]);
  const counts = {};
  for (const r of rows) counts[r.state] = (counts[r.state] || 0) + 1;
  const processes = new Set(rows.filter((r) => r.collector).map((r) => r.collector.process));
  document.getElementById("summary").textContent = `${rows.length} switches: ` +
    Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") +
    ` · polled by ${processes.size} collector process${processes.size === 1 ? "" : "es"}` +
    ` · newest fabric frame ${ago(data.newest_frame_age_s)}`;
  const body = document.getElementById("health-rows");
  body.replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.switch = r.switch;
    tr.append(cell(r.switch));
    const badge = document.createElement("span");
    badge.className = `state ${r.state.split(" ")[0]}`;
    badge.textContent = r.state;
    const td = document.createElement("td"); td.append(badge); tr.append(td);
    tr.append(cell(r.protocol || "—", "protocol"));
    tr.append(cell(r.collector ? r.collector.process : "—", "collector"));
    const lease = cell(leaseText(r), "lease");
    if (r.lease && r.lease.expires_in_s != null) lease.title = `the lease expires in ${r.lease.expires_in_s.toFixed(2)} s unless renewed (TTL ${r.lease.ttl_s} s)`;
    tr.append(lease);
    tr.append(cell(r.last_poll_ns ? ago((Date.now() * 1e6 - r.last_poll_ns) / 1e9) : "never", "last-poll"));
    tr.append(cell(r.poll_ms == null ? "—" : `${Number(r.poll_ms).toFixed(r.poll_ms < 10 ? 1 : 0)} ms`, "poll-ms"));
    tr.append(cell(r.state === "never polled" ? "never" : ago(r.age_s), "last-sample"));
    tr.append(cell(errorsText(r), "errors"));
    tr.append(cell(lastErrorText(r), "last-error"));
    tr.append(cell(r.state === "never polled" ? "" : portSummary(r), "ports"));
    return tr;
  }));
  root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
}

refresh();
setInterval(() => { if (!document.hidden) refresh(); }, 2000);
