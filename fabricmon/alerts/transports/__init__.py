"""One module per receiver kind (``<kind>.py`` with a ``Transport`` class), sharing one error type.

Transports only build the request and read the answer; retry timing, dedup and silences are
pipeline stages in ``services`` (Alertmanager's split). A transport says *whether* to retry:
``TransportError(message, permanent=…, retry_after_s=…)``. Messages never contain the receiver
URL — for chat hooks the URL is the credential.
"""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from fabricmon.alerts.netguard import Policy, RefusedAddressError, Response, post

DEFAULT_TIMEOUT_S = 15.0


class TransportError(Exception):
    """Delivery failed. ``permanent``: retrying will not help (disable the receiver)."""

    def __init__(self, message: str, permanent: bool = False, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Message:
    """What is known about one alert transition, frozen into the outbox row as JSON."""

    id: str  # stable per (transition, receiver): the idempotency key receivers may use
    fingerprint: str
    fabric: str
    kind: str
    key: str
    status: str  # firing | resolved | test
    summary: str
    starts_at: str  # RFC 3339
    ends_at: str = ""
    run_name: str = ""
    # "run X · layer L dispatch · rank R (nodeNNN gpuG)" or "unknown" (alerts.attribution)
    attribution: str = ""
    link: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        icon = {"firing": "🔥", "resolved": "✅", "test": "🧪"}.get(self.status, "")
        return f"{icon} [{self.status.upper()}] {self.kind.replace('_', ' ')} on {self.fabric}"

    def facts(self) -> list[tuple[str, str]]:
        out = [("Where", self.key), ("Since", self.starts_at)]
        if self.ends_at:
            out.append(("Until", self.ends_at))
        if self.run_name:
            out.append(("Run", self.run_name))
        if self.attribution:
            out.append(("Attributed to", self.attribution))
        traj = self.details.get("trajectory")
        if traj:
            out.append(("Moved", " → ".join(traj[-6:])))
        return out


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    secret: str = ""


def retry_after_seconds(resp: Response, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds or an HTTP date; Discord's JSON ``retry_after`` as a fallback."""
    raw = resp.headers.get("retry-after")
    if raw:
        raw = raw.strip()
        try:
            return max(0.0, float(raw))
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(raw) if raw else None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - (now if now is not None else time.time()))
    try:
        value = json.loads(resp.body or b"{}").get("retry_after")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


class HttpTransport:
    """POST a JSON body; 2xx = delivered. Subclasses build the payload and add quirks."""

    def __init__(self, target: Target, policy: Policy) -> None:
        self.target = target
        self.policy = policy

    def url(self, msg: Message) -> str:
        return self.target.url

    def payload(self, msg: Message) -> Any:
        raise NotImplementedError

    def headers(self, body: bytes, msg: Message) -> dict[str, str]:
        return {}

    def notify(self, msg: Message) -> None:
        body = json.dumps(self.payload(msg), separators=(",", ":")).encode()
        try:
            resp = post(
                self.url(msg), body, self.headers(body, msg), policy=self.policy, timeout_s=DEFAULT_TIMEOUT_S
            )
        except RefusedAddressError as exc:
            raise TransportError(f"{self.target.name}: {exc}", permanent=True) from exc
        except OSError as exc:
            # Connection refused, reset, timeout: the receiver may come back.
            raise TransportError(f"{self.target.name}: connection failed ({type(exc).__name__})") from exc
        if 200 <= resp.status < 300:
            return
        self.raise_for_response(resp)

    def raise_for_response(self, resp: Response) -> None:
        name = self.target.name
        if resp.status == 429:
            raise TransportError(f"{name}: rate limited (429)", retry_after_s=retry_after_seconds(resp))
        if resp.status in (408, 425) or resp.status >= 500:
            raise TransportError(
                f"{name}: received status code {resp.status}", retry_after_s=retry_after_seconds(resp)
            )
        if resp.status in (404, 410):
            # Chat hooks answer 404/410 once deleted: they will never work again.
            raise TransportError(f"{name}: received status code {resp.status} (hook gone)", permanent=True)
        if 300 <= resp.status < 400:
            raise TransportError(f"{name}: redirect ({resp.status}) not followed", permanent=True)
        raise TransportError(f"{name}: received status code {resp.status}", permanent=True)


def transport_for(kind: str, target: Target, policy: Policy) -> HttpTransport:
    """``fabricmon.alerts.transports.<kind>.Transport`` — adding a receiver kind = adding a module."""
    if not kind.isidentifier():
        raise ValueError(f"unknown receiver kind {kind!r}")
    try:
        module = import_module(f"fabricmon.alerts.transports.{kind}")
    except ModuleNotFoundError as exc:
        raise ValueError(f"unknown receiver kind {kind!r}") from exc
    cls: type[HttpTransport] = module.Transport
    return cls(target, policy)
