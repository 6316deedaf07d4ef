"""A real 4-rank gloo job that uses every common collective, for the whole-job trace import test.

Per profiler step (``torch.profiler`` with a schedule, so the trace carries ``ProfilerStep#N``):
broadcast, allreduce, allgather (list form), reduce_scatter (list form), the list form
``all_to_all`` (even: gloo refuses unequal list tensors), then per MoE layer a counts allgather and the dispatch / combine
``all_to_all_single`` with skewed MoE-like splits (rank 0 is the hot expert), each inside a
Megatron-LM-style ``record_function`` name (``decoder.layers.{L}.mlp.token_dispatch`` — the names of
job_events.md §6.2); autograd's backward runs the swapped all-to-alls with no label in the trace.
The probe records every ``all_to_all_single`` and posts it (``trace_labels=False``: the trace keeps
only the job's own names, as a job without the probe would have).

Run: python tests/jobs/collective_ranks.py OUT_DIR BASE_URL TOKEN RUN_ID [--world 4 --layers 2 --steps 2]
Each rank writes to OUT_DIR: ``kineto_rank{r}.json``, ``truth_rank{r}.json`` (every collective it
issued with its input/output bytes, independent of any importer), ``poster_rank{r}.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from moe_ranks import AllToAll, spawn_ranks  # the same Megatron a2a and command line (tests/jobs)

from collectors.probe import A2AProbe, EventPoster, IngestClient

HIDDEN = 4
F32 = 4


def skewed_splits(rows: int, rank: int, layer: int, step: int, world: int) -> list[int]:
    """MoE-like routing: the hot expert (rank ``(layer + step) % world``) gets most tokens."""
    hot = (layer + step) % world
    weights = [6.0 if d == hot else 1.0 + ((rank + d) % 2) for d in range(world)]
    splits = [int(rows * w / sum(weights)) for w in weights]
    splits[hot] += rows - sum(splits)
    return splits


def rank_main(rank: int, args: argparse.Namespace) -> None:
    world = args.world
    out = Path(args.out)
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank, world_size=world)
    ep = dist.new_group(list(range(world)), group_desc="ep")
    client = IngestClient(args.base_url, args.token)
    poster = EventPoster(client, args.run_id, batch_size=16, flush_interval_s=0.2)
    probe = A2AProbe(sink=poster, trace_labels=False).install()
    torch.manual_seed(1234 + rank)
    experts = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(args.layers)]
    truth: list[dict] = []

    def note(step: int, collective: str, bytes_in: int, bytes_out: int, **extra: object) -> None:
        truth.append({"step": step, "collective": collective, "bytes_in": bytes_in, "bytes_out": bytes_out, **extra})

    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    def export(prof: profile) -> None:
        prof.export_chrome_trace(str(out / f"kineto_rank{rank}.json"))

    sched = schedule(wait=0, warmup=0, active=args.steps, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched, on_trace_ready=export
    ) as prof:
        for step in range(args.steps):
            probe.set_step(step)
            n = 16 + step
            b = torch.full((n,), float(rank))
            dist.broadcast(b, src=0)
            note(step, "broadcast", n * F32, n * F32)
            g = torch.randn(64)
            dist.all_reduce(g)
            note(step, "allreduce", 64 * F32, 64 * F32)
            parts = [torch.empty(8) for _ in range(world)]
            dist.all_gather(parts, torch.randn(8))
            note(step, "allgather", 8 * F32, world * 8 * F32)
            rs_out = torch.empty(6)
            dist.reduce_scatter(rs_out, [torch.randn(6) for _ in range(world)])
            note(step, "reduce_scatter", world * 6 * F32, 6 * F32)
            # the list form (gloo wants equal tensors: 3 + step rows of HIDDEN to every peer)
            send_rows = recv_rows = [3 + step] * world
            ins = [torch.randn(k, HIDDEN) for k in send_rows]
            outs = [torch.empty(k, HIDDEN) for k in recv_rows]
            dist.all_to_all(outs, ins, group=ep)
            note(
                step, "all_to_all", sum(send_rows) * HIDDEN * F32, sum(recv_rows) * HIDDEN * F32,
                send_per_peer={str(d): k * HIDDEN * F32 for d, k in enumerate(send_rows)},
                recv_per_peer={str(s): k * HIDDEN * F32 for s, k in enumerate(recv_rows)},
            )
            x = torch.randn(12 + rank * 3, HIDDEN, requires_grad=True)
            h = x
            for layer in range(args.layers):
                in_splits = skewed_splits(h.shape[0], rank, layer, step, world)
                gathered = [torch.empty(world, dtype=torch.long) for _ in range(world)]
                dist.all_gather(gathered, torch.tensor(in_splits))
                note(step, "allgather", world * 8, world * world * 8)
                out_splits = [int(gathered[src][rank]) for src in range(world)]
                with record_function(f"decoder.layers.{layer}.mlp.token_dispatch"), probe.phase(layer, "dispatch"):
                    routed = AllToAll.apply(h, out_splits, in_splits, ep)
                expert_out = torch.relu(experts[layer](routed))
                with record_function(f"decoder.layers.{layer}.mlp.token_combine"), probe.phase(layer, "combine"):
                    h = AllToAll.apply(expert_out, in_splits, out_splits, ep)
                for phase, sent, got in (("dispatch", in_splits, out_splits), ("combine", out_splits, in_splits)):
                    note(step, "all_to_allv", sum(sent) * HIDDEN * F32, sum(got) * HIDDEN * F32,
                         layer=layer, phase=phase)
                    note(step, "all_to_allv", sum(got) * HIDDEN * F32, sum(sent) * HIDDEN * F32,
                         layer=layer, phase=phase + "_bwd")
            h.pow(2).sum().backward()
            prof.step()
    dist.barrier()
    stats = poster.close()
    (out / f"truth_rank{rank}.json").write_text(json.dumps(truth))
    (out / f"poster_rank{rank}.json").write_text(json.dumps({**stats.__dict__, "probe_errors": probe.errors}))
    dist.destroy_process_group()


def main() -> None:
    spawn_ranks(rank_main)


if __name__ == "__main__":
    main()
