"""The whole product on a ~16k-port fabric on this one box: what each stage costs per port-second,
whether it keeps up, and how late a counter reaches the pixel.

The stack is bench/soak.py's (fabricmon.demo.start_stack: the demo's commands), sized up:
704 servers x 8 GPUs in 22 rail-optimized SUs (one leaf per rail per SU: 176 leaves of 32 host
ports + 32 uplinks) and 8 spines (each 22 x 8 x 4 = 704 downlinks): 5,632 + 5,632 + 5,632 =
16,896 switch ports, 184 switches (the nearest size above the issue's 16,384: 672 servers were
16,128). The twin's MoE job runs its all-to-alls in expert-parallel groups of ``--ep-size`` 256
GPUs (one group per SU; twin/moe.py), reports 4 consecutive steps of every 4 x
``--report-every-steps`` through the probe, and stalls rather than fall behind real time
(``twin_job_share``: the share of wall time its job ran). Every switch is a gNMI target streaming
at 1 s. SNMP where it can keep up: under ``--collector both`` (the demo's) every switch is also
polled over SNMP at 1 s (frames follow the SNMP interval, so SNMP cannot be slowed to a fallback
rate without coarser frames) — at 16,896 ports that doubled the collection work and the twin's
answering work, and the 3-minute runs with it had two frames in three without data. So the bench
loads the topology ``--collector gnmi`` by default: SNMP is the inventory only (``--collector
both`` to measure it as the demo runs). Collection and evaluation run in separate Celery workers
(as compose runs them), so /proc can tell their CPU apart:

    twin        python -m twin --servers 704 --gpus-per-server 8 --spines 8 --ep-size 256 --gnmi …
    worker      celery worker -Q collection     collectors (SNMP + gNMI) and framing
    evaluation  celery worker -Q evaluation,…   detection and alert evaluation
    delivery, beat, web (Daphne: pages and the heatmap's WebSocket), its own Redis

After ``--warmup-s`` (collectors up, the first frames drawn) for ``--minutes`` (default 10):
frames, lost ticks and frame lag (bench/soak.py's sampling), PSS of every process tree, the pages
of the nav every ``--pages-s`` (the run's phase view among them), CPU of every process tree from
/proc, and a headless Chromium page on the live heatmap whose draw log gives counter→pixel latency
(as bench/live.py measures it). Framing runs inside the collectors, so its share is measured
apart: after the run, the bench replays FabricFramer on the same fabric (one gNMI-shaped slice per
switch per tick, against the same Redis) and subtracts that from the collection worker.
The soak's verdict (lost ticks, recall/precision, pages, tracebacks, memory bounds stated for a
256-GPU fabric) is printed as it is: a stage that does not keep up shows as lost ticks and lag.

What the runs showed (2 cores, shared with other work: figures are ratios within one run).
Before issue 18 item 3 the twin's job routed dense n_gpus x n_gpus matrices (5,376² ≈ 29 M
entries, 16 a step, kept for the reporter: 11-13 GB) and never ticked in 7 minutes. The twin
alone at 16,896 ports now ticks at 10 Hz in ~0.66 core with every switch's gNMI source read once a
second, ~0.9 GB RSS (history bounded in bytes). Beside the product, three things kept it from
delivering: its gNMI servicer advanced the simulation for its own reads (58 % of its time) and
rebuilt every re-subscription's ~1,000-path selection (48 %), so every stream went stale; and a
job at the demo's 40 ms step gap is ~100 all-to-alls a second, more than the twin's one core beside
the product. With reads at the simulated instant, selections built once and a 2 s step gap (a
5,632-GPU step takes seconds), the 10-minute run (2026-12-02, quiet box, --collector gnmi):

    BENCH scale ports=16896 collector=gnmi minutes=10.0 lost_ticks=0 no_data_ticks=159
    frame_lag_s_max=4.33 twin_tick_hz=6.45 twin_job_share=0.99 pixel_p95_ms=1391.0
    cpu_us_per_port_s_twin=39.38 cpu_us_per_port_s_detection=6.48 cpu_us_per_port_s_web=10.1
    cpu_us_per_port_s_redis=4.01 cpu_us_per_port_s_other=1.78 cpu_us_per_port_s_framing=4.59
    cpu_us_per_port_s_collection=40.14 box_share=0.9 peak_rss_mb_twin=1582 peak_rss_mb_worker=1432
    peak_rss_mb_evaluation=360 peak_rss_mb_delivery=233 peak_rss_mb_beat=140 peak_rss_mb_web=2132
    peak_rss_mb_redis=796

Every tick framed, a quarter of them without data (the twin's streams still go stale at times on a
box 90 % busy: 0.9 of the 2 cores are the product and the twin together), counter→pixel p95 1.4 s.
Page p95s over 1 s: port detail JSON 16.8 s (it read the whole 600-frame window, ~480 MB at this
size, for one port: since cut to the port's bytes inside Redis, live_window.port_window), the run
page 1.55 s, the alerts page 1.16 s; views.json 1.0 s. Memory over the soak's bounds (stated for a
256-GPU fabric): web 896 MB PSS (the port reads), Redis 796 MB (the 600 s live window of 16,896
ports, as the README's FABRICMON_LIVE_WINDOW_S row says). No moving-incast migration was judged
(recall/precision 0 of 0 in ten minutes at ~0.5 steps a second).

2026-12-04 (quiet box, --collector gnmi, the jump-every-10-steps job below): the first run found
detection blind at this size (the hot set jumped to whole leaves: every switch is read at its own
instants and a large job's traffic comes in bursts as long as the poll, so loads are now judged
against the port's own switch, and hot sets compared by place, a port or that port of every SU),
dense 5,632-rank matrices on ingest and in the phase views, and whole frames kept or read by the
web and the history. After those:

    BENCH scale ports=16896 collector=gnmi minutes=10.0 lost_ticks=0 no_data_ticks=0
    frame_lag_s_max=1.69 twin_tick_hz=8.38 twin_job_share=1.0 pixel_p95_ms=317.0
    cpu_us_per_port_s_twin=47.31 cpu_us_per_port_s_detection=8.1 cpu_us_per_port_s_web=3.69
    cpu_us_per_port_s_redis=3.23 cpu_us_per_port_s_other=1.31 cpu_us_per_port_s_framing=1.39
    cpu_us_per_port_s_collection=38.16 box_share=0.872 peak_rss_mb_twin=1517 peak_rss_mb_worker=1251
    peak_rss_mb_evaluation=556 peak_rss_mb_delivery=234 peak_rss_mb_beat=141 peak_rss_mb_web=370
    peak_rss_mb_redis=615

Every page's p95 under 1 s (port JSON 677 ms, views.json 500 ms); moving incast recall 0.67 (10 of
15 migrations), precision 0.47 (10 of 24 detections), no false alert; web peak RSS 370 MB (1,629
before). What scored recall and precision is kept in scale-raw.json (with every process's PSS).

2026-12-04, later (quiet box, --report-every-steps 64): scale-raw.json showed most "wrong" detections
were right — the scorer cut one hotspot into per-step pieces at this job's 2 s backward pass and
dropped one-step hotspots, which own the fabric until the next step (soak_score now merges across
the step gap and holds a stretch until the next one starts). Rescored so, the run with these fixes
(culprits looked up after the window's write transaction, one decode for every alert: alert
evaluation held SQLite's lock over 2 s 20 times in the run above, 0 times now) gave moving incast
recall 0.74 (17 of 23), precision 0.77 (17 of 22), no false alert, 0 lost ticks, pixel p95 437 ms,
detection 3.6 us per port-second (8.1 above). A rule that let only a new *leading* place migrate
(warm ports joining a hot place that stays are not a move) was measured and reverted: precision
0.78 (14 of 18) but recall 0.61 (14 of 23) — a new hotspot first seen as a minority beside new
warm ports no longer migrated. Most misses left are a migration that opened a new episode
(per-port incast alerts flap with the bursts, the episode had closed, and an episode's first step
is not scored as a migration) or that came 3-4 s late. With --report-every-steps 16 (a block of
5,632 ranks' events every ~2.5 minutes, so culprits can be judged: 5 of 6 named) posting each block
took the box ~50 s and the twin's streams went stale meanwhile (recall 0.57), web CPU rose to 21.9
us per port-second and views.json's p95 to 6.7 s.

2026-12-05 (quiet box; an episode opened by a hop starts where the hotspot came from, so the hop
is one of its steps; Redis' bound follows the live window and memory growth is judged once it is
full; the phase views send at most 512 ports as rows). 16 minutes, --report-every-steps 64:

    BENCH scale ports=16896 collector=gnmi minutes=16.0 lost_ticks=0 no_data_ticks=3
    frame_lag_s_max=2.49 twin_tick_hz=8.97 twin_job_share=1.0 pixel_p95_ms=386.0
    cpu_us_per_port_s_twin=46.15 cpu_us_per_port_s_detection=3.6 cpu_us_per_port_s_web=5.97
    cpu_us_per_port_s_redis=3.77 cpu_us_per_port_s_other=1.28 cpu_us_per_port_s_framing=1.73
    cpu_us_per_port_s_collection=41.59 box_share=0.879 peak_rss_mb_twin=1586 peak_rss_mb_worker=1116
    peak_rss_mb_evaluation=356 peak_rss_mb_delivery=232 peak_rss_mb_beat=141 peak_rss_mb_web=536
    peak_rss_mb_redis=630

Moving incast recall 0.81 (21 of 26), precision 0.84 (21 of 25), no false alert; every page under
1 s at p95; Redis 615 MB (bound 769), no growth after the window filled (judged from 634 s). The
first moving-incast alert came 10.2 s after the twin's first migration: that hop (48.9 s, 8 s after
the product's first incast) was seen 5 s late. A 12-minute run of the same code before the memory
scorer change: recall 0.87 (20 of 23), precision 0.95 (20 of 21), first alert 0.5 s. With
--report-every-steps 16: views.json's p95 387 ms (6.7 s before the row bound), but while the box
posts a block (64 phases × 5,632 ranks' events, each with its 256 peers) the twin and collection go
short: recall 0.70, precision 0.59, port.json p95 1.15 s, web CPU 19.2 us per port-second.

Later that day, 12 minutes (with the detector's hot set recorded per window in scale-raw.json):

    BENCH scale ports=16896 collector=gnmi minutes=12.0 lost_ticks=0 no_data_ticks=5
    frame_lag_s_max=2.41 twin_tick_hz=8.63 twin_job_share=1.0 pixel_p95_ms=512.0
    cpu_us_per_port_s_twin=46.55 cpu_us_per_port_s_detection=4.56 cpu_us_per_port_s_web=5.72
    cpu_us_per_port_s_redis=3.79 cpu_us_per_port_s_other=1.34 cpu_us_per_port_s_framing=2.59
    cpu_us_per_port_s_collection=41.86 box_share=0.899 peak_rss_mb_twin=1573 peak_rss_mb_worker=1275
    peak_rss_mb_evaluation=370 peak_rss_mb_delivery=232 peak_rss_mb_beat=141 peak_rss_mb_web=546
    peak_rss_mb_redis=616

The late first alert (10.3 s again) was the scorer's: the twin's first migration (20.7 s) fell while
collection was still bringing its streams up — frames at 18-23 s had no port filled, the first full
one came at 27 s — so no frame had data on where that hotspot came from. Judged from the first
frame covering the fabric (soak_score.watching_from_ns), the first migration is at 29.9 s and the
alert fired 1.1 s after it. Recall 0.78 (18 of 23; 3 of the 5 misses were found 2.7-5.4 s after
the hop, past the 2.5 s tolerance), precision 0.82. Partial silences of 8-30 % of the switches
still raised 137 per-switch target_down alerts, spread over all six collector shards (so the
shard roll-up did not take them; it fired twice), not a stuck collector. A run with "late is not
down" still raised ~185, nearly all while the job posted its events block: collection itself
stalled on the saturated box.

2026-12-05, six runs with --record (every frame the detector read, kept in frames.npz, and the
twin's phase events; bench/detect_replay.py replays detection over the frames, and replaying the
code a run ran reproduces its live score exactly). Live moving-incast recall / precision, 12 min:
0.86 / 0.90 and 0.91 / 0.88 (before the rules below), then 0.57 / 0.76, 0.74 / 0.81, 0.78 / 0.86,
and 0.67 / 0.63 (10 min) as the box slowed through the day (the twin ticking 9.1 Hz, then 8.3,
then 7.7). Replayed over all six (132 migrations): 0.73 / 0.82 without the quiet-window rule, 0.78
/ 0.81 with it (a quiet fabric no longer ends the hot set; a poll straddling the move holds it
too). What the slower runs missed was mostly late, not unseen: their frames showed the new hotspot
3-4 s after the twin's first event of it (against 0.2-2.1 s in the first two runs), past the
scorer's 2.5 s; within 6 s recall is 0.90 (119/132). The same runs showed the cabling check's
LLDP reads (all 184 switches at once, every minute) stalling every gNMI stream 2-6 s a minute;
they are now paced (FABRICMON_CABLING_READS_PER_S).

2026-12-07, four runs with --record (12 min each). The twin's ticker runs at 7-8 Hz beside the
product and stalls past a second; its counters had run on at the last tick's look-ahead rates
through a stall, so a step's all-to-all that fell in one never reached them. Counter ticks are now
laid on the 10 Hz grid, each segment's rates held to its own span, and a late ticker lays the ticks
it missed (twin_late_ticks: 1,578-2,287 a run): recall / precision 0.83 / 0.95 (S) and 0.74 / 0.81
(T, same code: one collector process's 17 gNMI streams went stale, re-subscribed, went stale again
every 6.5 s, and within a minute every process's did — frames 71 % filled). With a stale stream
kept and re-subscribed only when dead (collectors/gnmi/session.py): 0.83 / 0.95 twice (U, V), no
re-subscribe in either, raise delay median 1.8 s. The four misses left in S, U and V are the same
four migrations (V, from the job's first phase: 592, 615, 618 and 629 s): the job's first
5,632-rank events block was posted at 585-615 s, streams went stale for seconds at 589-612 s and
frames were 3-61 % filled until 620 s; the fourth hop leaves a hot set that sat in that tail. V:

    BENCH scale ports=16896 collector=gnmi minutes=12.0 lost_ticks=0 no_data_ticks=0
    frame_lag_s_max=2.02 twin_tick_hz=8.07 twin_late_ticks=1578 twin_job_share=1.0
    pixel_p95_ms=613.0 cpu_us_per_port_s_twin=44.49 cpu_us_per_port_s_detection=5.34
    cpu_us_per_port_s_web=5.22 cpu_us_per_port_s_redis=4.11 cpu_us_per_port_s_other=1.32
    cpu_us_per_port_s_framing=1.66 cpu_us_per_port_s_collection=44.38 box_share=0.9
    peak_rss_mb_twin=1607 peak_rss_mb_worker=1294 peak_rss_mb_evaluation=392
    peak_rss_mb_delivery=233 peak_rss_mb_beat=142 peak_rss_mb_web=443 peak_rss_mb_redis=695

Later on 2026-12-07, four more 12-minute runs (--record), per-process CPU and disk writes sampled
every 2 s from /proc beside them. W (the code above, agent reads final): every invariant held —
recall / precision 0.83 / 0.95, 9 of 10 nameable culprits named, port.json p95 975 ms. While the
job's block posts, the pages' process ran the ingest (and folded the matrix parts it appended,
11 MB a phase, whenever a page read the run) beside every page. X: the jobs post to their own
server (demo's "ingest") at nice 10 — port.json p95 469 ms, but that server got so little CPU that
14 % of the block's events were stored (the job's spool shed the rest) and 7 of 12 named culprits
failed the invariant; the frames were no fuller (0.76 filled; 40-97 % empty from 562 to 680 s).
Y: the product's processes at nice 5 below the twin — frames 0.62 filled, recall 0.70: the
collectors, not the twin, are what runs short. Z (ingest server at nice 0, as shipped): every
invariant held — recall / precision 0.83 / 1.00, no false alert, port.json p95 730 ms, 4 of 4
nameable culprits named (too few to judge: the check needs 5). The same four hops as S, U, V and W
are missed, in the block's minute, where the job's own probe (the twin's reporter process, 30-43 %
of a core), the ingest and the pages' matrix folds (up to 70 MB/s of writes) together leave the
collectors short. Z:

    BENCH scale ports=16896 collector=gnmi minutes=12.0 lost_ticks=0 no_data_ticks=2
    frame_lag_s_max=2.91 twin_tick_hz=7.92 twin_late_ticks=1685 twin_job_share=1.0
    pixel_p95_ms=906.0 cpu_us_per_port_s_twin=41.45 cpu_us_per_port_s_detection=5.93
    cpu_us_per_port_s_web=5.39 cpu_us_per_port_s_redis=3.92 cpu_us_per_port_s_other=1.33
    cpu_us_per_port_s_ingest=0.68 cpu_us_per_port_s_framing=1.43 cpu_us_per_port_s_collection=45.99
    box_share=0.896 peak_rss_mb_twin=1568 peak_rss_mb_worker=1304 peak_rss_mb_evaluation=360
    peak_rss_mb_delivery=232 peak_rss_mb_beat=140 peak_rss_mb_web=471 peak_rss_mb_ingest=176
    peak_rss_mb_redis=620

2026-12-07 evening, on another machine of the same kind (framing replay 58-70 ms a tick, against
~24 ms on the machine above; the twin ticked 5.9-7.1 Hz). The phase views now read a large run's
matrix parts without folding them (bench/matrix_read.py: 6 ms a refresh and nothing written,
against 293 ms and 84 MB a refresh settling first). Sampled from /proc beside run C, the pages'
process wrote 0 MB/s through the block's minute (up to 70 MB/s in Y). But every run on this
machine failed the detection invariants, the code before the change (B) as well: A (phase views
reading parts) recall / precision 0.65 / 0.71; B (398f1d0, as before) 0.73 / 0.89 and the first
alert 69.7 s late; C (as A) 0.59 / 0.68, twin 5.88 Hz. Besides the block's four hops, hops all
through these runs were found 2.9-3.1 s after they happened, past the 2.5 s tolerance, with hot
sets that first held some of the SUs' leaves (frames part-filled): on a box this much slower the
collectors and the twin do not keep up with 16,896 ports at 1 s. C also caught a twin bug: a gNMI
read whose instant the ticker pruned between the read's check and the queue read raised and ended
that switch's stream (fixed: FabricQueues reads or_oldest). B:

    BENCH scale ports=16896 collector=gnmi minutes=12.0 lost_ticks=0 no_data_ticks=8
    frame_lag_s_max=3.8 twin_tick_hz=7.14 twin_late_ticks=2147 twin_job_share=1.0 pixel_p95_ms=921.0
    cpu_us_per_port_s_twin=42.65 cpu_us_per_port_s_detection=5.55 cpu_us_per_port_s_web=5.73
    cpu_us_per_port_s_redis=4.31 cpu_us_per_port_s_other=1.47 cpu_us_per_port_s_ingest=0.79
    cpu_us_per_port_s_framing=4.13 cpu_us_per_port_s_collection=41.5 box_share=0.897

2026-12-08, a third machine whose speed moved through the session (framing replay 29-47 ms a tick).
py-spy on a collection process: 37 % of its samples were blocking Redis round trips on its event
loop, two a switch a tick (the slice's report and the health write); they are now one pipeline a
shard tick (FabricFramer.report_many). A collector subscribes to the 12 counters the frame metrics
read, not 16. A move first seen in a straddle is dated there. Runs (12 min, --record):
A (the code before, 29.4 ms) 0.78 / 0.95, only recall failed; its replay with the straddle dating
0.83 / 1.00. D (all three, 29.4 ms): every invariant held — recall / precision 0.83 / 0.95, no
false alert, 13 of 14 culprits named, 0 lost ticks, 0 tracebacks, collection 39.5 us a port-second
(42.8 in A). Also tried: the twin writing its gNMI samples as protobuf wire bytes (numpy) and
sending them as they are, cheaper for the twin (44.9 -> 38.3 us) — but the twin then kept up with
every sample it owes (two a second a switch: it had been skipping samples it fell behind on), and
the collectors decoding them all cost more than the twin saved (54.1 us, box 0.94 busy): B and C
(47 and 42 ms, a slow stretch) 0.14 / 0.33 and 0.70 / 0.64 with 30 and 11 leases lost, E (32 ms)
0.78 / 0.90 and 5 of 8 culprits named. Reverted. So at 16,896 ports on this box the collectors'
decoding is the stage with no headroom, and the twin's skipped samples hide part of its cost. F
(D's code again, in a slower stretch: 40.4 ms) also held every invariant — 0.83 / 0.95, no false
alert, 3 of 3 culprits named, 0 lost ticks, pixel p95 418 ms, collection 39.3 us. In both, the
only misses are the job's block minute's four hops, so a run passes by one miss (19 of 23). D:

    BENCH scale ports=16896 collector=gnmi minutes=12.0 lost_ticks=0 no_data_ticks=0
    frame_lag_s_max=2.34 twin_tick_hz=7.03 twin_late_ticks=2267 twin_job_share=1.0 pixel_p95_ms=587.0
    cpu_us_per_port_s_twin=44.87 cpu_us_per_port_s_detection=6.43 cpu_us_per_port_s_web=5.24
    cpu_us_per_port_s_redis=3.19 cpu_us_per_port_s_other=1.43 cpu_us_per_port_s_ingest=0.68
    cpu_us_per_port_s_framing=1.74 cpu_us_per_port_s_collection=39.49 box_share=0.871
    peak_rss_mb_twin=1382 peak_rss_mb_worker=1221 peak_rss_mb_evaluation=424 peak_rss_mb_web=449

    .venv/bin/python bench/scale.py [--minutes 10] [--warmup-s 90] [--servers 672 --spines 8] [--record]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import soak
from scale_score import cpu_us_per_port_s, peak_mb, pixel_latencies_ms, stage_cpu
from soak_score import NS, lost_ticks, p95

from fabricmon import demo
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_load import load_fabric
from fabricmon.telemetry import live_window
from fabricmon.telemetry.framing import FabricFramer

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# the jobs' event posts on their own server (demo's "ingest"): the twin job's reported steps are
# ~50 CPU s of ingest in ~10 s, which in the pages' process took port.json's p95 to 975 ms
SERVICES = ("worker", "evaluation", "delivery", "beat", "web", "ingest")
CLK_TCK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
WORKER_CONCURRENCY = 6  # fabricmon.demo's worker_concurrency


def proc_cpu_s(pid: int, *, reaped: bool) -> float:
    """utime + stime of one process (+ its reaped children's with ``reaped``), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if reaped else 0)
    return ticks / CLK_TCK


def tree_cpu_s(pid: int) -> float:
    """A process tree's CPU: every live descendant's, plus what the root reaped (a pool child that
    was replaced still counts)."""
    return proc_cpu_s(pid, reaped=True) + sum(tree_cpu_s(c) for c in soak.children(pid))


class Scale(soak.Soak):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.lag_s: list[float] = []  # wall clock minus the newest frame's tick, at each sample
        self.cpu: list[tuple[float, dict[str, float]]] = []  # (elapsed, name → tree CPU s)
        self.draws: list[dict[str, float]] = []
        # (elapsed, twin simulation ticks, seconds its job stalled behind real time; -1: no answer)
        self.twin_ticks: list[tuple[float, int, float, int]] = []
        self.measure_from_ms = 0.0
        self.window: tuple[float, float] = (0.0, 0.0)  # measured span, elapsed s
        # the moving-incast detector's hot set after each evaluation (its Redis state, read every
        # loop turn): what the product saw, window by window, beside the twin's truth in the raw file
        self.hot_states: list[dict[str, object]] = []
        self.state_redis: redis.Redis | None = None
        # --record: the twin's phase events (when each all-to-all ran, its hot GPU), beside the frames
        self.phases: dict[tuple[int, int, str], dict[str, object]] = {}
        self.phases_t_ns = 0
        # One shard per pool child: at the default 16 switches a shard, 176 switches are 11 shards
        # for the worker's 6 pool children — 5 shards never collected, every tick framed at its
        # deadline with their ports NaN (the first 16k run)
        switches = math.ceil(args.servers / 32) * args.gpus_per_server + args.spines
        self.sup.env.setdefault("FABRICMON_SHARD_SIZE", str(math.ceil(switches / WORKER_CONCURRENCY)))

    def live_window_s(self) -> float:
        return float(self.sup.env.get("FABRICMON_LIVE_WINDOW_S", 600))

    def memory_bounds(self) -> dict[str, float]:
        """The soak's bounds, with Redis' sized by the live window it holds by design (README:
        window × ports × metrics × 4 B, ~450 MB at 16,896 ports): 1.5 × that (the stream's entries,
        the allocator) + 100 MB for the rest (slices being framed, queues, alert state). The soak's
        300 MB is stated for its 768 ports."""
        ports, metrics = self.rec.frame_shape
        window_mb = self.live_window_s() * ports * metrics * 4 / 1e6
        return {**super().memory_bounds(), "redis": 100 + 1.5 * window_mb}

    def growth_from_s(self, end_s: float) -> float:
        """Redis (the window) and the web process (its decoded counters for the phase view) grow
        until the live window is full: judged from then (and at least from half time)."""
        full = (self.rec.first_frame_s or 0.0) + self.live_window_s() + 30
        return max(end_s / 2, full)

    def start(self) -> None:
        self.redis.start()
        self.sup.env["REDIS_URL"] = self.redis.url
        a = self.args
        extra = ["--regime-shift-prob", str(a.regime_shift_prob), "--balanced-cycle", a.balanced_cycle,
                 "--ep-size", str(a.ep_size), "--step-gap-ms", str(a.step_gap_ms)]
        queues = demo.queue_names(self.sup.env)
        self.stack = demo.start_stack(self.sup, self.var_dir, a, twin_extra=extra, services=SERVICES,
                                      overrides={"worker_queues": queues["collection_queue"],
                                                 "worker_concurrency": str(WORKER_CONCURRENCY),
                                                 "report_every_steps": str(a.report_every_steps),
                                                 "collector": a.collector},
                                      twin_wait_s=600)
        self.log_in()
        self.spec = load_fabric((self.var_dir / "twin-topology.yaml").read_text())
        self.ports = len(build_port_index(self.spec))
        self.t0 = time.monotonic()
        print(f"scale: {self.ports} ports on {len(self.spec.switches)} switches; warm-up {a.warmup_s:g} s, "
              f"then {a.minutes:g} min in {self.var_dir} (dashboard {self.stack.web_url}, user demo, "
              f"password {self.stack.password})", flush=True)

    def sample(self) -> None:
        before = len(self.rec.frames)
        super().sample()
        if len(self.rec.frames) > before:
            self.lag_s.append((time.time_ns() - self.rec.frames[-1][0]) / NS)
        self.cpu.append((self.elapsed(), {n: tree_cpu_s(p) for n, p in self.pids().items()}))
        self.twin_ticks.append((self.elapsed(), *twin_ticks(self.stack.twin_url)))

    def sample_hot_set(self) -> None:
        """The detector's state as the last evaluation left it, once per window it evaluated."""
        if self.state_redis is None:
            self.state_redis = connect(self.redis.url)
        raw = self.state_redis.get(keys.alerts_state(self.stack.fabric))
        if not raw:
            return
        saved = json.loads(raw)
        if self.hot_states and self.hot_states[-1]["hot_ts"] == saved.get("hot_ts"):
            return
        self.hot_states.append({"elapsed": round(self.elapsed(), 2), "at_ns": time.time_ns(),
                                **{k: saved.get(k) for k in ("hot_ts", "hot", "since", "migrations", "gap")}})

    def record(self) -> None:
        """Drains the live window into the recording (the window holds ten minutes)."""
        self.drain_recording()
        now = time.time_ns()
        if now - self.phases_t_ns < 60 * NS:
            return  # the twin's phases once a minute: its HTTP answers share the twin's one core
        since = self.phases_t_ns - 5 * NS if self.phases_t_ns else now - 600 * NS
        try:
            with urllib.request.urlopen(f"{self.stack.twin_url}/phases?t1_ns={since}&t2_ns={now}",
                                        timeout=30) as resp:
                for ph in json.loads(resp.read())["phases"]:
                    self.phases[(int(ph["step"]), int(ph["layer"]), str(ph["phase"]))] = ph
            self.phases_t_ns = now
        except (OSError, ValueError) as exc:
            self.rec.notes.append(f"phases at {self.elapsed():.0f}s: {exc}")

    def open_heatmap(self, browser):  # type: ignore[no-untyped-def]
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        page.on("console", lambda m: self.rec.console_errors.append(f"heatmap: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.rec.console_errors.append(f"heatmap: {e}"))
        path = f"/fabric/{urllib.parse.quote(self.stack.fabric)}/"
        page.goto(f"{self.stack.web_url}/accounts/login/?next={urllib.parse.quote(path)}")
        page.fill("input[name=username]", "demo")
        page.fill("input[name=password]", self.stack.password)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        page.wait_for_function("window.fabricmon && fabricmon.state.columns >= 1", timeout=300_000,
                               polling=1000)
        return page

    def run(self) -> dict[str, object]:
        from playwright.sync_api import sync_playwright

        a = self.args
        total = a.warmup_s + a.minutes * 60
        next_sample = next_pages = next_progress = next_record = 0.0
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = self.open_heatmap(browser)
            print(f"scale: {self.elapsed():.0f}s the heatmap draws", flush=True)
            while self.elapsed() < total:
                dead = self.sup.dead()
                if dead:
                    raise SystemExit(f"scale: {dead} exited:\n" + "\n".join(self.sup.tail(n) for n in dead))
                now = self.elapsed()
                if not self.measure_from_ms and now >= a.warmup_s:
                    self.sample()  # the window's first CPU sample
                    self.window = (self.cpu[-1][0], 0.0)
                    self.measure_from_ms = float(page.evaluate("Date.now()"))
                    self.frames_from = len(self.rec.frames)
                    next_sample = now + a.sample_s
                if now >= next_sample:
                    self.sample()
                    next_sample = now + a.sample_s
                if now >= next_progress:
                    self.progress()
                    lag = f"{self.lag_s[-1]:.1f}" if self.lag_s else "?"
                    drawn = page.evaluate("fabricmon.state.draws.length")
                    print(f"scale: frame lag {lag} s, columns drawn {drawn}", flush=True)
                    next_progress = now + 60
                if now >= next_pages and now > 30:
                    self.pages()
                    next_pages = now + a.pages_s
                self.sample_hot_set()
                if a.record and now >= next_record:
                    self.record()
                    # every 10 s, ~7 MB of frames rather than 45 MB a minute out of the Redis the
                    # collectors write to (the minute-mark stalls first blamed on it were the
                    # cabling check's, since paced)
                    next_record = now + 10
                page.wait_for_timeout(500)  # lets Playwright deliver the page's console events
            self.sample()
            if a.record:
                self.record()
            self.window = (self.window[0], self.cpu[-1][0])
            self.draws = page.evaluate("fabricmon.state.draws")
            browser.close()
        self.framing_s = replay_framing(self.redis.url, self.spec, a.replay_ticks)
        return self.db_facts()


def twin_ticks(twin_url: str) -> tuple[int, float, int]:
    """How many times the twin's ticker ran (10 Hz when it keeps up), how long its job stalled
    because the twin fell behind real time (twin/schedule.py: past 2 s behind, the job pauses
    instead of owing the simulation), and how many counter ticks a late ticker laid after their
    time (twin/cluster.py). (-1, -1.0, -1): no answer."""
    try:
        with urllib.request.urlopen(twin_url + "/status", timeout=10) as resp:
            st = json.loads(resp.read())
        return int(st.get("ticks", -1)), float(st.get("job_stalled_s", 0.0)), int(st.get("late_ticks", -1))
    except (OSError, ValueError):
        return -1, -1.0, -1


def replay_framing(redis_url: str, spec, ticks: int) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds (this process) to frame one tick of ``spec``: every switch's gNMI-shaped slice
    encoded and reported to Redis, the last report assembling and appending the frame — what the
    collectors do per tick besides reading counters. Under its own fabric name, cleaned up after."""
    r = connect(redis_url)
    framer = FabricFramer(replace(spec, name=f"{spec.name}-framing-replay"), window_s=60)
    rng = np.random.default_rng(0)
    sizes = {name: sl.stop - sl.start for name, sl in framer.slices.items()}
    values = {name: {m: rng.uniform(0, 1, n).astype(np.float32) for m in METRICS}
              for name, n in sizes.items()}
    base = framer.frame_tick(time.time_ns()) - 10 * ticks * framer.frame_ns
    t0 = time.process_time()
    built = 0
    for k in range(ticks):
        tick = base + k * framer.frame_ns
        for name in framer.due(tick):
            blob = Frame(name, framer.index.version, tick + framer.frame_ns, 1.0, values[name]).encode()
            built += framer.report(r, name, tick, blob) is not None
    took = time.process_time() - t0
    live_window.forget(r, framer.fabric)
    r.delete(keys.latest_slices(framer.fabric))
    if built < ticks:
        print(f"scale: note the framing replay built {built} of {ticks} frames", flush=True)
    return took / max(1, ticks)


def figures(sc: Scale, verdict_fig: dict[str, object]) -> dict[str, object]:
    (w0, w1), a = sc.window, sc.args
    wall = max(1e-9, w1 - w0)
    cpu0 = next(c for t, c in sc.cpu if t >= w0)
    cpu1 = sc.cpu[-1][1]
    ticks = round(wall)  # one frame tick a second
    stages = stage_cpu(cpu0, cpu1, framing_cpu_per_tick_s=sc.framing_s, ticks=ticks)
    per = {k: cpu_us_per_port_s(v, sc.ports, wall) for k, v in stages.items()}
    measured = [f for f in sc.rec.frames if f[0] / NS >= sc.measure_from_ms / 1e3]
    tc = lost_ticks(measured, NS)
    lat = pixel_latencies_ms(sc.draws, sc.measure_from_ms)
    answered = [(t, n, st, late) for t, n, st, late in sc.twin_ticks if n >= 0 and t >= w0]
    span = answered[-1][0] - answered[0][0] if len(answered) >= 2 else 0.0
    twin_hz = (answered[-1][1] - answered[0][1]) / span if span > 0 else float("nan")
    # the share of wall time the twin's job ran (1: it kept up; the rest it stalled, its ports idle)
    job_share = 1.0 - (answered[-1][2] - answered[0][2]) / span if span > 0 else float("nan")
    return {
        "ports": sc.ports, "switches": len(sc.spec.switches), "collector": sc.args.collector,
        "minutes": round(wall / 60, 1),
        "frames": len(measured), "expected_ticks": tc.expected, "lost_ticks": tc.missing,
        "no_data_ticks": tc.no_data, "frame_lag_s_max": round(max(sc.lag_s, default=float("nan")), 2),
        "frame_lag_s_p95": round(p95(sc.lag_s), 2),
        "twin_ticks_end": sc.twin_ticks[-1][1] if sc.twin_ticks else -1,
        "twin_job_stalled_s_end": sc.twin_ticks[-1][2] if sc.twin_ticks else -1.0,
        # counter ticks laid late in the measured span (each with its own span's traffic)
        "twin_late_ticks": answered[-1][3] - answered[0][3] if len(answered) >= 2 else -1,
        "twin_tick_hz": round(twin_hz, 2),  # the twin's target: 10
        "twin_job_share": round(job_share, 3),
        "pixel_columns": len(lat), "pixel_p50_ms": round(float(np.median(lat)), 0) if lat else float("nan"),
        "pixel_p95_ms": round(p95(lat), 0), "pixel_max_ms": round(max(lat, default=float("nan")), 0),
        "cpu_s": {k: round(v, 1) for k, v in stages.items()},
        "cpu_us_per_port_s": {k: round(v, 2) for k, v in per.items()},
        # the share of the box the product and twin use: ≥ 1 means it cannot keep up on these cores
        "box_share": round(sum(stages.values()) / (CORES * wall), 3),
        "framing_replay_ms_per_tick": round(sc.framing_s * 1e3, 1),
        "peak_pss_mb": {k: round(v) for k, v in peak_mb(sc.rec.rss).items()},
        "soak": {k: verdict_fig[k] for k in ("recall", "precision", "false_alerts", "page_p95_ms",
                                              "console_errors", "http_5xx", "tracebacks")},
        "warmup_s": a.warmup_s,
    }


def bench_line(fig: dict[str, object]) -> str:
    per, peak = fig["cpu_us_per_port_s"], fig["peak_pss_mb"]
    parts = [f"ports={fig['ports']}", f"collector={fig['collector']}", f"minutes={fig['minutes']}",
             f"lost_ticks={fig['lost_ticks']}",
             f"no_data_ticks={fig['no_data_ticks']}", f"frame_lag_s_max={fig['frame_lag_s_max']}",
             f"twin_tick_hz={fig['twin_tick_hz']}", f"twin_late_ticks={fig['twin_late_ticks']}",
             f"twin_job_share={fig['twin_job_share']}",
             f"pixel_p95_ms={fig['pixel_p95_ms']}"]
    parts += [f"cpu_us_per_port_s_{k}={v}" for k, v in per.items()]  # type: ignore[attr-defined]
    parts += [f"box_share={fig['box_share']}"]
    parts += [f"peak_rss_mb_{k}={v}" for k, v in peak.items()]  # type: ignore[attr-defined]
    return "BENCH scale " + " ".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/scale.py", description=__doc__.split("\n\n")[0])
    demo.add_stack_args(ap)
    # 704 servers x 8 GPUs in 22 SUs and 8 spines: 16,896 ports (the nearest above 16,384: a 22nd SU)
    ap.set_defaults(servers=704, gpus_per_server=8, spines=8, port=0)  # port 0: a free one, never 8000
    ap.add_argument("--minutes", type=float, default=10.0, help="measured minutes, after the warm-up")
    ap.add_argument("--warmup-s", type=float, default=90.0)
    ap.add_argument("--replay-ticks", type=int, default=20)
    ap.add_argument("--ep-size", type=int, default=256, help="the twin job's expert-parallel group (GPUs)")
    ap.add_argument("--report-every-steps", type=int, default=64,
                    help="the twin job reports 4 consecutive steps of every 4 x this many: 64 is one block "
                         "in ~10 minutes at ~0.4 steps a second, too few for the culprit invariant; 16 (a "
                         "block every ~2.5 minutes) judges culprits, but posting 5,632 ranks' events "
                         "takes the 2-core box ~50 s a block and the twin's streams go stale meanwhile")
    ap.add_argument("--step-gap-ms", type=float, default=2000.0,
                    help="the twin job's backward + optimizer per step: a 5,632-GPU MoE step takes seconds; "
                         "at the demo's 40 ms the twin simulates ~6 steps (~100 all-to-alls) a second, more "
                         "than the one core its process can have beside the product")
    ap.add_argument("--collector", choices=("gnmi", "both", "snmp"), default="gnmi",
                    help="load_topology --collector: gnmi (default: SNMP at 1 s beside gNMI for 16,896 "
                         "ports does not fit on 2 cores with the twin answering both), or both as the demo")
    ap.add_argument("--record", action="store_true",
                    help="keep every frame's detection metrics in frames.npz beside scale-raw.json, to "
                         "replay detection offline (bench/detect_replay.py); ~0.4 MB a frame at 16,896 ports")
    soak.add_watch_args(ap)
    # The soak's 0.01 jumps a step and 900,300-step cycle are ~1 migration a minute at the demo's
    # ~10 steps a second; at this job's ~0.3-0.5 steps a second they were ~3 migrations and no
    # balanced stretch in ten minutes, nothing to score. A jump every ~10 steps (20-40 s) and 60
    # skewed, 20 balanced steps give tens of migrations and balanced stretches in the run.
    ap.set_defaults(regime_shift_prob=0.1, balanced_cycle="60,20")
    args = ap.parse_args(argv)
    args.kills, args.redis_outage_s = 0, 0.0  # soak.verdict's: no faults here
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sc = Scale(args)
    facts = sc.run_to_end()
    verdict_fig, problems = soak.verdict(sc, facts)
    fig = figures(sc, verdict_fig)
    (sc.var_dir / "scale.json").write_text(json.dumps({"figures": fig, "soak": verdict_fig,
                                                       "problems": problems, "notes": sc.rec.notes,
                                                       "cpu": sc.cpu, "lag_s": sc.lag_s}, default=str))
    # what recall and precision were scored from (the twin's hotspot stretches, the episodes'
    # trajectories, the alerts), as the soak keeps it: the run's own stack is gone afterwards
    raw = {"hotspots": sc.rec.hotspots, "facts": facts, "rss": sc.rec.rss, "hot_states": sc.hot_states,
           "frames": sc.rec.frames, "frame_detail": sc.rec.frame_detail}
    (sc.var_dir / "scale-raw.json").write_text(json.dumps(raw, default=str))
    if sc.recorder is not None:
        sc.recorder.save(sc.var_dir / "frames.npz")
        (sc.var_dir / "phases.json").write_text(json.dumps(sorted(sc.phases.values(),
                                                                  key=lambda p: int(p["start_ns"]))))
    print(json.dumps(fig, indent=2, default=str))
    for p in problems:
        print(f"scale: soak invariant FAIL {p}")
    for n in sc.rec.notes:
        print(f"scale: note {n}")
    print(bench_line(fig))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
