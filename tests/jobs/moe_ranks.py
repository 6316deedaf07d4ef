"""A real multi-process MoE job for the probe test: gloo on CPU, N ranks, a toy MoE with L layers
(router → dispatch all-to-all → expert → combine all-to-all), forward and backward, profiled
with Kineto and Flight Recorder, with the probe posting to a live fabricmon server.

Run: python tests/jobs/moe_ranks.py OUT_DIR BASE_URL TOKEN RUN_ID [--world 4 --layers 2 --steps 2]
Each rank writes to OUT_DIR: ``truth_rank{r}.json`` (the splits and row bytes it actually used,
per call, independent of the probe), ``kineto_rank{r}.json``, ``fr_rank{r}.json`` and
``fr_rank{r}.pkl`` (Flight Recorder JSON and pickle dumps), ``poster_rank{r}.json`` (stats).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collectors.probe import A2AProbe, EventPoster, IngestClient

HIDDEN = 4


class AllToAll(torch.autograd.Function):
    """Megatron's pattern: backward is the same a2a with the splits swapped."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):  # type: ignore[no-untyped-def]
        ctx.out_splits, ctx.in_splits, ctx.group = out_splits, in_splits, group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        out = grad.new_empty((sum(ctx.in_splits), *grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return out, None, None, None


def rank_main(rank: int, args: argparse.Namespace) -> None:
    world = args.world
    out = Path(args.out)
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank, world_size=world)
    ep = dist.new_group(list(range(world)), group_desc="ep")
    client = IngestClient(args.base_url, args.token)
    poster = EventPoster(client, args.run_id, batch_size=16, flush_interval_s=0.2)
    probe = A2AProbe(sink=poster).install()  # posts this rank's rank-map entry
    torch.manual_seed(1234 + rank)
    experts = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(args.layers)]
    truth: list[dict] = []

    def a2a_truth(step: int, layer: int, phase: str, in_splits: list[int], out_splits: list[int]) -> None:
        truth.append(
            {
                "step": step,
                "layer": layer,
                "phase": phase,
                "in_splits": in_splits,
                "out_splits": out_splits,
                "row_bytes": HIDDEN * 4,
            }
        )

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(args.steps):
            probe.set_step(step)
            x = torch.randn(8 + rank * 3, HIDDEN, requires_grad=True)
            h = x
            for layer in range(args.layers):
                # uneven, step- and layer-dependent routing: tokens to each peer
                rows = h.shape[0]
                weights = torch.tensor(
                    [(rank + layer + step + d) % world + 1 for d in range(world)], dtype=torch.float
                )
                in_splits = [int(rows * w / weights.sum()) for w in weights]
                in_splits[-1] = rows - sum(in_splits[:-1])
                counts = torch.tensor(in_splits)
                gathered = [torch.empty(world, dtype=torch.long) for _ in range(world)]
                dist.all_gather(gathered, counts)  # the exchange of counts (not an a2a)
                out_splits = [int(gathered[src][rank]) for src in range(world)]
                with probe.phase(layer, "dispatch"):
                    routed = AllToAll.apply(h, out_splits, in_splits, ep)
                a2a_truth(step, layer, "dispatch", in_splits, out_splits)
                expert_out = torch.relu(experts[layer](routed))
                with probe.phase(layer, "combine"):
                    h = AllToAll.apply(expert_out, in_splits, out_splits, ep)
                a2a_truth(step, layer, "combine", out_splits, in_splits)
            loss = h.pow(2).sum()
            loss.backward()
            # backward runs the a2as in reverse: combine_bwd then dispatch_bwd, last layer first
            for layer in reversed(range(args.layers)):
                fwd = {
                    t["phase"]: t
                    for t in truth
                    if t["step"] == step and t["layer"] == layer and not t["phase"].endswith("_bwd")
                }
                for phase in ("combine", "dispatch"):
                    f = fwd[phase]
                    a2a_truth(step, layer, phase + "_bwd", f["out_splits"], f["in_splits"])
    dist.barrier()
    prof.export_chrome_trace(str(out / f"kineto_rank{rank}.json"))
    c10d = torch._C._distributed_c10d
    (out / f"fr_rank{rank}.json").write_bytes(c10d._dump_fr_trace_json(True, False))
    (out / f"fr_rank{rank}.pkl").write_bytes(c10d._dump_fr_trace(True, True, False))
    stats = poster.close()
    (out / f"truth_rank{rank}.json").write_text(json.dumps(truth))
    (out / f"poster_rank{rank}.json").write_text(
        json.dumps(
            {**stats.__dict__, "clock_offset_ns": poster.clock_offset_ns, "probe_errors": probe.errors}
        )
    )
    dist.destroy_process_group()


def spawn_ranks(
    rank_main: Callable[[int, argparse.Namespace], None],
    more_args: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """The gloo jobs' command line (OUT_DIR BASE_URL TOKEN RUN_ID [--world --layers --steps], and
    what ``more_args`` adds), then ``rank_main`` in one process per rank."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("base_url")
    parser.add_argument("token")
    parser.add_argument("run_id", type=int)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    if more_args is not None:
        more_args(parser)
    args = parser.parse_args()
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    torch.set_num_threads(1)
    mp.spawn(rank_main, args=(args,), nprocs=args.world, join=True)


def main() -> None:
    spawn_ranks(rank_main)


if __name__ == "__main__":
    main()
