"""The normalized phase-event vocabulary shared by the probe, the importers and the ingest API.

One event = one collective call seen by one rank (see reference ``job_events.md`` §1)::

    {"id", "rank", "host", "step", "layer", "phase", "collective", "pg", "pg_ranks", "seq",
     "start_ns", "end_ns", "bytes_sent", "bytes_recv", "send_bytes_per_peer",
     "recv_bytes_per_peer", "source", "time_kind", "clock_offset_ns"}

Times are Unix-epoch ns; per-peer maps are keyed by *global* rank (as strings, JSON keys).
"""

from __future__ import annotations

import re

PHASES = (
    "dispatch",
    "combine",
    "dispatch_bwd",
    "combine_bwd",
    "allreduce",
    "allgather",
    "reducescatter",
    "send",
    "recv",
    "other",
)
SOURCES = ("probe", "kineto", "fr", "inspector", "nccl_log", "twin", "api")
# The per-peer maps' compact form for large groups, each beside the map it stands for: a list
# aligned with ``pg_ranks`` (entry i is the bytes to or from global rank pg_ranks[i]).
PEER_LISTS = (
    ("send_bytes_per_pg_rank", "send_bytes_per_peer"),
    ("recv_bytes_per_pg_rank", "recv_bytes_per_peer"),
)
TIME_KINDS = ("host_call", "host_enqueue", "host_watchdog", "gpu_kernel", "simulated")

# record_function names the probe opens and job owners may use: moe/layer{L}/{phase}
PHASE_LABEL_RE = re.compile(r"^moe/(?:layer(\d+)/)?([a-z_]+)$")


def phase_label(layer: int | None, phase: str) -> str:
    """The record_function name for a (layer, phase), parsed back by ``PHASE_LABEL_RE``."""
    return f"moe/{phase}" if layer is None else f"moe/layer{layer}/{phase}"


# Bytes per element of every name a trace gives a dtype by, keyed lower-case (``dtype_bytes``):
# c10::ScalarType names (record_param_comms "dtype", Flight Recorder), C++ type names
# (Kineto "Input type"), torch dtype names, NCCL's own names (Inspector, logs, kernel names).
_DTYPE_NAMES = {
    1: "byte|char|bool|int8|uint8|qint8|quint8|signed char|unsigned char|int8_t|uint8_t|i8|u8|"
    "float8_e4m3fn|float8_e5m2|float8_e4m3fnuz|float8_e5m2fnuz|float8_e8m0fnu|float4_e2m1fn_x2|"
    "f8e4m3|f8e5m2|fp8e4m3|fp8e5m2|__nv_fp8_e4m3|__nv_fp8_e5m2|bits8|bits1x8|bits2x4|bits4x2|"
    "quint4x2|quint2x4|nccluint8|ncclint8|ncclchar|ncclfloat8e4m3|ncclfloat8e5m2",
    2: "short|half|bfloat16|float16|int16|uint16|short int|unsigned short|int16_t|uint16_t|f16|bf16|"
    "__half|__nv_bfloat16|bits16|ncclfloat16|ncclhalf|ncclbfloat16",
    4: "int|float|float32|int32|uint32|qint32|unsigned int|int32_t|uint32_t|f32|i32|u32|complexhalf|"
    "ncclint32|ncclint|nccluint32|ncclfloat32|ncclfloat",
    8: "long|double|float64|int64|uint64|long int|long long|unsigned long|unsigned long long|int64_t|"
    "uint64_t|f64|i64|u64|complexfloat|complex64|cfloat|c10::complex<float>|complex<float>|"
    "ncclint64|nccluint64|ncclfloat64|nccldouble",
    16: "complexdouble|complex128|cdouble|complex<double>",
}
DTYPE_BYTES: dict[str, int] = {
    name: size for size, names in _DTYPE_NAMES.items() for name in names.split("|")
}

# c10::ScalarType codes (older Flight Recorder dumps write dtypes as these integers)
SCALAR_TYPE_BYTES = {
    0: 1,
    1: 1,
    2: 2,
    3: 4,
    4: 8,
    5: 2,
    6: 4,
    7: 8,
    8: 4,
    9: 8,
    10: 16,
    11: 1,
    12: 1,
    13: 1,
    14: 4,
    15: 2,
    23: 1,
    24: 1,
    25: 1,
    26: 1,
    27: 2,
    28: 4,
    29: 8,
}
_DTYPE_PREFIXES = ("c10::", "torch.", "at::", "std::")


def dtype_bytes(name: object) -> int | None:
    """Bytes per element of a dtype as any trace names it (``"Float"``, ``"long int"``,
    ``"c10::BFloat16"``, ``"torch.int64"``, ``"ncclFloat32"``, a ScalarType code); None if unknown."""
    if isinstance(name, int) and not isinstance(name, bool):
        return SCALAR_TYPE_BYTES.get(name)
    if not isinstance(name, str) or len(name) > 64:
        return None
    key = name.strip().lower()
    for prefix in _DTYPE_PREFIXES:
        key = key.removeprefix(prefix)
    return DTYPE_BYTES.get(key)
