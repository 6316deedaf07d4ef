// Open incast episodes drawn over the live heatmap: a ring on the hot cells at every migration
// (where the hot set went, when), a line joining successive hops — the moving incast's trajectory —
// and a banner naming the alert, its migrations and its culprit (run · layer phase · rank).
//
// They arrive on the heatmap's socket as "incidents" messages (fabricmon/live/incidents.py), sent
// on connect and whenever an episode changes; nothing is polled. The overlay is a transparent
// canvas over the heatmap, repainted when the heatmap paints (a few dozen marks, not the window).

const RING = "#00e5ff", JUMP = "#ff2bd6", LINE = "rgba(0, 229, 255, 0.75)";

export class IncidentOverlay {
  constructor(canvas, heatmap, banner) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.heatmap = heatmap;
    this.banner = banner;
    this.episodes = [];
    this.messages = 0; // read by tests
  }

  onIncidents(msg) {
    this.episodes = msg.episodes || [];
    this.messages++;
    this.canvas.dataset.episodes = String(this.episodes.length);
    this.canvas.dataset.steps = String(this.episodes.reduce((n, e) => n + e.trajectory.length, 0));
    this.showBanner();
    this.redraw();
  }

  showBanner() {
    const el = this.banner;
    el.innerHTML = "";
    el.hidden = !this.episodes.length;
    for (const ep of this.episodes) {
      const div = document.createElement("div");
      div.className = "incident";
      const kinds = ep.kinds.length ? ep.kinds.map((k) => k.replace("_", " ")).join(" + ") : "incast (resolving)";
      const where = ep.trajectory.at(-1)?.names.join(", ") || "";
      div.innerHTML = `<b>${esc(kinds.toUpperCase())}</b> · ${ep.migrations} migration${ep.migrations === 1 ? "" : "s"}` +
        (where ? ` · hot set now ${esc(where)}` : "") +
        ` · culprit: <span class="culprit">${esc(ep.culprit)}</span>` +
        ` · <a href="${esc(ep.link)}">episode #${ep.id}</a>`;
      div.title = ep.summary || "";
      el.append(div);
    }
  }

  // Time → x of the column centre, port → y of its row centre; null when off screen.
  xOf(tsMs) {
    const h = this.heatmap, newest = h.newestTs();
    if (Number.isNaN(newest)) return null;
    const age = Math.round((newest - tsMs) / h.intervalMs);
    if (age < 0 || age >= h.nCols) return null;
    return (h.nCols - 1 - age + 0.5) * h.colPx;
  }

  yOf(port) {
    const h = this.heatmap;
    if (port < 0 || port >= h.portRow.length) return null;
    const r = h.portRow[port], y0 = h.rowToY(r), y1 = h.rowToY(r + 1);
    if (y1 < 0 || y0 > this.canvas.height) return null;
    return (y0 + y1) / 2;
  }

  redraw() {
    const c = this.canvas, h = this.heatmap.canvas;
    if (c.width !== h.width || c.height !== h.height) { c.width = h.width; c.height = h.height; }
    const ctx = this.ctx;
    ctx.clearRect(0, 0, c.width, c.height);
    let drawn = 0;
    for (const ep of this.episodes) {
      let prev = null;
      for (const step of ep.trajectory) {
        const x = this.xOf(step.ts_ms);
        if (x === null) { prev = null; continue; }
        const pts = step.ports.map((p) => this.yOf(p)).filter((y) => y !== null).map((y) => [x, y]);
        if (!pts.length) continue;
        if (prev) {
          ctx.strokeStyle = LINE; ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]);
          ctx.beginPath(); ctx.moveTo(...prev); ctx.lineTo(...pts[0]); ctx.stroke();
          ctx.setLineDash([]);
        }
        ctx.strokeStyle = step.leaf_jump ? JUMP : RING; ctx.lineWidth = 2;
        for (const [px, py] of pts) {
          ctx.beginPath(); ctx.arc(px, py, Math.max(4, this.heatmap.colPx * 1.5), 0, 2 * Math.PI); ctx.stroke();
          drawn++;
        }
        prev = pts[0];
      }
    }
    c.dataset.drawn = String(drawn);
  }
}

function esc(s) { return String(s).replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[ch]); }
