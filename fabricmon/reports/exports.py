"""A run's per-port bytes per (step, layer, phase), streamed as CSV or Parquet.

The bytes are the projection of the run's stored traffic matrices onto its fabric (the same
projection the phase views draw: the run's rank map placed on the fabric, a routing model), one
row per (step, layer, phase, port) where the port carries any of the run's bytes in or out::

    TrafficMatrix rows, in (step, layer, phase) order, ``chunk`` at a time
        ─▶ stacked (chunk, ranks, ranks) ─▶ core projector ─▶ (chunk, ports) in / out bytes
        ─▶ one Arrow table ─▶ CSV lines | one Parquet row group ─▶ sent, then let go

Memory follows one chunk (at most ``CHUNK_CELLS`` matrix cells, 64 MB as float64), never the
run: a long run is streamed, not held. Where a key has rows from several event sources, the
newest row is the one exported (as the phase views do).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from django.db.models import Max

from fabricmon.core.phases.layout import place_ranks
from fabricmon.core.phases.projector import ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.jobs import matrix_parts
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.topology.fabric_view import fabric_view

CHUNK_CELLS = 8 * 2**20  # matrix cells stacked per chunk (float64: 64 MB)
MAX_CHUNK = 64  # matrices per chunk (a Parquet row group each)
_PROJECTORS = ProjectorCache(max_entries=4)

SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("layer", pa.int32()),
    ("phase", pa.string()),
    ("port_index", pa.int32()),  # the fabric's port index (ARCHITECTURE.md: leaves by rail, then spines)
    ("switch", pa.string()),
    ("port", pa.string()),
    ("faces", pa.string()),  # what the port is cabled to: a host's NIC/GPU, or the switch port across
    ("bytes_in", pa.int64()),  # bytes the switch receives on the port (from the NIC or the peer switch)
    ("bytes_out", pa.int64()),  # bytes the switch sends out of the port
])


class _Drain:
    """A write-only file that keeps what was written until ``take`` hands it on (the writers
    write sequentially; nothing is ever read back or rewritten)."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._pos = 0

    def write(self, data: Any) -> int:
        b = bytes(data)
        self._parts.append(b)
        self._pos += len(b)
        return len(b)

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def _world(run: Run) -> int:
    if run.world_size:
        return int(run.world_size)
    return int(TrafficMatrix.objects.filter(run=run).aggregate(n=Max("n_ranks"))["n"] or 0)


def port_tables(run: Run, routing: Routing, steps: tuple[int, int] | None = None,
                max_chunk: int = MAX_CHUNK) -> Iterator[pa.Table]:
    """The run's projected per-port bytes, one Arrow table per chunk of (step, layer, phase) keys
    (at most ``max_chunk`` keys and ``CHUNK_CELLS`` matrix cells a chunk).

    ``steps``: only the steps in [lo, hi]. ``fabric_view`` raises ``Fabric.DoesNotExist`` for a
    fabric not in the topology (the view answers that before streaming)."""
    view = fabric_view(run.fabric)
    layout, index = view.layout, view.index
    matrix_parts.settle(run)  # (before _world: a part may be wider than its row)
    world = _world(run)
    if world == 0:
        return
    entries = list(RankMapEntry.objects.filter(run=run).order_by("rank")
                   .values("rank", "host", "local_rank", "switch", "switch_port"))
    projector = _PROJECTORS.get(layout, place_ranks(layout, entries, world), routing)
    switch = np.asarray(index.switch_names, dtype=object)[np.asarray(index.switch_of, dtype=np.int64)]
    names = np.asarray(index.port_names, dtype=object)
    faces = np.asarray(list(view.peers) + [""] * (len(index) - len(view.peers)), dtype=object)
    qs = TrafficMatrix.objects.filter(run=run, step__gte=0, layer__gte=0)
    if steps is not None:
        qs = qs.filter(step__gte=steps[0], step__lte=steps[1])
    chunk = max(1, min(max_chunk, CHUNK_CELLS // (world * world)))
    rows = qs.order_by("step", "layer", "phase", "-id").only("id", "step", "layer", "phase", "n_ranks",
                                                             "sent")
    batch: list[TrafficMatrix] = []
    last: tuple[int, int, str] | None = None
    for m in rows.iterator(chunk_size=chunk):
        key = (m.step, m.layer, m.phase)
        if key == last:  # an older source's row of the same key
            continue
        last = key
        batch.append(m)
        if len(batch) == chunk:
            yield _table(batch, world, projector, switch=switch, names=names, faces=faces)
            batch = []
    if batch:
        yield _table(batch, world, projector, switch=switch, names=names, faces=faces)


def _table(batch: list[TrafficMatrix], world: int, projector: Any, *, switch: np.ndarray, names: np.ndarray,
           faces: np.ndarray) -> pa.Table:
    stack = np.zeros((len(batch), world, world), dtype=np.float64)
    for i, m in enumerate(batch):
        a = m.sent_array()
        stack[i, : min(world, a.shape[0]), : min(world, a.shape[1])] = a[:world, :world]
    pb = projector.project(stack)
    b_in, b_out = np.asarray(pb.in_bytes), np.asarray(pb.out_bytes)
    k, p = np.nonzero((b_in > 0) | (b_out > 0))
    step = np.array([m.step for m in batch], dtype=np.int64)
    layer = np.array([m.layer for m in batch], dtype=np.int32)
    phase = np.array([m.phase for m in batch], dtype=object)
    return pa.table({
        "step": step[k],
        "layer": layer[k],
        "phase": pa.array(phase[k], type=pa.string()),
        "port_index": p.astype(np.int32),
        "switch": pa.array(switch[p], type=pa.string()),
        "port": pa.array(names[p], type=pa.string()),
        "faces": pa.array(faces[p], type=pa.string()),
        "bytes_in": np.rint(b_in[k, p]).astype(np.int64),
        "bytes_out": np.rint(b_out[k, p]).astype(np.int64),
    }, schema=SCHEMA)


def csv_chunks(tables: Iterator[pa.Table]) -> Iterator[bytes]:
    """CSV (header first), one chunk of lines per table."""
    sink = _Drain()
    with pacsv.CSVWriter(sink, SCHEMA) as writer:
        yield sink.take()  # the header, before the first matrix is read
        for t in tables:
            writer.write_table(t)
            yield sink.take()
    tail = sink.take()
    if tail:
        yield tail


def parquet_chunks(tables: Iterator[pa.Table], metadata: dict[str, str]) -> Iterator[bytes]:
    """Parquet, one row group per table, the footer last (``metadata`` in the file's schema)."""
    sink = _Drain()
    schema = SCHEMA.with_metadata({f"fabricmon.{k}": v for k, v in metadata.items()})
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for t in tables:
            writer.write_table(t.replace_schema_metadata(schema.metadata), row_group_size=max(1, t.num_rows))
            part = sink.take()
            if part:
                yield part
    finally:
        writer.close()
    yield sink.take()
