"""A real gloo MoE job that keeps training (and posting through the probe) while the server is down:
the toy MoE of ``moe_ranks`` (dispatch / combine all-to-alls, forward and backward), one step every
``--step-s`` seconds, so a server restart falls in the middle of the run.

Run: python tests/jobs/outage_ranks.py OUT_DIR BASE_URL TOKEN RUN_ID [--world 4 --layers 2
     --steps 60 --step-s 0.5 --close-timeout-s 120]
Each rank writes to OUT_DIR ``ids_rank{r}.json`` (the id of every event its probe emitted) and
``poster_rank{r}.json`` (the poster's stats, the spool's peak, how long close() took).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from moe_ranks import HIDDEN, AllToAll, spawn_ranks  # the same Megatron a2a and command line

from collectors.probe import A2AProbe, EventPoster, IngestClient


def more_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step-s", type=float, default=0.5)
    parser.add_argument("--close-timeout-s", type=float, default=120.0)


def rank_main(rank: int, args: argparse.Namespace) -> None:
    world, out = args.world, Path(args.out)
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank, world_size=world)
    ep = dist.new_group(list(range(world)), group_desc="ep")
    poster = EventPoster(IngestClient(args.base_url, args.token), args.run_id, batch_size=16, flush_interval_s=0.2)
    probe = A2AProbe(sink=poster, keep=True, trace_labels=False).install()
    torch.manual_seed(1234 + rank)
    experts = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(args.layers)]
    peak_events = peak_bytes = 0
    t0 = time.monotonic()
    for step in range(args.steps):
        probe.set_step(step)
        h = torch.randn(8 + rank * 3, HIDDEN, requires_grad=True)
        for layer in range(args.layers):
            rows = h.shape[0]
            in_splits = [rows // world] * world
            in_splits[(layer + step) % world] += rows - sum(in_splits)  # the hot expert gets the rest
            gathered = [torch.empty(world, dtype=torch.long) for _ in range(world)]
            dist.all_gather(gathered, torch.tensor(in_splits))
            out_splits = [int(gathered[src][rank]) for src in range(world)]
            with probe.phase(layer, "dispatch"):
                routed = AllToAll.apply(h, out_splits, in_splits, ep)
            with probe.phase(layer, "combine"):
                h = AllToAll.apply(torch.relu(experts[layer](routed)), in_splits, out_splits, ep)
        h.pow(2).sum().backward()
        events, size = poster.spooled
        peak_events, peak_bytes = max(peak_events, events), max(peak_bytes, size)
        time.sleep(max(t0 + (step + 1) * args.step_s - time.monotonic(), 0))  # a steady pace
    dist.barrier()
    closing = time.monotonic()
    stats = poster.close(timeout_s=args.close_timeout_s)
    (out / f"ids_rank{rank}.json").write_text(json.dumps([e["id"] for e in probe.recorded]))
    (out / f"poster_rank{rank}.json").write_text(json.dumps({
        **stats.__dict__, "lost": stats.lost, "probe_errors": probe.errors, "peak_spool_events": peak_events,
        "peak_spool_bytes": peak_bytes, "close_s": round(time.monotonic() - closing, 2),
    }))  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    spawn_ranks(rank_main, more_args)
