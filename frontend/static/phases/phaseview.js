// A run's phase views as the browser holds them: built from the socket's snapshot, kept current by
// its deltas (fabricmon/phases/messages.py). Pure data — no DOM — so the page and tests share it.
//
//   snapshot        → replace everything
//   delta.views[s]  → mode "full": replace view s; mode "upsert": merge columns by
//                     (step, layer, phase), remove the "drop" columns (they left the server's
//                     step window), replace verdict / gates / failed
//
// A withheld view holds no values (null) and its gate reasons; nothing of it is ever drawn.
// The attributed view also holds hot_claim per column: the hot port only where the counters vouch
// for it (port null = ambiguous: the top ports are within 2 standard errors of each other).

export class PhaseViews {
  constructor() { this.reset(null); }

  reset(snapshot) {
    this.run = snapshot?.run ?? null;
    this.state = snapshot?.state ?? null;
    this.routing = snapshot?.routing ?? null;
    this.error = snapshot?.error ?? null;
    this.meta = snapshot?.meta ?? {};
    this.phaseOrder = new Map((this.meta.phases ?? []).map((p, i) => [p, i]));
    this.views = {};
    for (const [name, v] of Object.entries(snapshot?.views ?? {})) this.views[name] = this.#own(v);
  }

  apply(delta) {
    if (delta.state !== undefined) this.state = delta.state;
    if (delta.error !== undefined) this.error = delta.error;
    if (delta.meta) {
      Object.assign(this.meta, delta.meta);
      if (delta.meta.phases) this.phaseOrder = new Map(delta.meta.phases.map((p, i) => [p, i]));
    }
    const changed = [];
    for (const [name, v] of Object.entries(delta.views ?? {})) {
      changed.push(name);
      const held = this.views[name];
      if (v.mode === "full" || !held || held.values === null) { this.views[name] = this.#own(v); continue; }
      held.verdict = v.verdict; held.gates = v.gates; held.failed = v.failed; held.basis = v.basis;
      if (v.drop?.length) this.#drop(held, new Set(v.drop.map((c) => c.join("/"))));
      if (v.hot_claim && !held.hot_claim) held.hot_claim = held.columns.map(() => null);
      for (let i = 0; i < v.columns.length; i++) {
        const key = v.columns[i].join("/");
        let at = held.index.get(key);
        if (at === undefined) {
          held.columns.push(v.columns[i]); held.values.push(null); held.hot_port.push(null);
          if (held.hot_claim) held.hot_claim.push(null);
          at = held.columns.length - 1; held.index.set(key, at);
        }
        held.values[at] = v.values[i]; held.hot_port[at] = v.hot_port[i];
        if (held.hot_claim) held.hot_claim[at] = v.hot_claim ? v.hot_claim[i] : null;
      }
      this.#sort(held);
    }
    return changed;
  }

  // Columns that slid out of the server's step window go; the rest keep their order.
  #drop(view, gone) {
    const keep = view.columns.map((c, i) => (gone.has(c.join("/")) ? -1 : i)).filter((i) => i >= 0);
    view.columns = keep.map((k) => view.columns[k]);
    view.values = keep.map((k) => view.values[k]);
    view.hot_port = keep.map((k) => view.hot_port[k]);
    if (view.hot_claim) view.hot_claim = keep.map((k) => view.hot_claim[k]);
    view.index = new Map(view.columns.map((c, i) => [c.join("/"), i]));
  }

  // Columns in the server's order: step, layer, then the phase order of collectors/traces/schema.py.
  #sort(view) {
    const n = view.columns.length, po = (p) => this.phaseOrder.get(p) ?? 99;
    const order = [...Array(n).keys()].sort((a, b) => {
      const x = view.columns[a], y = view.columns[b];
      return x[0] - y[0] || x[1] - y[1] || po(x[2]) - po(y[2]);
    });
    if (order.every((k, i) => k === i)) return;
    view.columns = order.map((k) => view.columns[k]);
    view.values = order.map((k) => view.values[k]);
    view.hot_port = order.map((k) => view.hot_port[k]);
    if (view.hot_claim) view.hot_claim = order.map((k) => view.hot_claim[k]);
    view.index = new Map(view.columns.map((c, i) => [c.join("/"), i]));
  }

  #own(v) {
    const view = { ...v, columns: [...v.columns], values: v.values ? [...v.values] : null,
      hot_port: v.hot_port ? [...v.hot_port] : null, hot_claim: v.hot_claim ? [...v.hot_claim] : null };
    view.index = new Map(view.columns.map((c, i) => [c.join("/"), i]));
    return view;
  }
}

// (step, layer, phase) columns → (layer, phase), summed over steps; hot port = most bytes, claimed
// only by a CLOSE_LEAD lead over the runner-up (as core.phases.attribution.margin_hot_ports; the
// sums of max(in, out) keep no direction: "dir" is null). The same sums as
// fabricmon/phases/services.py fold_layers. Already folded views come back as they are.
export const CLOSE_LEAD = 0.1;
// ``rows``: the port positions the values' rows are (meta.shown_ports); the folded view names its
// hot ports by position, as the server's views do.
export function foldLayers(view, rows = null) {
  if (!view || view.values === null || !view.columns.length || view.columns[0][0] === -1) return view;
  const keys = new Map();
  for (const c of view.columns) { const k = `${c[1]}/${c[2]}`; if (!keys.has(k)) keys.set(k, [c[1], c[2]]); }
  const uniq = [...keys.values()].sort((a, b) => a[0] - b[0] || (a[1] !== "dispatch") - (b[1] !== "dispatch") || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  const at = new Map(uniq.map((u, i) => [`${u[0]}/${u[1]}`, i]));
  const nPorts = view.values[0]?.length ?? 0;
  const sums = uniq.map(() => new Float64Array(nPorts));
  view.columns.forEach((c, i) => { const s = sums[at.get(`${c[1]}/${c[2]}`)], row = view.values[i]; for (let p = 0; p < nPorts; p++) s[p] += row[p] ?? 0; });
  const pos = (i) => (rows ? rows[i] : i);
  const claims = sums.map(marginClaim).map((c) => ({ ...c, port: c.port === null ? null : pos(c.port), top: pos(c.top),
    runner_up: pos(c.runner_up), tied: c.tied.map(pos) }));
  return { ...view, columns: uniq.map((u) => [-1, ...u]), values: sums.map((s) => Array.from(s)),
    hot_port: claims.map((c) => c.top), hot_claim: claims };
}

// One column's hot port by margin: claimed when it leads the runner-up by CLOSE_LEAD or more.
export function marginClaim(col) {
  let top = 0, second = -1;
  for (let p = 1; p < col.length; p++) {
    if (col[p] > col[top]) { second = top; top = p; } else if (second < 0 || col[p] > col[second]) second = p;
  }
  const t = col[top] ?? 0, r = second >= 0 ? col[second] : 0;
  const lead = t > 0 ? (t - r) / t : null;
  const tied = [];
  if (t > 0) for (let p = 0; p < col.length && tied.length < 8; p++) if (col[p] >= t * (1 - CLOSE_LEAD)) tied.push(p);
  return { port: lead !== null && lead >= CLOSE_LEAD ? top : null, top, runner_up: Math.max(second, 0), lead_rel: lead,
    lead_se_rel: null, tied, n_tied: tied.length, dir: null, basis: "margin" };
}
