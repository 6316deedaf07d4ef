"""Synthetic seeded detection scenarios with ground truth: fast, fabric-free of the twin's job model.

Each scenario is a rail-optimized fabric (``railgen``) observed for W one-second windows: per-port
metric arrays shaped (W, n_ports), the per-port fan-in the run's traffic matrix would give, and
per-window truth. Background traffic is a balanced PXN all-to-all: every rail-leaf host port
receives from the 31 other servers (fan-in 31) at similar load, uplinks idle, and random
microbursts raise watermarks/ECN on ~1 % of ports per window *without* raising load — the
realistic trap for a detector that looks at queues alone. The twin's own job model drives the
same scoring in ``twin/scenarios.py``.

    kind        what happens from ``onset``
    static      1–2 host ports at 2.5–4× peer load, fan-in 8–31, WM ≫ Kmax, ECN — they stay
    moving      same, but the hot set jumps to other ports (any leaf/rail) every 1–4 windows
    balanced    nothing (600 windows = 10 minutes)
    ecmp        uplinks carry traffic; 1–3 uplinks of 1–2 leaves get 2–3 colliding elephants
    pfc         a NIC pauses its leaf port (paused ~95 %), pauses spread to that leaf's uplinks
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import FabricGeometry, fabric_geometry
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from twin.scenario_scoring import KINDS, Batch, Scenario, format_table, score

KMAX = DetectConfig().watermark_kmax_bytes


_GEO_CACHE: dict[tuple[int, int, int], FabricGeometry] = {}


def _geometry(servers: int, gpus: int, spines: int) -> FabricGeometry:
    key = (servers, gpus, spines)
    if key not in _GEO_CACHE:
        fabric = rail_optimized("scn", servers=servers, gpus_per_server=gpus, spines=spines)
        _GEO_CACHE[key] = fabric_geometry(build_port_index(fabric), fabric)
    return _GEO_CACHE[key]


def make_scenario(
    kind: str, seed: int, *, windows: int | None = None, servers: int = 32, gpus: int = 8, spines: int = 4
) -> Scenario:
    if kind not in KINDS:
        raise ValueError(f"unknown scenario kind {kind!r} (use one of {', '.join(KINDS)})")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    geo = _geometry(servers, gpus, spines)
    w = windows or (600 if kind == "balanced" else 60)
    n = geo.n_ports
    host = np.flatnonzero(geo.is_leaf_host)
    up = np.flatnonzero(geo.is_uplink)

    # --- balanced PXN all-to-all background ---------------------------------------------------
    base = np.zeros(n, np.float32)
    base[host] = rng.uniform(0.25, 0.45, len(host))
    util = np.clip(base + rng.normal(0, 0.03, (w, n)).astype(np.float32) * (base > 0), 0, 1)
    util[:, ~geo.is_leaf_host] = rng.uniform(0.0, 0.01, (w, int((~geo.is_leaf_host).sum())))
    wm = (rng.lognormal(np.log(0.1 * KMAX), 0.5, (w, n))).astype(np.float32)
    ecn = np.zeros((w, n), np.float32)
    burst = rng.random((w, n)) < 0.01
    burst[:, ~geo.is_leaf_host] = False
    wm[burst] = rng.uniform(0.8, 2.0, int(burst.sum())) * KMAX
    ecn[burst] = rng.uniform(500, 5000, int(burst.sum()))
    pfc = np.zeros((w, n), np.float32)
    paused = np.zeros((w, n), np.float32)
    fan = np.zeros((w, n), np.float32)
    fan[:, host] = 31.0

    onset = int(rng.integers(10, 20)) if kind != "balanced" else w
    moving_onset = -1
    truth: list[tuple[int, ...]] = [() for _ in range(w)]

    def make_hot(t: int, ports: npt.NDArray[np.int64]) -> None:
        util[t, ports] = rng.uniform(0.85, 1.0, len(ports))
        wm[t, ports] = rng.uniform(1.5, 4.0, len(ports)) * KMAX
        ecn[t, ports] = rng.uniform(5e3, 5e5, len(ports))
        pfc[t, ports] = rng.uniform(0, 500, len(ports))
        paused[t, ports] = rng.uniform(0, 0.1, len(ports))
        fan[t, ports] = rng.integers(8, 32, len(ports))
        truth[t] = tuple(int(p) for p in ports)

    if kind in ("static", "moving"):
        n_hot = int(rng.integers(1, 3))
        hot = rng.choice(host, n_hot, replace=False)
        dwell = int(rng.integers(1, 5))
        for t in range(onset, w):
            if kind == "moving" and t > onset and (t - onset) % dwell == 0:
                hot = rng.choice(np.setdiff1d(host, hot), n_hot, replace=False)
                if moving_onset < 0:
                    moving_onset = t
            make_hot(t, hot)
    elif kind == "ecmp":
        util[:, up] = rng.uniform(0.2, 0.35, len(up)) + rng.normal(0, 0.02, (w, len(up)))
        leaves = rng.choice(len(geo.uplink_group_starts), int(rng.integers(1, 3)), replace=False)
        starts = np.r_[geo.uplink_group_starts, len(geo.uplink_ports)]
        victims = np.concatenate(
            [
                geo.uplink_ports[
                    rng.choice(np.arange(starts[g], starts[g + 1]), int(rng.integers(1, 4)), replace=False)
                ]
                for g in leaves
            ]
        )
        fan[:, up] = rng.integers(1, 3, len(up))
        for t in range(onset, w):
            util[t, victims] = rng.uniform(0.9, 1.0, len(victims))
            wm[t, victims] = rng.uniform(1.5, 3.0, len(victims)) * KMAX
            ecn[t, victims] = rng.uniform(5e3, 1e5, len(victims))
            fan[t, victims] = rng.integers(2, 4, len(victims))
    elif kind == "pfc":
        victim = int(rng.choice(host))
        leaf = geo.index.switch_of[victim]
        spread = up[geo.index.switch_of[up] == leaf]
        for t in range(onset, w):
            util[t, victim] = rng.uniform(0.0, 0.02)
            paused[t, victim] = rng.uniform(0.9, 1.0)
            pfc[t, victim] = rng.uniform(5e4, 2e5)
            wm[t, victim] = rng.uniform(2.0, 4.0) * KMAX
            paused[t, spread] = rng.uniform(0.3, 0.7, len(spread))
            pfc[t, spread] = rng.uniform(1e3, 3e4, len(spread))
            util[t, spread] = rng.uniform(0.0, 0.003, len(spread))
    util = np.clip(util, 0, 1).astype(np.float32)
    speed = geo.speed_bps
    metrics = {
        "util": util,
        "out_bps": (util * speed).astype(np.float32),
        "watermark_bytes": wm,
        "ecn_marked_ps": ecn,
        "pfc_pause_ps": pfc,
        "pfc_paused_fraction": paused,
    }
    return Scenario(kind, seed, geo, metrics, fan, onset, moving_onset, truth)


def synthetic_batch(**make_kw: int) -> Batch:
    """Scenarios for ``score``: this module's generator, one seed at a time."""
    return lambda kind, seeds: [make_scenario(kind, s, **make_kw) for s in seeds]


if __name__ == "__main__":
    print(format_table(score(batch=synthetic_batch())))
