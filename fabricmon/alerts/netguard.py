"""Outgoing HTTP for notifications, behind an SSRF guard checked at connect time.

A receiver URL is typed by a user, so it may point at the metadata service, loopback or the
internal network. Checking the URL when it is saved is not enough (DNS rebinding, redirects), so,
like healthchecks' OPENSOCKETFUNCTION, the check runs when each socket is opened:

    URL host ──getaddrinfo──> [ip, ip, …] ──every ip must pass──> connect to *that* ip
                                                                  (TLS SNI/Host keep the name)

An address passes when it is global (``ip.is_global``: not loopback, private, link-local, CGNAT,
IPv4-mapped tricks …) or when an admin allowed the host name or an IP range containing it. The
cloud metadata addresses are refused even inside an allowed range unless named exactly.
Redirects are followed (at most 3), each hop through the same guard; 3xx beyond that fails.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
MAX_REDIRECTS = 3


class RefusedAddressError(Exception):
    """The destination resolves to an address the guard refuses; no connection was made."""


@dataclass(frozen=True)
class Policy:
    """Exceptions to the guard: host names, IP addresses or CIDR ranges, from settings and admin."""

    allow: tuple[str, ...] = ()

    def permits(self, host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        host = host.lower().strip("[]")
        for raw in self.allow:
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == host:
                return True
            try:
                net = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            if ip in net and (ip not in METADATA or net.num_addresses == 1):
                return True
        return ip.is_global and ip not in METADATA


def vetted_addresses(host: str, port: int, policy: Policy) -> list[tuple[int, str]]:
    """Resolve and check every address; all must pass (one bad record refuses the host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror}") from exc
    out: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not policy.permits(host, ip):
            raise RefusedAddressError(f"{host} resolves to {ip}, which is not allowed for notifications")
        out.append((family, str(sockaddr[0])))
    if not out:
        raise OSError(f"{host} has no addresses")
    return out


class _GuardedHTTPConnection(http.client.HTTPConnection):
    policy: Policy = Policy()

    def connect(self) -> None:
        self.sock = _connect_vetted(self.host, self.port, self.policy, self.timeout)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    policy: Policy = Policy()

    def connect(self) -> None:
        raw = _connect_vetted(self.host, self.port, self.policy, self.timeout)
        ctx = ssl.create_default_context()
        self.sock = ctx.wrap_socket(raw, server_hostname=self.host)


def _connect_vetted(host: str, port: int, policy: Policy, timeout: float | None) -> socket.socket:
    last: OSError | None = None
    for family, ip in vetted_addresses(host, port, policy):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((ip, port))  # the vetted IP itself: no second resolution to rebind
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"cannot connect to {host}")


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    policy: Policy,
    timeout_s: float = 15.0,
    method: str = "POST",
) -> Response:
    """Send one request through the guard, following up to 3 redirects (each hop vetted)."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RefusedAddressError(
                f"only http(s) URLs with a host are allowed (got scheme {parts.scheme!r})"
            )
        cls = _GuardedHTTPSConnection if parts.scheme == "https" else _GuardedHTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=timeout_s)
        conn.policy = policy
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        if resp.status in (301, 302, 303, 307, 308) and "location" in hdrs:
            url = urljoin(url, hdrs["location"])
            if resp.status == 303:
                method, body = "GET", b""
            continue
        return Response(resp.status, hdrs, data)
    raise OSError(f"more than {MAX_REDIRECTS} redirects")
