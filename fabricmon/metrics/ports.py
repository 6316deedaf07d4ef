"""The per-port families of ``/metrics``: the latest frame of a fabric as Prometheus text, from numpy.

One sample per port and metric, labelled by what an operator filters on::

    fabricmon_port_transmit_bytes_per_second{fabric="f",switch="leaf-r3",port="Ethernet5",rail="3",
        role="downlink",peer_host="node017",peer_gpu="gpu3",peer_port="mlx5_3"} 4.1e+10

Every label but ``fabric``, ``switch`` and ``port`` is a function of the port, so labels add no
series; the series are ports × families, capped by ``FABRICMON_METRICS_MAX_PORTS`` per fabric
(over it: the hottest ports by utilization, and ``fabricmon_metrics_ports_omitted`` says how many
were left out). A port without data (``NaN`` in the frame) has no sample — absent, never zero.

Why not ``prometheus_client`` for these: its exposition builds a ``Sample`` and escapes every
label per sample in Python; ``bench/metrics.py`` measures both on the demo's 768 ports and a
16k-port fabric. Here the escaped label set of each port is built once per topology version and
only the values are formatted per scrape. Everything else of ``/metrics`` is ``prometheus_client``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import PortIndex


@dataclass(frozen=True)
class PortFamily:
    """One per-port family: a frame metric × ``scale`` (bits → bytes), with a fixed extra label."""

    name: str
    metric: str
    help: str
    scale: float = 1.0
    extra: str = ""  # e.g. 'direction="receive"' for families split over two frame metrics


# Gauges, not counters: a frame holds rates the collector computed over each switch's own poll
# interval, with per-port read times, wraps and resets handled (core/telemetry/rates.py). Raw
# counters are not kept, and Prometheus' rate() over its own scrape grid would redo that worse
# (extrapolation, misaligned windows). Units are base units (bytes, not bits), per the naming docs.
P = "fabricmon_port_"
FAMILIES: tuple[PortFamily, ...] = (
    PortFamily(P + "receive_bytes_per_second", "in_bps",
               "Bytes received per second over the last poll interval.", 1 / 8),
    PortFamily(P + "transmit_bytes_per_second", "out_bps",
               "Bytes transmitted per second over the last poll interval.", 1 / 8),
    PortFamily(P + "utilization_ratio", "util",
               "Fraction of line rate used, the larger of receive and transmit (0-1)."),
    PortFamily(P + "discarded_packets_per_second", "in_discards_ps",
               "Packets discarded per second.", extra='direction="receive"'),
    PortFamily(P + "discarded_packets_per_second", "out_discards_ps",
               "Packets discarded per second.", extra='direction="transmit"'),
    PortFamily(P + "receive_errors_per_second", "in_errors_ps", "Packets received with errors per second."),
    PortFamily(P + "ecn_marked_packets_per_second", "ecn_marked_ps",
               "Packets ECN-marked by the egress queue per second."),
    PortFamily(P + "pfc_pause_frames_per_second", "pfc_pause_ps", "PFC pause frames per second."),
    PortFamily(P + "pfc_paused_ratio", "pfc_paused_fraction",
               "Fraction of the poll interval the port was paused by PFC (0-1)."),
    PortFamily(P + "queue_watermark_bytes", "watermark_bytes",
               "Peak egress queue occupancy since the previous read, in bytes."),
    PortFamily(P + "dropped_packets_per_second", "drops_ps",
               "Packets dropped by the egress queue per second."),
)
HOT_SET = "fabricmon_port_in_hot_set"


def escape(value: str) -> str:
    """A label value as the text format wants it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def split_peer(peer: str) -> tuple[str, str, str]:
    """``"node017 gpu3 mlx5_3"`` → host, GPU, NIC; ``"spine2:Ethernet9"`` → ("", "", that)."""
    parts = peer.split()
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return "", "", peer


def _role(index: PortIndex, p: int) -> str:
    if index.rail[p] < 0:
        return "spine"
    return "downlink" if index.host_facing[p] else "uplink"


@dataclass(frozen=True)
class PortLabels:
    """Each port's escaped label set (without braces), built once per fabric view."""

    version: str
    labels: tuple[str, ...]


def build_labels(fabric: str, index: PortIndex, peers: Sequence[str]) -> PortLabels:
    fab = escape(fabric)
    out = []
    for p in range(len(index)):
        host, gpu, peer_port = split_peer(peers[p] if p < len(peers) else "")
        rail = int(index.rail[p])
        out.append(
            f'fabric="{fab}",switch="{escape(index.switch_names[int(index.switch_of[p])])}",'
            f'port="{escape(index.port_names[p])}",rail="{rail if rail >= 0 else ""}",'
            f'role="{_role(index, p)}",peer_host="{escape(host)}",peer_gpu="{escape(gpu)}",'
            f'peer_port="{escape(peer_port)}"'
        )
    return PortLabels(index.version, tuple(out))


_LABELS: weakref.WeakKeyDictionary[object, PortLabels] = weakref.WeakKeyDictionary()


def labels_for(view: object, fabric: str, index: PortIndex, peers: Sequence[str]) -> PortLabels:
    """Cached per ``FabricView`` object (a new topology version is a new view)."""
    hit = _LABELS.get(view)
    if hit is None:
        hit = _LABELS[view] = build_labels(fabric, index, peers)
    return hit


@dataclass(frozen=True)
class PortsSample:
    """One fabric's share of the per-port families: its newest frame, the ports chosen, labels."""

    frame: Frame
    chosen: np.ndarray  # port positions exported, in index order
    labels: PortLabels
    hot: np.ndarray  # positions in the moving-incast hot set


def choose_ports(frame: Frame, max_ports: int) -> np.ndarray:
    """Every port, or the ``max_ports`` hottest by utilization (ports without data last)."""
    n = frame.n_ports
    if n <= max_ports:
        return np.arange(n)
    util = frame.metrics.get("util")
    if util is None:
        return np.arange(max_ports)
    key = np.where(np.isfinite(util), util, -np.inf)
    return np.sort(np.argpartition(-key, max_ports - 1)[:max_ports])


def _samples(name: str, extra: str, labels: tuple[str, ...], chosen: np.ndarray,
             values: np.ndarray) -> Iterator[str]:
    vals = np.asarray(values, dtype=np.float64)[chosen]
    ok = np.isfinite(vals)
    sep = "," + extra if extra else ""
    for p, v in zip(chosen[ok].tolist(), vals[ok].tolist(), strict=True):
        yield f"{name}{{{labels[p]}{sep}}} {v:.7g}\n"


def exposition(samples: Sequence[PortsSample]) -> str:
    """The per-port families of every fabric, family by family (the text format wants a family's
    samples together under one HELP/TYPE)."""
    out: list[str] = []
    seen: set[str] = set()
    for fam in FAMILIES:
        if fam.name not in seen:
            seen.add(fam.name)
            out.append(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} gauge\n")
        for s in samples:
            values = s.frame.metrics.get(fam.metric)
            if values is not None:
                out.extend(_samples(fam.name, fam.extra, s.labels.labels, s.chosen, values * fam.scale))
    out.append(f"# HELP {HOT_SET} 1 for each port in the moving-incast detector's current hot set.\n"
               f"# TYPE {HOT_SET} gauge\n")
    for s in samples:
        out.extend(f"{HOT_SET}{{{s.labels.labels[p]}}} 1\n" for p in s.hot.tolist())
    return "".join(out)
