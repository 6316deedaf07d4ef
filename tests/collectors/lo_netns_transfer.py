"""Measure a known TCP transfer through ``lo``'s ifHCInOctets, inside a private network namespace.

Why a namespace: on the host's ``lo`` every other test (Redis, Daphne, twin agents, Celery…)
adds megabytes while the transfer is measured, so a 2 % check is flaky. A fresh namespace has
its own ``lo`` that carries only what this script puts on it::

    pytest worker ──▶ unshare --net [--map-root-user] python -m tests.collectors.lo_netns_transfer …
                        │ private netns:  lo (ifindex 1, only our traffic)
                        ├── snmpd on udp:127.0.0.1:<port>  (tests.agents.netsnmp.start_snmpd)
                        ├── SnmpPoller(engine) ──UDP──▶ snmpd         reads lo's ifHCInOctets
                        └── TCP client ──N bytes──▶ TCP server         the known transfer
                      ◀── one JSON line on stdout

Run as a module (``main``; :func:`command` builds the argv) it does the measurement; the test
imports :func:`private_netns` for the command prefix that enters a fresh namespace, and
:func:`expected_octets` for the accounting.

Accounting (what lo's in-octets count besides the N payload bytes). Linux counts an IPv4 packet
on ``lo`` as its IP length (no link header; checked: a 100-byte UDP datagram adds 128):

* TCP/IP headers: every TCP packet of the transfer (data segments, ACKs, handshake, FIN) costs
  20 (IPv4) + 32 (TCP + timestamps option) = 52 bytes beyond its payload. Their number is both
  ends' ``tcpi_segs_out`` (``TCP_INFO``) + the receiver's FIN.
* Retransmitted payload: lo counts resent segments again. They happen even on lo, most under
  CPU load (seen: 0 - 0.4 MB per 200 MiB, once 0.8 MB on 50 MiB; cause not investigated); the
  sender's ``tcpi_bytes_retrans`` says how much.
* The SNMP exchange itself (the only other traffic): its bytes and packets per poll are
  calibrated against the kernel's own lo counters (/proc/net/dev) over a few polls with nothing
  else on the wire, then multiplied by the number of polls in the measured window.

All these come from the kernel, none from the SNMP reads under test. Headers are ~0.09 % of the
payload at lo's 64 KiB MTU, the SNMP exchange ~2 kB per poll (~100 kB per window), so the
accounting leaves < 0.001 % unexplained (0.4 - 1.7 kB, about one poll's worth at the window's
edges) and the 2 % bound stays literal.

The window runs from one snmpd cache reload (~every 3 s) to a later one: the first read whose
value moved, then the first read taken after the transfer ended, recognised by a value >= the
kernel's lo rx byte count at that moment (same counter: a new namespace's lo starts at 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from collectors.snmp import SnmpPoller, SnmpTarget, close_loop_context
from fabricmon.core.topology.spec import SnmpSettings
from tests.agents.netsnmp import start_snmpd

REPO_ROOT = Path(__file__).resolve().parents[2]
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps option 12 (Linux default on)
CALIBRATION_POLLS = 8
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# ── outside: entering a private namespace ──────────────────────────────────────────────────────


def _works(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run([*argv, "true"], check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return done.returncode == 0, done.stderr.strip()


@contextlib.contextmanager
def private_netns() -> Iterator[list[str]]:
    """Yield a command prefix that runs a program in a fresh network namespace.

    Tried in order: ``unshare --net`` (root), ``unshare --net --map-root-user`` (any user, needs
    user namespaces), ``ip netns add``/``exec`` (root). None usable → RuntimeError naming what is
    missing (the caller's test fails; it never skips).
    """
    tried: list[str] = []
    unshare = shutil.which("unshare")
    if unshare is None:
        tried.append("`unshare` (util-linux) not found on PATH")
    else:
        candidates = [[unshare, "--net"]] if os.geteuid() == 0 else []
        candidates.append([unshare, "--net", "--map-root-user"])
        for argv in candidates:
            ok, err = _works(argv)
            if ok:
                yield argv
                return
            tried.append(f"`{' '.join(argv)} true` failed: {err or 'no message'}")
    ip = shutil.which("ip")
    if os.geteuid() != 0 or ip is None:
        why = "not root" if os.geteuid() != 0 else "`ip` (iproute2) not found"
        tried.append(f"`ip netns` unusable: {why}")
        userns = Path("/proc/sys/user/max_user_namespaces")
        limit = userns.read_text().strip() if userns.exists() else "?"
        raise RuntimeError(
            "no private network namespace for the loopback byte-count test: "
            + "; ".join(tried)
            + f" (user.max_user_namespaces={limit}; unprivileged user namespaces may be disabled)"
        )
    name = f"fabricmon-lo-{uuid.uuid4().hex[:12]}"
    added = subprocess.run([ip, "netns", "add", name], check=False, capture_output=True, text=True)
    if added.returncode != 0:
        tried.append(f"`ip netns add` failed: {added.stderr.strip()}")
        raise RuntimeError("no private network namespace for the loopback test: " + "; ".join(tried))
    try:
        yield [ip, "netns", "exec", name]
    finally:
        subprocess.run([ip, "netns", "delete", name], check=False, capture_output=True)


def expected_octets(result: dict[str, float]) -> float:
    """In-octets lo should show for the window: payload, resent payload, TCP/IP headers and the
    SNMP exchange. Every term but the payload comes from the kernel, none from the SNMP reads."""
    return (
        result["sent_bytes"]
        + result["tcp_retrans_bytes"]
        + result["tcp_segments"] * TCP_IP_HEADER_BYTES
        + result["polls_in_window"] * result["snmp_bytes_per_poll"]
    )


# ── inside: the measurement ────────────────────────────────────────────────────────────────────


def _set_lo_up() -> None:
    """``ip link set lo up`` without needing iproute2 inside the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _kernel_lo_rx() -> tuple[int, int, int]:
    """(rx bytes, rx packets, rx drops) of this namespace's lo; /proc/net is per namespace."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            values = fields.split()
            return int(values[0]), int(values[1]), int(values[3])
    raise RuntimeError("no lo in /proc/net/dev")


def _namespace_interfaces() -> list[str]:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.partition(":")[0].strip() for line in lines)


@dataclass(frozen=True)
class TcpTransfer:
    """One TCP transfer over lo as both ends' kernels saw it (from ``TCP_INFO``)."""

    received_bytes: int
    data_bytes_sent: int  # tcpi_bytes_sent of the sender: payload incl. retransmissions
    retrans_bytes: int  # tcpi_bytes_retrans of the sender
    segments: int  # TCP packets both ends put on lo (tcpi_segs_out, both sides, + server FIN)


def _tcp_info(sock: socket.socket) -> dict[str, int]:
    """The fields of Linux ``struct tcp_info`` we need (offsets from linux/tcp.h, kernel >= 4.19)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(raw) < 216:
        raise RuntimeError(f"struct tcp_info is {len(raw)} bytes: kernel < 4.19 has no tcpi_bytes_retrans")
    (segs_out,) = struct.unpack_from("I", raw, 136)
    bytes_sent, bytes_retrans = struct.unpack_from("QQ", raw, 200)
    return {"segs_out": segs_out, "bytes_sent": bytes_sent, "bytes_retrans": bytes_retrans}


def _send_over_loopback(n_bytes: int) -> TcpTransfer:
    """Send n_bytes over one TCP connection on 127.0.0.1 and account every packet it caused
    (retransmissions happen even on lo, and lo counts those bytes again)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = [0]
    server_info: dict[str, int] = {}

    def receive() -> None:
        conn, _ = server.accept()
        while chunk := conn.recv(1 << 20):
            received[0] += len(chunk)
        server_info.update(_tcp_info(conn))
        conn.close()  # its FIN tells the sender everything, its own FIN included, was acked

    thread = threading.Thread(target=receive)
    thread.start()
    client = socket.create_connection(server.getsockname())
    block = b"\x5a" * (1 << 20)
    full, rest = divmod(n_bytes, len(block))
    for _ in range(full):
        client.sendall(block)
    client.sendall(block[:rest])
    client.shutdown(socket.SHUT_WR)
    thread.join(timeout=60)
    client.settimeout(30)
    client.recv(1)  # the server's FIN: no more data or retransmissions can follow
    info = _tcp_info(client)
    client.close()
    server.close()
    return TcpTransfer(
        received_bytes=received[0],
        data_bytes_sent=info["bytes_sent"],
        retrans_bytes=info["bytes_retrans"],
        segments=info["segs_out"] + server_info["segs_out"] + 1,
    )


async def _measure(engine: str, n_bytes: int, workdir: Path) -> dict[str, object]:
    interfaces = _namespace_interfaces()
    if interfaces != ["lo"]:  # the whole point: nobody else's traffic on this lo
        raise RuntimeError(f"not a private network namespace: interfaces {interfaces}")
    _set_lo_up()
    agent = start_snmpd(workdir)
    try:
        target = SnmpTarget("lo-netns", "127.0.0.1", agent.port, SnmpSettings())
        poller = SnmpPoller(engine=engine)  # type: ignore[arg-type]
        lo_index = socket.if_nametoindex("lo")

        async def read() -> tuple[int, int]:
            snap = await poller.poll(target)
            row = int(list(snap.ifindex).index(lo_index))
            return int(snap.counters["in_octets"][row]), int(snap.counters["in_pkts"][row])

        await read()  # first poll: engine set-up, snmpd warms its caches
        k0 = _kernel_lo_rx()
        for _ in range(CALIBRATION_POLLS):
            await read()
        k1 = _kernel_lo_rx()
        snmp_bytes_per_poll = (k1[0] - k0[0]) / CALIBRATION_POLLS
        snmp_pkts_per_poll = (k1[1] - k0[1]) / CALIBRATION_POLLS

        async def next_fresh(last: int, at_least: int = 0) -> tuple[int, int, int]:
            """Poll until snmpd's interface cache (reloaded every ~3 s) gives a value that moved
            from ``last`` and is >= ``at_least``; return it, its in-pkts and the polls it took."""
            deadline, polls, octets = time.monotonic() + 15, 0, last
            while time.monotonic() < deadline:
                octets, pkts = await read()
                polls += 1
                if octets != last and octets >= at_least:
                    return octets, pkts, polls
                await asyncio.sleep(0.05)
            raise RuntimeError(f"ifHCInOctets of lo: {octets} after 15 s, wanted a fresh value >= {at_least}")

        v0, p0, _ = await next_fresh((await read())[0])
        t0 = time.monotonic()
        k_before = _kernel_lo_rx()
        transfer = await asyncio.to_thread(_send_over_loopback, n_bytes)
        k_after = _kernel_lo_rx()
        t_transfer = time.monotonic()
        # A changed value alone is not enough: under CPU load snmpd's reload timer and an on-demand
        # reload can fire back to back, so the next change may predate the transfer (seen once:
        # a window of ~150 kB). A fresh namespace's lo starts at 0, so snmpd's ifHCInOctets is the
        # kernel's rx byte count itself: a value >= the count at the transfer's end was read after it.
        v1, p1, polls = await next_fresh(v0, at_least=k_after[0])
        t1 = time.monotonic()
    finally:
        close_loop_context()
        agent.stop()
    return {
        "engine": engine,
        "sent_bytes": n_bytes,
        "received_bytes": transfer.received_bytes,
        "tcp_data_bytes_sent": transfer.data_bytes_sent,
        "tcp_retrans_bytes": transfer.retrans_bytes,
        "tcp_segments": transfer.segments,
        "measured_octets": v1 - v0,
        "measured_pkts": p1 - p0,
        "polls_in_window": polls,
        "snmp_bytes_per_poll": snmp_bytes_per_poll,
        "snmp_pkts_per_poll": snmp_pkts_per_poll,
        "kernel_transfer_rx_bytes": k_after[0] - k_before[0],  # diagnostics only
        "kernel_transfer_rx_pkts": k_after[1] - k_before[1],
        "kernel_transfer_rx_drops": k_after[2] - k_before[2],  # not counted in rx bytes
        "transfer_s": round(t_transfer - t0, 3),
        "window_s": round(t1 - t0, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("fast", "pysnmp"), required=True)
    parser.add_argument("--bytes", type=int, required=True, dest="n_bytes")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    result = asyncio.run(_measure(args.engine, args.n_bytes, args.workdir))
    print(json.dumps(result), flush=True)


def command(engine: str, n_bytes: int, workdir: Path) -> list[str]:
    """argv that runs :func:`main` (as a module, from :data:`REPO_ROOT`)."""
    module = "tests.collectors.lo_netns_transfer"
    return [
        sys.executable,
        "-m",
        module,
        "--engine",
        engine,
        "--bytes",
        str(n_bytes),
        "--workdir",
        str(workdir),
    ]


if __name__ == "__main__":
    main()
