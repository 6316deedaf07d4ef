"""Hostile trace files, built at test time (no checked-in blobs): each case is a file, the import
kind and rank it is read as, and the words its refusal must contain.

A case with ``expect=None`` must import (the bad part skipped or reported, the good kept): its
one good call stored, nothing rejected.
"""

from __future__ import annotations

import gzip
import json
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

GOOD_OP = {  # a c10d allreduce with shapes: what every Kineto case wraps its poison around
    "ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1,
    "ts": 1_795_989_557_414_430.0, "dur": 10.0,
    "args": {"Input Dims": [[[64]]], "Input type": [["float"]], "Record function id": 0},
}
FR_GOOD = {
    "profiling_name": "nccl:all_reduce", "process_group": ["0", "default_pg"], "collective_seq_id": 1,
    "time_created_ns": 1_795_989_557_414_430_475, "input_sizes": [[64]], "input_dtypes": ["Float"],
    "output_sizes": [[64]], "output_dtypes": ["Float"],
}


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # kineto | fr | fr_pickle
    build: Callable[[Path], None]
    expect: str | None  # words the TraceFormatError / 4xx message must contain; None: imports
    rank: int | None = None
    filename: str = "trace_rank0.json"


def _kineto(events: list, **header) -> bytes:  # type: ignore[no-untyped-def]
    return orjson.dumps({"distributedInfo": {"rank": 0, "world_size": 4}, **header, "traceEvents": events})


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _nesting_bomb(path: Path) -> None:
    depth = 200_000
    with path.open("wb") as f:
        f.write(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "args": {"a": ')
        f.write(b"[" * depth + b"]" * depth)
        f.write(b"}}]}")


def _header_nesting_bomb(path: Path) -> None:
    depth = 200_000
    path.write_bytes(b'{"deviceProperties": ' + b"[" * depth + b"]" * depth + b', "traceEvents": []}')


def _one_big_event(mb: int) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        with path.open("wb") as f:
            f.write(b'{"distributedInfo": {"rank": 0}, "traceEvents": [')
            f.write(orjson.dumps(GOOD_OP) + b", ")
            f.write(b'{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "name": "')
            chunk = b"ab{c},[d] " * 100_000  # braces and commas inside the string: what a cutter trips on
            for _ in range(mb * (1 << 20) // len(chunk)):
                f.write(chunk)
            f.write(b'"}]}')

    return build


def _gzip_bomb(path: Path) -> None:
    """~1 GB of JSON white space inside an event array, compressed to ~1 MB."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (16 << 20)
    with path.open("wb") as f:
        f.write(z.compress(b'{"traceEvents": ['))
        for _ in range(64):
            f.write(z.compress(block))
        f.write(z.compress(b"]}"))
        f.write(z.flush())


def _truncated_gzip(path: Path) -> None:
    data = gzip.compress(_kineto([GOOD_OP] * 2000))
    path.write_bytes(data[: len(data) // 2])


def _corrupt_gzip(path: Path) -> None:
    data = bytearray(gzip.compress(_kineto([GOOD_OP] * 2000)))
    for i in range(40, 80):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _shared_refs_pickle(path: Path) -> None:
    """Each level references the one below twice: 40 levels → 2^40 paths through 40 lists."""
    node: list = [dict(FR_GOOD)]
    for _ in range(40):
        node = [node, node]
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": node}, protocol=4))


def _binbytes8_claim(path: Path) -> None:
    # PROTO 4, BINBYTES8 claiming 2^60 bytes, then a few: a reader that trusts the claim allocates it
    path.write_bytes(b"\x80\x04\x8e" + (1 << 60).to_bytes(8, "little") + b"abc.")


def _global_pickle(path: Path) -> None:
    path.write_bytes(b"\x80\x04cos\nsystem\n\x8c\x04true\x85R.")  # os.system("true")


def _good_pickle_on_disk(path: Path) -> None:
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [FR_GOOD] * 3}, protocol=4))


def _wrong_type(field: str, value: object) -> Callable[[Path], None]:
    return _write(_kineto([{**GOOD_OP, field: value}]))


def _fr_wrong_type(field: str, value: object) -> Callable[[Path], None]:
    return _write(json.dumps({"version": "2.10", "entries": [{**FR_GOOD, field: value}]}).encode())


def _inf_duration_pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps({"entries": [{**FR_GOOD, "duration_ms": float("inf"),
                                                "time_discovered_completed_ns": 2}]}))


KINETO_WRONG_TYPES = {  # field → (value, words of the refusal)
    "ph": (7, "ph"),
    "name": (["c10d::allreduce_"], "name"),
    "cat": ({"a": 1}, "cat"),
    "pid": ([1], "pid"),
    "tid": ({"t": 1}, "tid"),
    "ts": ("soon", "ts must be a finite time"),
    "dur": (-5, "dur must be a finite time"),
    "args": ("args", "args must be an object"),
}
FR_WRONG_TYPES = {
    "profiling_name": (5, "profiling_name"),
    "process_group": ("pg0", "process_group"),
    "collective_seq_id": ("1", "collective_seq_id"),
    "time_created_ns": ("now", "time_created_ns"),
    "duration_ms": ([1], "duration_ms"),
    "input_sizes": ("64", "input_sizes"),
    "input_dtypes": ({"a": "Float"}, "input_dtypes"),
    "is_p2p": ("yes", "is_p2p"),
}


def cases() -> list[Case]:
    out = [
        Case("json nesting bomb (in an event)", "kineto", _nesting_bomb, "nesting"),
        Case("json nesting bomb (in the header)", "kineto", _header_nesting_bomb, "not valid JSON outside"),
        Case("40 MB single event", "kineto", _one_big_event(40), "one item larger than"),
        Case("12 MB single event (under the cap)", "kineto", _one_big_event(12), None),
        Case("gzip bomb (1 MB -> 1 GB)", "kineto", _gzip_bomb, "decompression bomb", filename="trace_rank0.json.gz"),
        Case("truncated gzip", "kineto", _truncated_gzip, "gzip stream truncated", filename="t_rank0.json.gz"),
        Case("corrupt gzip", "kineto", _corrupt_gzip, "corrupt gzip", filename="t_rank0.json.gz"),
        Case("FR pickle, shared references", "fr_pickle", _shared_refs_pickle, "shared references", rank=0,
             filename="fr_rank0.pkl"),
        Case("FR pickle, BINBYTES8 of 2^60 bytes", "fr_pickle", _binbytes8_claim, "pickle refused", rank=0,
             filename="fr_rank0.pkl"),
        Case("FR pickle, a global (os.system)", "fr_pickle", _global_pickle, "only plain data", rank=0,
             filename="fr_rank0.pkl"),
        Case("FR pickle from disk (well-formed)", "fr_pickle", _good_pickle_on_disk, None, rank=0,
             filename="fr_rank0.pkl"),
        Case("FR pickle, infinite duration", "fr_pickle", _inf_duration_pickle, "is not a duration", rank=0,
             filename="fr_rank0.pkl"),
        Case("list-shaped items", "kineto", _write(_kineto([[1, 2], [3]])), "item 0 of 'traceEvents'"),
        Case("list-shaped FR entries", "fr", _write(b'{"entries": [[1], [2]]}'), "item 0 of 'entries'", rank=0),
        Case("string nelems (beside a good call)", "kineto", _write(_kineto([GOOD_OP, {**GOOD_OP, "ts": 1_795_989_557_415_430.0, "name": "record_param_comms", "args": {
            "Collective name": "allreduce", "In msg nelems": "64", "Out msg nelems": "64", "dtype": "Float",
            "Group size": 4}}])), None),
        Case("infinite duration (1e999)", "kineto", _write(orjson.dumps(
            {"traceEvents": []}).replace(b"[]", b"[" + orjson.dumps(GOOD_OP).replace(b'"dur":10.0', b'"dur":1e999') + b"]")),
            "dur must be a finite time"),
        Case("NaN literal", "kineto", _write(orjson.dumps({"traceEvents": [GOOD_OP]}).replace(b"10.0", b"NaN")),
             "not valid JSON"),
        Case("rank out of range (distributedInfo)", "kineto",
             _write(_kineto([GOOD_OP]).replace(b'"rank":0', b'"rank":1099511627776')), "out of range",
             filename="trace.json"),
        Case("rank beyond 64 bits (distributedInfo)", "kineto",
             _write(_kineto([GOOD_OP]).replace(b'"rank":0', b'"rank":100000000000000000000')), "distributedInfo.rank must be",
             filename="trace.json"),
        Case("rank in the file name out of range", "kineto", _write(orjson.dumps({"traceEvents": [GOOD_OP]})),
             "outside the run's world size", filename="trace_rank9999999.json"),
        Case("rank beyond the run's world size", "kineto",
             _write(_kineto([GOOD_OP]).replace(b'"rank":0', b'"rank":9')), "outside the run's world size 4",
             filename="trace.json"),
        Case("FR: rank given beyond the world size", "fr", _write(json.dumps({"entries": [FR_GOOD]}).encode()),
             "world size", rank=9, filename="fr.json"),
    ]
    for field, (value, words) in KINETO_WRONG_TYPES.items():
        out.append(Case(f"kineto {field}: {type(value).__name__}", "kineto", _wrong_type(field, value), words))
    for field, (value, words) in FR_WRONG_TYPES.items():
        out.append(Case(f"FR {field}: {type(value).__name__}", "fr", _fr_wrong_type(field, value), words, rank=0,
                        filename="fr.json"))
    return out
