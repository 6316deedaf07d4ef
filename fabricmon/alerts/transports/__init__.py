"""One module per receiver kind (``<kind>.py`` with a ``Transport`` class), sharing one error type.

Transports only build the request and read the answer; grouping, group timing, retry timing,
dedup and silences are pipeline stages in ``services``, ``grouping`` and ``delivery``
(Alertmanager's split). What a transport sends is one ``Notification``: one flush of one group,
carrying every alert of the group (firing, and resolved ones not yet sent). A transport says
*whether* to retry: ``TransportError(message, permanent=…, retry_after_s=…)``. Messages never
contain the receiver URL — for chat hooks the URL is the credential.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import time
from dataclasses import asdict, dataclass, field
from importlib import import_module
from typing import Any

from fabricmon.alerts.netguard import Policy, RefusedAddressError, Response, TooManyRedirectsError, post


class TransportError(Exception):
    """Delivery failed. ``permanent``: retrying will not help (the receiver is disabled, the
    reason shown on its page). Otherwise the outbox retries with backoff, up to its attempts."""

    def __init__(self, message: str, permanent: bool = False, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Message:
    """One alert as a notification carries it: what its latest firing or resolution said."""

    id: str  # the alert's transition and receiver (a pre-grouping row: the idempotency key)
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

    def labels(self) -> dict[str, str]:
        """The alert's labels (timing.LABELS): what group_by picks from, and what Alertmanager and
        the webhook receive."""
        out = {"alertname": self.kind, "fabric": self.fabric, "scope": self.key}
        if self.run_name:
            out["run"] = self.run_name
        return out

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


# Alerts carried by one notification at most (Alertmanager's webhook ``max_alerts``); the rest are
# counted in ``truncated``. Chat messages list fewer (``CHAT_ALERTS``), and say how many more.
MAX_ALERTS = 200
CHAT_ALERTS = 10


@dataclass(frozen=True)
class Notification:
    """One flush of one group to one receiver, frozen into the outbox row as JSON."""

    id: str  # stable per flush: the idempotency key receivers may use (webhook-id)
    receiver: str
    group_key: str  # Alertmanager's form: {}:{alertname="incast", fabric="su1"}
    group_labels: dict[str, str]
    alerts: tuple[Message, ...]
    truncated: int = 0  # alerts of the group left out (over MAX_ALERTS)

    @property
    def firing(self) -> list[Message]:
        return [a for a in self.alerts if a.status == "firing"]

    @property
    def status(self) -> str:
        """``firing`` while any alert fires, else ``resolved`` (``test`` for the test button)."""
        if self.firing:
            return "firing"
        return "test" if self.alerts and all(a.status == "test" for a in self.alerts) else "resolved"

    @property
    def title(self) -> str:
        """``🔥 [FIRING:2] incast on su1`` — Alertmanager's ``[FIRING:n]``, our kind and fabric."""
        icon = {"firing": "🔥", "resolved": "✅", "test": "🧪"}.get(self.status, "")
        count = f":{len(self.firing)}" if self.status == "firing" else ""
        kinds = {a.kind for a in self.alerts}
        fabrics = {a.fabric for a in self.alerts}
        what = kinds.pop().replace("_", " ") if len(kinds) == 1 else "alerts"
        where = fabrics.pop() if len(fabrics) == 1 else "several fabrics"
        return f"{icon} [{self.status.upper()}{count}] {what} on {where}"

    @property
    def summary(self) -> str:
        """One line per alert (the first ``CHAT_ALERTS``), and how many more there are."""
        lines = [f"{'✅ ' if a.status == 'resolved' else ''}{a.summary}" for a in self.alerts[:CHAT_ALERTS]]
        more = len(self.alerts) - CHAT_ALERTS + self.truncated
        return "\n".join(lines + ([f"… and {more} more"] if more > 0 else []))

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Notification:
        """A stored row; one from before grouping (a single ``Message``) becomes a one-alert
        notification with the message's id."""
        if "alerts" not in payload:
            msg = Message(**payload)
            return cls.of(msg.id, "", [msg])
        data = dict(payload)
        data["alerts"] = tuple(Message(**a) for a in data["alerts"])
        return cls(**data)

    @classmethod
    def of(cls, id: str, receiver: str, alerts: list[Message], group_labels: dict[str, str] | None = None,
           group_key: str = "") -> Notification:
        """A notification of ``alerts``, firing ones first, at most ``MAX_ALERTS``."""
        ordered = sorted(alerts, key=lambda a: (a.status != "firing", a.starts_at, a.key))
        return cls(id, receiver, group_key, dict(group_labels or {}), tuple(ordered[:MAX_ALERTS]),
                   max(0, len(ordered) - MAX_ALERTS))


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    secret: str = ""


def retry_after_seconds(resp: Response, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds or an HTTP date; Discord's JSON ``retry_after`` as a fallback.
    Anything that is not a finite number of seconds (``inf``, ``nan``, garbage) counts as absent."""
    value = _retry_after(resp, now)
    return value if value is not None and math.isfinite(value) else None


def _retry_after(resp: Response, now: float | None) -> float | None:
    raw = resp.headers.get("retry-after")
    if raw:
        raw = raw.strip()
        try:
            return max(0.0, float(raw))
        except ValueError:
            try:
                parsed = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                parsed = None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - (now if now is not None else time.time()))
    try:
        value = json.loads(resp.body or b"{}").get("retry_after")
    except (ValueError, AttributeError, RecursionError):  # a body is whatever the receiver sent
        return None
    return float(value) if isinstance(value, int | float) else None


class HttpTransport:
    """POST a JSON body; 2xx = delivered. Subclasses build the payload and add quirks."""

    def __init__(self, target: Target, policy: Policy) -> None:
        self.target = target
        self.policy = policy

    def url(self, msg: Notification) -> str:
        return self.target.url

    def payload(self, msg: Notification) -> Any:
        raise NotImplementedError

    def headers(self, body: bytes, msg: Notification) -> dict[str, str]:
        return {}

    def notify(self, msg: Notification) -> None:
        """Send ``msg``; return if the receiver took it, else raise ``TransportError`` saying
        whether a retry can help (the classification table in ``classify``)."""
        name = self.target.name
        try:
            body = json.dumps(self.payload(msg), separators=(",", ":")).encode()
            headers = self.headers(body, msg)
        except ValueError as exc:  # e.g. a secret that is not a whsec_ key: fixing it takes a human
            raise TransportError(f"{name}: cannot build the request: {exc}", permanent=True) from exc
        try:
            resp = post(self.url(msg), body, headers, policy=self.policy)
        except Exception as exc:
            raise classify(name, exc, self.policy) from exc
        if 200 <= resp.status < 300:
            return
        self.raise_for_response(resp)

    def raise_for_response(self, resp: Response) -> None:
        """Alertmanager's Retrier: 2xx delivered, 5xx retried; here 408 and 429 too (with the
        receiver's Retry-After). Any other 4xx and an unfollowed 3xx are permanent."""
        name = self.target.name
        said = _excerpt(resp.body)
        if resp.status == 429:
            raise TransportError(f"{name}: rate limited (429)", retry_after_s=retry_after_seconds(resp))
        if resp.status == 408 or resp.status >= 500:
            raise TransportError(
                f"{name}: unexpected status code {resp.status}{said}", retry_after_s=retry_after_seconds(resp)
            )
        if resp.status in (404, 410):
            # Chat hooks answer 404/410 once deleted: they will never work again.
            raise TransportError(
                f"{name}: unexpected status code {resp.status} (hook gone){said}", permanent=True
            )
        if 300 <= resp.status < 400:
            raise TransportError(f"{name}: redirect ({resp.status}) not followed", permanent=True)
        raise TransportError(f"{name}: unexpected status code {resp.status}{said}", permanent=True)


def _excerpt(body: bytes, limit: int = 120) -> str:
    """The start of a receiver's answer, printable, for the reason shown to the operator."""
    text = "".join(ch if ch.isprintable() else " " for ch in body[:limit].decode(errors="replace")).strip()
    return f": {text}" if text else ""


def classify(name: str, exc: Exception, policy: Policy) -> TransportError:
    """A failure of the exchange itself (no HTTP status to judge):

    =====================================================  =========  ===========================
    refused by the SSRF guard, a URL that cannot be        permanent  a human must fix the URL
    requested (ValueError, http.client.InvalidURL),
    more than 3 redirects
    an answer that is not HTTP (BadStatusLine, header      permanent  the endpoint is not an HTTP
    lines too long or too many: http.client.HTTPException)            receiver
    the deadline (connect + every read), a timeout,        retryable  the receiver may come back
    refused or reset connection, a closed connection
    without an answer (RemoteDisconnected), DNS failure
    anything else                                          permanent  never leave a row "sending"
    =====================================================  =========  ===========================
    """
    kind = type(exc).__name__
    if isinstance(exc, RefusedAddressError | TooManyRedirectsError):
        return TransportError(f"{name}: {exc}", permanent=True)
    if isinstance(exc, ValueError | http.client.InvalidURL):  # InvalidURL is an HTTPException
        # Not the exception's text: http.client quotes the whole URL, and a chat hook's URL is its key.
        return TransportError(f"{name}: invalid URL ({kind})", permanent=True)
    if isinstance(exc, TimeoutError):
        return TransportError(f"{name}: no complete answer within the {policy.deadline_s:g} s deadline")
    if isinstance(exc, http.client.RemoteDisconnected | ConnectionError):
        return TransportError(f"{name}: connection failed ({kind})")
    if isinstance(exc, http.client.HTTPException):
        return TransportError(f"{name}: the answer is not HTTP ({kind})", permanent=True)
    if isinstance(exc, OSError):
        return TransportError(f"{name}: connection failed ({kind}: {exc.strerror or exc})")
    return TransportError(f"{name}: delivery failed ({kind})", permanent=True)


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
