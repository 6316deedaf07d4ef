"""A tiny JSON control API for a twin running as its own process (demo, browser tests).

    GET  /status
    GET  /ports?switch=leaf-r0                        ports in PortIndex order: ifindex, name, peer
    GET  /truth?switch=leaf-r0&t1_ns=…&t2_ns=…        per-port true rates over exactly [t1, t2]
    GET  /counters?switch=leaf-r0&t_ns=…              counter values at t (uint64 as JSON ints)
    GET  /hottest?t1_ns=…&t2_ns=…                     hottest egress port over [t1, t2]
    GET  /phases?t1_ns=…&t2_ns=…                      MoE phase events overlapping [t1, t2]
    GET  /hotspots?t1_ns=…&t2_ns=…                    the job's hot GPU stretches and their leaf ports
    GET  /queue?switch=leaf-r0&t1_ns=…&t2_ns=…        (--gnmi) queue/ECN/PFC counter deltas and the
                                                      watermark (max occupancy) over [t1, t2]
    POST /fault/restart?switch=…
    POST /fault/unreachable?switch=…&on=1|0
    POST /fault/wrap?switch=…&seconds=2
    GET  /lldp?switch=leaf-r0                         the LLDP neighbours the switch reports now
    POST /fault/miscable?host=node002&nic=mlx5_1&switch=leaf-r0&port=Ethernet3
                                                      plug that NIC into switch:port instead

Bad input → 400 with ``{"error": "..."}`` naming the parameter; unknown switch → 404.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twin.cluster import Twin


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _params(query: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}


def _int(p: dict[str, str], name: str, default: int | None = None) -> int:
    if name not in p:
        if default is not None:
            return default
        raise ApiError(400, f"missing parameter {name}")
    try:
        return int(p[name])
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, got {p[name]!r}") from None


def _switch(tw: Twin, p: dict[str, str], *, required: bool = True) -> str | None:
    name = p.get("switch")
    if name is None or name == "":
        if required:
            raise ApiError(400, "missing parameter switch")
        return None
    if name not in tw.agents:
        raise ApiError(404, f"unknown switch {name!r}")
    return name


def _port_labels(tw: Twin, switch: str | None) -> dict[str, Any]:
    sl = tw.ports.slice_of(switch) if switch else slice(0, len(tw.ports))
    return {
        "switch": [tw.ports.switch_names[int(s)] for s in tw.ports.switch_of[sl]],
        "ifindex": tw.ports.ifindex[sl].tolist(),
        "port_name": list(tw.ports.port_names[sl]),
        "peer": tw.wiring.peer[sl],
    }


def handle(tw: Twin, method: str, path: str, p: dict[str, str]) -> Any:
    """Route one request to the twin; returns the JSON-able answer or raises :class:`ApiError`."""
    if method == "GET" and path == "/status":
        return tw.status()
    if method == "GET" and path in ("/truth", "/hottest", "/phases", "/hotspots"):
        t1, t2 = _int(p, "t1_ns"), _int(p, "t2_ns")
        if t2 <= t1:
            raise ApiError(400, "t2_ns must be greater than t1_ns")
        try:
            if path == "/hottest":
                return asdict(tw.hottest_port(t1, t2))
            if path == "/phases":
                return {"phases": tw.phases(t1, t2)}
            if path == "/hotspots":
                return {"hotspots": tw.hotspots(t1, t2)}
            sw = _switch(tw, p, required=False)
            rates = tw.true_rates(sw, t1, t2)
        except ValueError as exc:  # outside the kept history
            raise ApiError(400, str(exc)) from None
        return {**_port_labels(tw, sw), "t1_ns": t1, "t2_ns": t2, **{k: v.tolist() for k, v in rates.items()}}
    if method == "GET" and path == "/queue":
        sw = _switch(tw, p, required=False)
        t1, t2 = _int(p, "t1_ns"), _int(p, "t2_ns")
        if t2 <= t1:
            raise ApiError(400, "t2_ns must be greater than t1_ns")
        if tw.queues is None:
            raise ApiError(404, "the queue model runs only with --gnmi")
        try:
            a, b = tw.true_queue(sw, t1), tw.true_queue(sw, t2)
            wm = tw.true_watermark(sw, t1, t2)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        deltas = {k: [int(x) for x in (b[k] - a[k])] for k in a if k != "q_bytes"}
        return {**_port_labels(tw, sw), "t1_ns": t1, "t2_ns": t2, **deltas,
                "watermark_bytes": [int(x) for x in wm]}
    if method == "GET" and path == "/ports":
        sw = _switch(tw, p)
        assert sw is not None
        return {"switch": sw, "ports": tw.switch_ports(sw)}
    if method == "GET" and path == "/counters":
        sw = _switch(tw, p, required=False)
        t = _int(p, "t_ns")
        try:
            values = tw.counters_at(sw, t)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return {**_port_labels(tw, sw), "t_ns": t, **{k: [int(x) for x in v] for k, v in values.items()}}
    if method == "GET" and path == "/lldp":
        sw = _switch(tw, p)
        assert sw is not None
        return {"switch": sw, "neighbours": [asdict(n) for n in tw.lldp_neighbours(sw)]}
    if method == "POST" and path.startswith("/fault/"):
        sw = _switch(tw, p)
        assert sw is not None
        kind = path.removeprefix("/fault/")
        if kind == "miscable":  # plug host's nic into switch:port
            missing = [k for k in ("host", "nic", "port") if not p.get(k)]
            if missing:
                raise ApiError(400, f"miscable needs {', '.join(missing)} (and switch)")
            try:
                return {"ok": True, "fault": kind, **tw.miscable(p["host"], p["nic"], sw, p["port"])}
            except ValueError as exc:
                raise ApiError(400, str(exc)) from None
        if kind == "restart":
            tw.restart(sw)
        elif kind == "unreachable":
            tw.set_unreachable(sw, p.get("on", "1") not in ("0", "false", "no", "off"))
        elif kind == "wrap":
            try:
                seconds = float(p.get("seconds", "2"))
            except ValueError:
                raise ApiError(400, f"seconds must be a number, got {p['seconds']!r}") from None
            if not seconds > 0:
                raise ApiError(400, "seconds must be > 0")
            tw.wrap(sw, seconds_to_wrap=seconds)
        else:
            raise ApiError(404, f"unknown fault {kind!r} (restart, unreachable, wrap, miscable)")
        return {"ok": True, "fault": kind, "switch": sw}
    raise ApiError(404, f"no route {method} {path}")


def serve_control(tw: Twin, port: int = 0) -> tuple[ThreadingHTTPServer, int]:
    """Start the control API on 127.0.0.1:``port`` in a daemon thread; returns (server, bound port)."""

    class Handler(BaseHTTPRequestHandler):
        def _do(self, method: str) -> None:
            url = urlsplit(self.path)
            try:
                status, body = 200, handle(tw, method, url.path, _params(url.query))
            except ApiError as exc:
                status, body = exc.status, {"error": str(exc)}
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout on a busy box): nobody to answer

        def do_GET(self) -> None:
            self._do("GET")

        def do_POST(self) -> None:
            self._do("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the twin's stdout is for its summary line, not per-request noise

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="twin-control", daemon=True).start()
    return server, server.server_address[1]
