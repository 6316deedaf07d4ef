"""The Kineto reader on hand-written traces of each generation, each with its expected counts,
bytes, per-peer maps and time kinds; and the import report of each (never a silent zero)."""

from __future__ import annotations

import pytest
from kineto_shapes import BASE, comm_args, nccl_call, trace, x

from collectors.traces import ImportReport, TraceFormatError, read_events
from collectors.traces.kineto import backward

AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
A2A_KERNEL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
OLD_AR_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def read(stream, **kw):  # type: ignore[no-untyped-def]
    report = ImportReport(kind="kineto")
    return list(read_events("kineto", stream, report=report, **kw)), report


def uneven_a2a(n_in: int = 200, n_out: int = 160, dtype: str = "BFloat16") -> dict:
    return comm_args(
        "all_to_allv",
        n_in,
        n_out,
        dtype,
        **{"In split size": "[1, 2, 3, 4]", "Out split size": "[4, 4, 4, 4]"},
    )


def test_kernels_with_args_give_gpu_time_bytes_and_peers() -> None:  # PyTorch >= 2.3
    events, report = read(
        trace(
            nccl_call(
                1000,
                "allreduce_",
                "nccl:all_reduce",
                AR_KERNEL,
                11,
                rpc=comm_args("allreduce", 64, 64),
                kernel_args=comm_args("allreduce", 64, 64, Seq=5),
            )
            + nccl_call(
                2000,
                "alltoall_base_",
                "nccl:all_to_all",
                A2A_KERNEL,
                21,
                rpc=uneven_a2a(),
                kernel_args=uneven_a2a(),
            )
        )
    )
    ar, a2a = events
    assert (ar["collective"], ar["bytes_sent"], ar["time_kind"], ar["seq"]) == (
        "allreduce",
        256,
        "gpu_kernel",
        5,
    )
    assert ar["start_ns"] == BASE + 1_100_000 and ar["end_ns"] == BASE + 1_300_000  # the kernel's span
    assert a2a["collective"] == "all_to_allv" and a2a["time_kind"] == "gpu_kernel"
    row = 200 // 10 * 2  # 20 elements per row, bf16
    assert a2a["send_bytes_per_peer"] == {"0": row, "1": 2 * row, "2": 3 * row, "3": 4 * row}
    assert a2a["recv_bytes_per_peer"] == dict.fromkeys("0123", 160 // 16 * 2 * 4)
    assert report.recognised[("allreduce", "record_param_comms")].bytes == 256
    assert "allreduce by NCCL RING (from the kernel name): message bytes only" in report.notes


def test_kernels_without_args_are_timed_by_the_kernel_and_sized_by_record_param_comms() -> None:  # 2.0-2.2
    events, report = read(
        trace(
            [
                e
                for i in range(3)
                for e in nccl_call(
                    1000 * (i + 1),
                    "allreduce_",
                    "nccl:all_reduce",
                    OLD_AR_KERNEL,
                    10 + 2 * i,
                    rpc=comm_args("allreduce", 1024, 1024, "Half"),
                )
            ]
        )
    )
    assert [e["bytes_sent"] for e in events] == [2048] * 3
    assert {e["time_kind"] for e in events} == {"gpu_kernel"}
    assert report.time_kinds == {"gpu_kernel": 3}


def test_record_param_comms_only_is_cpu_time_labelled_as_enqueue() -> None:
    events, _ = read(
        trace([x("cpu_op", "record_param_comms", 10, 5, **comm_args("_allgather_base", 8, 32, "Long"))])
    )
    (e,) = events
    assert (e["collective"], e["bytes_sent"], e["bytes_recv"], e["time_kind"]) == (
        "allgather",
        64,
        256,
        "host_enqueue",
    )


def test_annotations_only_are_imported_with_times_and_reported_without_sizes() -> None:  # PyTorch 1.x
    ann = [x("user_annotation", "nccl:all_to_all", 10 + 100 * i, 5) for i in range(42)]
    events, report = read(trace(ann))
    assert len(events) == 42 and {e["collective"] for e in events} == {"all_to_all"}
    assert report.recognised[("all_to_all", "annotation")].without_bytes == 42
    assert any("annotations without message sizes" in k for k in report.notes)


def test_kernels_without_args_only_are_counted_by_kind() -> None:
    kernels = [x("kernel", OLD_AR_KERNEL, 100 * i, 50, pid=0, tid=7) for i in range(10)]
    kernels += [
        x("kernel", "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*)", 5000 + i, 1, pid=0, tid=7)
        for i in range(4)
    ]
    events, report = read(trace(kernels))
    assert [e["collective"] for e in events].count("allreduce") == 10
    assert [e["collective"] for e in events].count("allgather") == 4
    assert report.recognised[("allreduce", "kernel name")].without_bytes == 10


def test_mixed_collectives_are_all_kept() -> None:
    evs = []
    t = 0.0
    for coll, name, n in (
        ("alltoall_base_", "all_to_all", 55),
        ("allreduce_", "allreduce", 10),
        ("_allgather_base_", "_allgather_base", 10),
        ("_reduce_scatter_base_", "reduce_scatter", 10),
    ):
        for _ in range(n):
            t += 100
            evs += nccl_call(
                t * 10,
                coll,
                f"nccl:{name}",
                A2A_KERNEL,
                int(t),
                rpc=comm_args(name, 16, 16),
                kernel_args=comm_args(name, 16, 16),
            )
    events, report = read(trace(evs))
    kinds = [e["collective"] for e in events]
    assert (
        kinds.count("all_to_all"),
        kinds.count("allreduce"),
        kinds.count("allgather"),
        kinds.count("reduce_scatter"),
    ) == (55, 10, 10, 10)
    a2a = next(e for e in events if e["collective"] == "all_to_all")
    assert a2a["send_bytes_per_peer"] == dict.fromkeys("0123", 16)  # even split, 4 ranks, float
    assert report.events == 85


@pytest.mark.parametrize(
    ("dtype", "itemsize"),
    [
        ("Long", 8),
        ("long", 8),
        ("long int", 8),
        ("BFloat16", 2),
        ("Float8_e4m3fn", 1),
        ("Double", 8),
        ("Byte", 1),
        ("Int", 4),
    ],
)
def test_dtype_table(dtype: str, itemsize: int) -> None:
    events, _ = read(
        trace([x("cpu_op", "record_param_comms", 10, 5, **comm_args("allreduce", 10, 10, dtype))])
    )
    assert events[0]["bytes_sent"] == 10 * itemsize


def test_rank_from_file_name_when_the_trace_has_none() -> None:
    ann = [x("cpu_op", "record_param_comms", 10, 5, **comm_args("allreduce", 1, 1))]
    events, report = read(trace(ann, rank=None), name="job/rank3/host_123.pt.trace.json")
    assert events[0]["rank"] == 3 and report.files[0]["rank_from"] == "file name"
    events, _ = read(trace(ann, rank=None), rank=5)
    assert events[0]["rank"] == 5
    with pytest.raises(TraceFormatError, match="give the rank"):
        read(trace(ann, rank=None), name="trace.json")


def test_steps_and_labels_from_profiler_steps_and_moe_annotations() -> None:
    evs = [
        x("user_annotation", "ProfilerStep#7", 0, 10_000),
        x("user_annotation", "ProfilerStep#8", 10_000, 10_000),
    ]
    for i, t in enumerate((1000, 11_000)):
        evs.append(x("user_annotation", f"moe/layer{i + 2}/combine", t - 10, 900))
        evs += nccl_call(t, "alltoall_base_", "nccl:all_to_all", A2A_KERNEL, 50 + i, rpc=uneven_a2a())
    events, report = read(trace(evs))
    assert [(e["step"], e["layer"], e["phase"]) for e in events] == [(7, 2, "combine"), (8, 3, "combine")]
    assert report.steps == {7, 8}


def test_a_file_with_collectives_and_no_usable_event_is_an_error_with_its_report() -> None:
    weird = [x("user_annotation", "nccl:frobnicate", 10, 5), x("cpu_op", "c10d::allreduce_", 20, 5)]
    stream = trace([weird[0]])
    with pytest.raises(TraceFormatError, match=r"none could be imported"):
        read(stream)


def test_no_collectives_at_all_is_an_empty_import() -> None:
    events, report = read(trace([x("cpu_op", "aten::mm", 1, 1)]))
    assert events == [] and report.ignored["CPU ops"] == 1


def _a2a(n_in: int, in_split: str, n_out: int, out_split: str) -> dict:
    return comm_args("all_to_allv", n_in, n_out, **{"In split size": in_split, "Out split size": out_split})


def test_backward_all_to_alls_take_the_layer_and_phase_of_the_forward_they_mirror() -> None:
    """Megatron's _AllToAll: the backward is the forward with the splits swapped, run in reverse
    order inside autograd's evaluate_function, with no label of its own."""
    dispatch, combine = _a2a(200, "[1, 2, 3, 4]", 160, "[4, 4, 4, 4]"), _a2a(160, "[4, 4, 4, 4]", 200, "[1, 2, 3, 4]")
    evs = [x("user_annotation", "ProfilerStep#1", 0, 100_000)]
    for t, phase, rpc in ((1000, "dispatch", dispatch), (2000, "combine", combine)):
        evs.append(x("user_annotation", f"decoder.layers.3.mlp.token_{phase}", t - 10, 900))
        evs += nccl_call(t, "alltoall_base_", "nccl:all_to_all", A2A_KERNEL, t, rpc=rpc)
    # backward: combine's first (it mirrors combine, and — the same bytes — the dispatch too:
    # last in, first out decides), then dispatch's, then one that mirrors nothing
    for t, rpc in ((5000, dispatch), (6000, combine), (7000, _a2a(40, "[10, 10, 10, 10]", 40, "[10, 10, 10, 10]"))):
        evs.append(x("cpu_op", "autograd::engine::evaluate_function: _AllToAllBackward", t - 5, 300))
        evs += nccl_call(t, "alltoall_base_", "nccl:all_to_all", A2A_KERNEL, t, rpc=rpc)
    events, report = read(trace(evs))
    assert [(e["layer"], e["phase"]) for e in events] == [
        (3, "dispatch"), (3, "combine"), (3, "combine_bwd"), (3, "dispatch_bwd"), (None, "other"),
    ]  # fmt: skip
    assert report.notes[backward.MATCHED] == 2 and report.notes[backward.UNMATCHED] == 1
