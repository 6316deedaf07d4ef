"""Replay moving-incast detection over a recorded run (bench/scale.py --record) and score it against
the same twin truth the run was scored with: a detector change judged on the run's own frames in
seconds, not on a new 16-minute run whose hotspots, load and misses all differ.

    .venv/bin/python bench/detect_replay.py RUN_DIR [--set key=value …] [--misses]

RUN_DIR holds frames.npz, twin-topology.yaml and scale-raw.json (bench/scale.py --record) or
soak-raw.json (bench/soak.py --record; its Redis outage is left out of the score, as the soak
does). ``--set`` overrides DetectConfig fields (as a fabric's ``detect`` settings would).
Detections are the migrations the detector raises, dated and named by the hot set it moved to when
first seen, as the incast episode's trajectory records them; the live score (the episodes in the
raw file) is printed beside the replay's for the same spans, so the replay's own gap from the
product (evaluation's batching, episodes opening) is visible. It also prints how long after the
twin's hop each found move was raised.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import frame_recording
from soak import (
    MIN_DWELL_S,
    OUTAGE_RECOVERY_S,
    TOLERANCE_NS,
    WARMUP_S,
    episode_detections,
    hotspot_stretches,
)
from soak_score import NS, Detection, Migration, score_migrations, true_migrations, without

from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_load import load_fabric

Window = tuple[int, list[str], int, int]  # ts ns, hot port names, empty windows carried: loaded, quiet


def replay(run: Path, cfg: DetectConfig) -> tuple[list[Detection], list[Window], dict[int, int]]:
    """(detections, every window, when each detection was raised) of ``cfg`` over the recorded
    frames. A detection is dated and named as the episode's trajectory records it: by the hot set
    it moved to, when first seen; a move confirmed a window later is raised then."""
    spec = load_fabric((run / "twin-topology.yaml").read_text())
    index = build_port_index(spec)
    geo = fabric_geometry(index, spec)
    ts, metrics = frame_recording.load(run / "frames.npz")
    names = np.array([f"{index.switch_names[index.switch_of[p]]}:{index.port_names[p]}"
                      for p in range(len(index))])
    state = MovingState.initial(geo.n_ports)
    dets: list[Detection] = []
    raised: dict[int, int] = {}  # detection's ts → the window that raised it
    windows: list[Window] = []
    for i, t in enumerate(ts.tolist()):
        frame = {m: a[i] for m, a in metrics.items()}
        state, found = detect_window(frame, geo, state, cfg, ts_ns=t)
        hot = names[found.hot_ports].tolist()
        windows.append((t, hot, state.gap, state.quiet))
        if found.migrated:
            dets.append(Detection(found.moved_ts_ns, tuple(names[found.moved_ports].tolist())))
            raised[found.moved_ts_ns] = t
    return dets, windows, raised


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/detect_replay.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--misses", action="store_true", help="print each missed migration and wrong detection")
    ap.add_argument("--step-gap-ms", type=float, default=None,
                    help="the run's --step-gap-ms (not kept in the run's files; default: bench/scale.py's "
                         "2000, or 0 for a soak run, as the soak scores it)")
    a = ap.parse_args(argv)
    cfg = DetectConfig.from_mapping({k: _value(v) for k, v in (kv.split("=", 1) for kv in a.set)})
    is_soak = not (a.run / "scale-raw.json").exists()
    raw = json.loads((a.run / ("soak-raw.json" if is_soak else "scale-raw.json")).read_text())
    step_gap_ms = a.step_gap_ms if a.step_gap_ms is not None else (0.0 if is_soak else 2000.0)
    truth = true_migrations(hotspot_stretches(raw["hotspots"], step_gap_ms), int(MIN_DWELL_S * NS))
    dets, windows, raised = replay(a.run, cfg)
    frames = raw["frames"]
    start_ns = frames[0][0]
    tolerance = TOLERANCE_NS
    recorded = (windows[0][0], windows[-1][0])
    # the live run's judged span, inside the recording (and 10 s into it: the detector's state
    # before the first recorded frame is not known)
    span = (max(start_ns + int(WARMUP_S * NS), recorded[0] + 10 * NS),
            min(frames[-1][0], recorded[1]) - tolerance)
    judged = without(span, [(a - tolerance, b + tolerance + int(OUTAGE_RECOVERY_S * NS))
                            for a, b in raw.get("outages", [])])
    live = episode_detections(raw["facts"])
    for label, d in (("live", live), ("replay", dets)):
        s = score_migrations(truth, d, tolerance, judged=judged)
        print(f"{label:6s} recall {s.recall:.2f} ({s.detected}/{s.migrations})  "
              f"precision {s.precision:.2f} ({s.correct}/{s.detections})")
    if a.misses:
        _misses(truth, dets, windows, judged=judged, tolerance=tolerance, t0=start_ns)
    s = score_migrations(truth, dets, tolerance, judged=judged)
    delays = raise_delays_s(truth, dets, raised, tolerance, judged)
    med, worst = (float(np.median(delays)), max(delays)) if delays else (float("nan"), float("nan"))
    print(f"raised after the hop (found moves): median {med:.1f} s, max {worst:.1f} s")
    sets = " ".join(a.set) or "defaults"
    print(f"BENCH detect_replay windows={len(windows)} recall={s.recall:.2f} precision={s.precision:.2f} "
          f"migrations={s.migrations} detections={s.detections} raise_delay_median_s={med:.1f} "
          f"raise_delay_max_s={worst:.1f} config={sets.replace(' ', ',')}")
    return 0


def raise_delays_s(truth: list[Migration], dets: list[Detection], raised: dict[int, int], tolerance: int,
                   judged: list[tuple[int, int]]) -> list[float]:
    """Per found migration: seconds from the twin's hop to the window that raised its detection
    (what an operator waits; a confirmed move is raised a window after it is dated)."""
    out = []
    for m in truth:
        if not _inside(m.ts_ns, judged):
            continue
        hits = [d for d in dets if m.lands_in(d.ports) and 0 <= d.ts_ns - m.ts_ns <= tolerance]
        if hits:
            out.append((raised[hits[0].ts_ns] - m.ts_ns) / NS)
    return out


def _inside(ts_ns: int, spans: list[tuple[int, int]]) -> bool:
    return any(lo <= ts_ns <= hi for lo, hi in spans)


def _value(text: str) -> object:
    """A --set value as a rule's JSON params would hold it (``false``, ``3``, ``0.4``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _misses(truth: list[Migration], dets: list[Detection], windows: list[Window], *,
            judged: list[tuple[int, int]], tolerance: int, t0: int) -> None:
    """Each missed migration with the windows around it, then each detection that matched none."""
    by_ts = {t: (hot, gap, quiet) for t, hot, gap, quiet in windows}
    order = [w[0] for w in windows]
    for m in truth:
        if not _inside(m.ts_ns, judged):
            continue
        hit = any(m.lands_in(d.ports) and 0 <= d.ts_ns - m.ts_ns <= tolerance for d in dets)
        if hit:
            continue
        print(f"MISS {(m.ts_ns - t0) / NS:7.1f}s {m.from_port} -> {m.to_port}")
        for t in order:
            if m.ts_ns - 5 * NS <= t <= m.ts_ns + 4 * NS:
                hot, gap, quiet = by_ts[t]
                mark = "*" if any(d.ts_ns == t for d in dets) else " "
                names = ",".join(sorted(set(hot)))[:160]
                print(f"   {mark} {(t - t0) / NS:7.1f}s gap={gap} quiet={quiet} hot={len(hot)} {names}")
    for d in dets:
        if not _inside(d.ts_ns, judged):
            continue
        if not any(m.lands_in(d.ports) and 0 <= d.ts_ns - m.ts_ns <= tolerance for m in truth):
            print(f"WRONG {(d.ts_ns - t0) / NS:7.1f}s {','.join(sorted(set(d.ports)))[:160]}")


if __name__ == "__main__":
    raise SystemExit(main())
