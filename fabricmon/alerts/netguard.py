"""Outgoing HTTP for notifications: an SSRF guard checked at connect time, one deadline for the
whole exchange, and a cap on what is read back.

A receiver URL is typed by a user, so it may point at the metadata service, loopback or the
internal network. Checking the URL when it is saved is not enough (DNS rebinding, redirects), so,
like healthchecks' OPENSOCKETFUNCTION, the check runs when each socket is opened:

    URL host ──getaddrinfo──> [ip, ip, …] ──every ip must pass──> connect to *that* ip
                                                                  (TLS SNI/Host keep the name)

An address passes when it is global or when an admin allowed the host name or an IP range
containing it (``addresses.refusal``). A slow or hostile receiver cannot hold a worker: DNS,
connect, TLS, sending and every read share one deadline (``Policy.deadline_s``, across
redirects), and at most ``Policy.max_response_bytes`` of a body are read before the connection is
closed. Redirects are followed (at most 3), each hop through the same guard.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from fabricmon.alerts.addresses import refusal

MAX_REDIRECTS = 3
USER_AGENT = "fabricmon-alerts"  # Alertmanager sends "Alertmanager/<version>": receivers log who called

__all__ = [
    "DeadlineExceededError",
    "Policy",
    "RefusedAddressError",
    "Response",
    "TooManyRedirectsError",
    "post",
]


class RefusedAddressError(Exception):
    """The destination resolves to an address the guard refuses; no connection was made."""


class TooManyRedirectsError(Exception):
    """More than ``MAX_REDIRECTS`` hops: a loop or a misconfigured endpoint, not a passing fault."""


class DeadlineExceededError(TimeoutError):
    """The delivery's overall deadline passed (a slow DNS, connect, drip-fed head or body)."""


@dataclass(frozen=True)
class Policy:
    """What notification HTTP may do: reach which exceptions to the guard (host names, IP
    addresses or CIDR ranges, from settings and admin), for how long in all, and read how much."""

    allow: tuple[str, ...] = ()
    deadline_s: float = 10.0
    max_response_bytes: int = 64 * 1024


# --- resolution -----------------------------------------------------------------------------------
# getaddrinfo has no timeout of its own (libc retries a dead resolver for ~10 s per name): it runs
# on a small pool and is waited for only until the deadline. Created on first use: Celery forks.
@functools.cache
def _resolver() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="netguard-dns")


def _resolve(host: str, port: int, deadline: float) -> list[Any]:
    job = _resolver().submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        return job.result(timeout=_left(deadline))
    except FutureTimeout as exc:
        job.cancel()
        raise DeadlineExceededError(f"resolving {host} took longer than the delivery deadline") from exc
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror}") from exc


def vetted_addresses(
    host: str, port: int, policy: Policy, deadline: float | None = None
) -> list[tuple[int, str]]:
    """Resolve and check every address; all must pass (one bad record refuses the host)."""
    infos = _resolve(host, port, deadline if deadline is not None else time.monotonic() + policy.deadline_s)
    out: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        why = refusal(host, ip, policy.allow)
        if why is not None:
            raise RefusedAddressError(f"{host} resolves to {ip}{why}, which is not allowed for notifications")
        out.append((family, str(sockaddr[0])))
    if not out:
        raise OSError(f"{host} has no addresses")
    return out


# --- sockets that know the deadline ---------------------------------------------------------------
def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError("the delivery deadline passed")
    return left


class _DeadlineIO:
    """Before every send and receive the socket's timeout is set to what is left of the deadline,
    so a receiver dripping a byte every few seconds is cut off at the deadline, not per read."""

    deadline: float = float("inf")

    def _arm(self) -> None:
        self.settimeout(_left(self.deadline))  # type: ignore[attr-defined]

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        self._arm()
        return super().recv(*args, **kwargs)  # type: ignore[misc]

    def recv_into(self, *args: Any, **kwargs: Any) -> Any:
        self._arm()
        return super().recv_into(*args, **kwargs)  # type: ignore[misc]

    def send(self, *args: Any, **kwargs: Any) -> Any:
        self._arm()
        return super().send(*args, **kwargs)  # type: ignore[misc]

    def sendall(self, *args: Any, **kwargs: Any) -> Any:
        self._arm()  # sendall's timeout bounds the whole call (Python ≥ 3.5)
        return super().sendall(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_DeadlineIO, socket.socket):
    pass


class _DeadlineSSLSocket(_DeadlineIO, ssl.SSLSocket):
    pass


def _connect_vetted(host: str, port: int, policy: Policy, deadline: float) -> socket.socket:
    last: OSError | None = None
    for family, ip in vetted_addresses(host, port, policy, deadline):
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        sock.deadline = deadline
        try:
            sock.settimeout(_left(deadline))
            sock.connect((ip, port))  # the vetted IP itself: no second resolution to rebind
            return sock
        except OSError as exc:
            sock.close()
            last = exc
            if isinstance(exc, DeadlineExceededError):
                break
    raise last or OSError(f"cannot connect to {host}")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    policy: Policy = Policy()
    deadline: float = float("inf")

    def connect(self) -> None:
        self.sock = _connect_vetted(self.host, self.port, self.policy, self.deadline)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    policy: Policy = Policy()
    deadline: float = float("inf")

    def connect(self) -> None:
        raw = _connect_vetted(self.host, self.port, self.policy, self.deadline)
        ctx = ssl.create_default_context()
        ctx.sslsocket_class = _DeadlineSSLSocket
        raw.settimeout(_left(self.deadline))  # the handshake, too, within the deadline
        tls = ctx.wrap_socket(raw, server_hostname=self.host)
        tls.deadline = self.deadline  # type: ignore[attr-defined]
        self.sock = tls


# --- one request --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool = False  # the receiver sent more than Policy.max_response_bytes: the rest unread


def _read_capped(resp: http.client.HTTPResponse, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the body; ``truncated`` if there was more or it did not arrive.
    The status and headers are in by now, and they are the answer: a body that is short, endless
    or drip-fed past the deadline changes nothing about it."""
    try:
        data = resp.read(cap + 1)
    except http.client.IncompleteRead as exc:
        return exc.partial[:cap], True
    except (OSError, ValueError, http.client.HTTPException):  # deadline, reset, bad chunk framing
        return b"", True
    return data[:cap], len(data) > cap


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    policy: Policy,
    method: str = "POST",
) -> Response:
    """Send one request through the guard within ``policy.deadline_s`` in all, following up to 3
    redirects (each hop vetted). Raises ``RefusedAddressError``, ``DeadlineExceededError`` /
    ``OSError`` (the network), ``http.client.HTTPException`` (an answer that is not HTTP),
    ``TooManyRedirectsError`` or ``ValueError`` (a URL that cannot be requested)."""
    deadline = time.monotonic() + policy.deadline_s
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RefusedAddressError(
                f"only http(s) URLs with a host are allowed (got scheme {parts.scheme!r})"
            )
        cls = _GuardedHTTPSConnection if parts.scheme == "https" else _GuardedHTTPConnection
        conn = cls(parts.hostname, parts.port)  # parts.port raises ValueError on a bad port
        conn.policy = policy
        conn.deadline = deadline
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        try:
            conn.request(
                method,
                path,
                body=body,
                headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
            )
            resp = conn.getresponse()
            data, truncated = _read_capped(resp, policy.max_response_bytes)
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        if resp.status in (301, 302, 303, 307, 308) and "location" in hdrs:
            url = urljoin(url, hdrs["location"])
            if resp.status == 303:
                method, body = "GET", b""
            continue
        return Response(resp.status, hdrs, data, truncated)
    raise TooManyRedirectsError(f"more than {MAX_REDIRECTS} redirects")
