"""Feed detection from the live window: new frames of a fabric → ``services.record_window``.

Runs on the beat (``alerts.evaluate``). What must survive between runs is small and lives in
Redis beside the frames: the stream cursor (last frame evaluated) and the moving-incast state
(the previous hot set and its dwell counts). One evaluation per fabric at a time (a Redis lock):
beats overlap when a window is slow, and queued runs all start at once when Redis comes back; two
runs reading the same cursor would record every frame twice (doubled transitions and trajectory
steps) and overwrite each other's moving-incast state. A frame indexed against another topology version
than the fabric's current one is skipped with a log line, never mis-read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from datetime import UTC, datetime

import numpy as np
import redis
from django.conf import settings
from redis.lock import Lock

from fabricmon.alerts import services
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.core.detection.down import CollectionGroups
from fabricmon.core.detection.geometry import FabricGeometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.telemetry import live_window
from fabricmon.telemetry.shards import plan_shards
from fabricmon.topology.fabric_view import FabricView, fabric_view
from fabricmon.topology.models import Fabric

log = logging.getLogger(__name__)
def geometry(fabric: str) -> FabricGeometry:
    return fabric_view(fabric).geometry


def collection_groups(view: FabricView) -> CollectionGroups:
    """The fabric's switches as its collectors poll them, one group per shard: a stalled collector
    silences its shard together, and that is one ``target_down`` (``detection.down``)."""
    shards = plan_shards([view.spec], settings.FABRICMON_SHARD_SIZE)
    return CollectionGroups.from_members(view.geometry.index.switch_names,
                                         {s.shard_id: s.switches for s in shards})


def heard_from_ns(r: redis.Redis, fabric: str, geo: FabricGeometry) -> np.ndarray:
    """Per switch id: the newest sample its collector got (``last_success_ns`` of the health hash;
    0 when never). A switch whose cells missed a frame but which was heard from since is late, not
    down, and raises no ``target_down`` (its health still counts the late polls)."""
    out = np.zeros(len(geo.index.switch_names), np.int64)
    health = live_window.read_health(r, fabric)
    # a sample's time can be the switch's clock: one ahead of ours (a dead switch "heard from" in
    # the future) is not trusted, so a wrong clock only ever leaves the down rule as it was
    trusted_until = time.time_ns() + 1_000_000_000
    for s, name in enumerate(geo.index.switch_names):
        ts = (health.get(name) or {}).get("last_success_ns")
        if isinstance(ts, int) and ts <= trusted_until:
            out[s] = ts
    return out


def _load_state(r: redis.Redis, fabric: str, geo: FabricGeometry) -> MovingState:
    raw = r.get(keys.alerts_state(fabric))
    state = MovingState.initial(geo.n_ports)
    if not raw:
        return state
    saved = json.loads(raw)
    if saved.get("topo") != geo.index.version:
        return state  # re-cabled: the old hot set means nothing on the new index
    hot = np.zeros(geo.n_ports, np.bool_)
    dwell = np.zeros(geo.n_ports, np.int64)
    hot[saved["hot"]] = True
    dwell[saved["hot"]] = saved["dwell"]
    no_data = np.asarray(saved["nodata"], dtype=np.int64) if "nodata" in saved else None
    rolled = np.zeros(int(saved.get("groups", 0)), np.bool_)
    rolled[saved.get("rolled", [])] = True
    return MovingState(hot, dwell, saved["since"], saved["migrations"], saved["dsum"], saved["dcount"],
                       no_data, int(saved.get("gap", 0)), int(saved.get("hot_ts", 0)),
                       down_groups_rolled=rolled, down_fabric_rolled=bool(saved.get("fabric_rolled", False)),
                       down_covered=np.asarray(saved.get("covered", []), dtype=np.int64),
                       quiet=int(saved.get("quiet", 0)),
                       pending=np.asarray(saved["pending"], dtype=np.int64) if saved.get("pending") else None,
                       pending_ts_ns=int(saved.get("pending_ts", 0)),
                       pending_seen=int(saved.get("pending_seen", 0)))


def _save_state(r: redis.Redis, fabric: str, geo: FabricGeometry, s: MovingState) -> None:
    hot = np.flatnonzero(s.prev_hot)
    r.set(
        keys.alerts_state(fabric),
        json.dumps(
            {
                "topo": geo.index.version,
                "hot": hot.tolist(),
                "dwell": s.dwell[hot].tolist(),
                "since": min(s.windows_since_migration, 1 << 30),
                "migrations": s.migrations,
                "dsum": s.completed_dwell_sum,
                "dcount": s.completed_dwell_count,
                "nodata": s.no_data.tolist() if s.no_data is not None else [],
                "gap": s.gap,
                "quiet": s.quiet,
                "hot_ts": s.hot_ts_ns,
                "pending": s.pending.tolist() if s.pending is not None else [],
                "pending_ts": s.pending_ts_ns,
                "pending_seen": s.pending_seen,
                "groups": len(groups) if (groups := s.down_groups_rolled) is not None else 0,
                "rolled": np.flatnonzero(groups).tolist() if groups is not None else [],
                "fabric_rolled": s.down_fabric_rolled,
                "covered": s.down_covered.tolist() if s.down_covered is not None else [],
            }
        ),
    )


def hot_set(r: redis.Redis, fabric: str) -> tuple[str, list[int]] | None:
    """The moving-incast detector's current hot set: (topology version, port positions), or None
    before the fabric's first evaluation (``/metrics`` reads it at scrape time)."""
    raw = r.get(keys.alerts_state(fabric))
    if not raw:
        return None
    saved = json.loads(raw)
    return str(saved.get("topo", "")), [int(p) for p in saved.get("hot", [])]


# The lock lives this long unless renewed (every frame renews it): a worker killed mid-run holds
# back the next evaluation by at most this much, not by a whole run of frames.
LOCK_TTL_S = 10.0


def evaluate_fabric(fabric: str, r: redis.Redis | None = None, *, max_frames: int = 200) -> int:
    """Evaluate every frame not yet seen (oldest first). Returns how many frames were evaluated —
    0 when another evaluation of this fabric holds the lock (it reads the same frames)."""
    r = r or connect()
    lock = r.lock(keys.alerts_lock(fabric), timeout=LOCK_TTL_S, blocking=False)
    if not lock.acquire():
        return 0
    try:
        return _evaluate_locked(fabric, r, lock, max_frames)
    except redis.exceptions.LockNotOwnedError:
        log.warning("alerts: %s evaluation stalled past its %g s lock; another run goes on",
                    fabric, LOCK_TTL_S)
        return 0
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()


def _evaluate_locked(fabric: str, r: redis.Redis, lock: Lock, max_frames: int) -> int:
    view = fabric_view(fabric)
    geo, groups = view.geometry, collection_groups(view)
    cfg = services.detect_config(fabric)
    cursor = r.get(keys.alerts_cursor(fabric)) or b"-"
    state = _load_state(r, fabric, geo)
    heard_ns = heard_from_ns(r, fabric, geo)
    done = 0
    for eid, frame in live_window.read_window(r, fabric, after_id=cursor, count=max_frames):
        cursor = eid
        if frame.topology_version != geo.index.version or frame.n_ports != geo.n_ports:
            log.warning(
                "alerts: %s frame %s is for topology %s, fabric is at %s: skipped",
                fabric,
                eid,
                frame.topology_version,
                geo.index.version,
            )
            continue
        lock.reacquire()  # LockNotOwnedError if it expired: another run owns the cursor now
        late = heard_ns >= frame.ts_ns - int(cfg.down_windows * frame.interval_s * 1e9)
        state, found = detect_window(frame.metrics, geo, state, cfg, ts_ns=frame.ts_ns,
                                     collection_groups=groups, late_switches=late)
        services.record_window(fabric, found, geo, now=datetime.fromtimestamp(frame.ts_ns / 1e9, tz=UTC))
        done += 1
    if done or cursor != b"-":
        _save_state(r, fabric, geo, state)
        r.set(keys.alerts_cursor(fabric), cursor)
    return done


def evaluate_all() -> int:
    """Evaluate every fabric of the topology database; returns the frames evaluated.

    Redis unreachable (a restart): one line, and the next beat goes on from the stored cursor —
    the frames written meanwhile are still in the window — rather than a task traceback."""
    done = 0
    for name in Fabric.objects.values_list("name", flat=True):
        try:
            done += evaluate_fabric(name)
        except redis.RedisError as exc:
            log.warning("alerts: %s not evaluated, Redis unreachable (%s); the next beat goes on", name, exc)
    return done
