"""The per-port families of /metrics as pure functions over a frame (no Django, no Redis), and the
whole text checked by Prometheus' own linter (``promtool check metrics``) and parser rules."""

from __future__ import annotations

import subprocess

import numpy as np

from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.metrics import ports


def one_su_frame(name: str = "f1"):  # type: ignore[no-untyped-def]
    spec = rail_optimized(name, servers=4, gpus_per_server=2, spines=2)
    index = build_port_index(spec)
    rng = np.random.default_rng(0)
    metrics = {m: rng.uniform(0, 1, len(index)).astype(np.float32) for m in METRICS}
    return spec, index, Frame(name, index.version, 1_700_000_000_000_000_000, 1.0, metrics)


def peers_of(index) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"node{p} gpu{p % 2} mlx5_{p % 2}" if index.host_facing[p] else f"spine0:Ethernet{p}"
            for p in range(len(index))]


def test_labels_say_where_a_port_is_and_what_it_faces():
    _spec, index, _frame = one_su_frame('we"ird\\name')
    labels = ports.build_labels('we"ird\\name', index, peers_of(index)).labels
    host = int(np.flatnonzero(index.host_facing)[0])
    up = int(np.flatnonzero(~index.host_facing & (index.rail >= 0))[0])
    spine = int(np.flatnonzero(index.rail < 0)[0])
    assert labels[host].startswith('fabric="we\\"ird\\\\name",')
    assert f'role="downlink",peer_host="node{host}",peer_gpu="gpu{host % 2}",peer_port="mlx5_{host % 2}"' in labels[host]
    assert 'role="uplink",peer_host="",peer_gpu="",peer_port="spine0:Ethernet' in labels[up]
    assert 'rail="",role="spine"' in labels[spine]


def test_no_data_is_absent_never_zero_and_bits_become_bytes():
    _spec, index, frame = one_su_frame()
    frame.metrics["out_bps"][:] = 8e9
    frame.metrics["out_bps"][3] = np.nan
    sample = ports.PortsSample(frame, np.arange(len(index)), ports.build_labels("f1", index, peers_of(index)),
                               np.array([5]))
    text = ports.exposition([sample])
    tx = [line for line in text.splitlines() if line.startswith("fabricmon_port_transmit_bytes_per_second{")]
    assert len(tx) == len(index) - 1
    assert all(line.endswith(" 1e+09") for line in tx)
    assert not any(f"{{{sample.labels.labels[3]}}}" in line for line in tx)
    hot = [line for line in text.splitlines() if line.startswith("fabricmon_port_in_hot_set{")]
    assert hot == [f"fabricmon_port_in_hot_set{{{sample.labels.labels[5]}}} 1"]


def test_over_the_cap_the_hottest_ports_are_kept():
    _spec, _index, frame = one_su_frame()
    util = frame.metrics["util"]
    util[:] = 0.1
    util[[2, 7, 11]] = [0.9, 0.8, np.nan]
    util[9] = 0.7
    assert ports.choose_ports(frame, 3).tolist() == [2, 7, 9]
    assert ports.choose_ports(frame, 10_000).tolist() == list(range(frame.n_ports))


def test_promtool_finds_the_text_clean():
    _spec, index, frame = one_su_frame()
    frame2 = Frame("f2", frame.topology_version, frame.ts_ns, 1.0, frame.metrics)
    labels = ports.build_labels("f1", index, peers_of(index))
    text = ports.exposition([
        ports.PortsSample(frame, np.arange(len(index)), labels, np.array([1, 2])),
        ports.PortsSample(frame2, np.arange(len(index)), ports.build_labels("f2", index, peers_of(index)),
                          np.array([0])),
    ])
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout + done.stderr
    # one HELP/TYPE per family, all its samples together (two fabrics interleaved would be invalid)
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names))
