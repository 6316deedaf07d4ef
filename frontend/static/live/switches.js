// Switch and collector health, readable at a glance: problems first, refreshed every 2 s.

const root = document.getElementById("switches-view");
const ORDER = { down: 0, stale: 1, "never polled": 2, up: 3 };

function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }

// Ports whose metrics the latest sample withheld (and why), and ports re-mapped by ifName.
function portSummary(r) {
  const parts = [];
  const notes = Object.keys(r.port_notes || {});
  if (notes.length) parts.push(`${notes.length} with withheld metrics`);
  const moved = Object.entries(r.ports_remapped || {});
  if (moved.length) parts.push(`re-mapped by ifName: ${moved.map(([n, [a, b]]) => `${n} ${a}→${b}`).join(", ")}`);
  if (r.ifname_error) parts.push(r.ifname_error);
  return parts.join("; ");
}

async function refresh() {
  const resp = await fetch(root.dataset.json, { credentials: "same-origin" });
  if (!resp.ok) return;
  const rows = (await resp.json()).switches;
  rows.sort((a, b) => ORDER[a.state] - ORDER[b.state]);
  const counts = {};
  for (const r of rows) counts[r.state] = (counts[r.state] || 0) + 1;
  document.getElementById("summary").textContent = `${rows.length} switches: ` +
    Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
  const body = document.getElementById("health-rows");
  body.replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    tr.append(cell(r.switch));
    const badge = document.createElement("span");
    badge.className = `state ${r.state.split(" ")[0]}`;
    badge.textContent = r.state;
    const td = document.createElement("td"); td.append(badge); tr.append(td);
    tr.append(cell(r.age_s == null ? "never" : `${r.age_s.toFixed(1)} s ago`));
    tr.append(cell(r.last_poll_ns ? `${((Date.now() * 1e6 - r.last_poll_ns) / 1e9).toFixed(1)} s ago` : "never"));
    tr.append(cell(r.poll_ms == null ? "—" : `${Number(r.poll_ms).toFixed(0)} ms`));
    tr.append(cell(r.errors == null ? "—" : String(r.errors)));
    tr.append(cell(r.last_error || ""));
    // Who polls it: the collector process (host:pid), its shard and lease.
    const c = r.collector;
    tr.append(cell(c ? `${c.process} · ${c.shard} · lease ${c.lease}` : "—"));
    tr.append(cell(portSummary(r)));
    return tr;
  }));
}

refresh();
setInterval(() => { if (!document.hidden) refresh(); }, 2000);
