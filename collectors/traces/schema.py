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
TIME_KINDS = ("host_call", "host_enqueue", "host_watchdog", "gpu_kernel", "simulated")

# record_function names the probe opens and job owners may use: moe/layer{L}/{phase}
PHASE_LABEL_RE = re.compile(r"^moe/(?:layer(\d+)/)?([a-z_]+)$")


def phase_label(layer: int | None, phase: str) -> str:
    """The record_function name for a (layer, phase), parsed back by ``PHASE_LABEL_RE``."""
    return f"moe/{phase}" if layer is None else f"moe/layer{layer}/{phase}"


# c10/kineto dtype names → bytes per element.
DTYPE_BYTES = {
    "Float": 4,
    "float": 4,
    "float32": 4,
    "BFloat16": 2,
    "c10::BFloat16": 2,
    "bfloat16": 2,
    "Half": 2,
    "c10::Half": 2,
    "float16": 2,
    "Double": 8,
    "double": 8,
    "float64": 8,
    "Long": 8,
    "long int": 8,
    "int64": 8,
    "Int": 4,
    "int": 4,
    "int32": 4,
    "Short": 2,
    "short int": 2,
    "Byte": 1,
    "unsigned char": 1,
    "uint8": 1,
    "Char": 1,
    "signed char": 1,
    "int8": 1,
    "Bool": 1,
    "bool": 1,
    "Float8_e4m3fn": 1,
    "c10::Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "c10::Float8_e5m2": 1,
}
