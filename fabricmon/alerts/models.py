"""Alert rules, alert state, episodes, silences, receivers and the delivery outbox.

::

    Rule (fabric, kind, thresholds) ── evaluated per window by services.record_window
    Alert (one per fingerprint) ──< AlertTransition   every state change is a row (audit log)
      │                                  └──< Outbox ──> Receiver   one row per notification
      └──> Episode   alerts of one family (incast + moving incast, or one other kind) of one
                     fabric (and run) that overlap in time; a moving incast is one episode while
                     it moves, its trajectory stored on the episode; a switch outage is one
    Silence   matches fabric/kind/key; silenced transitions are stored but not sent
    NotificationGroup (receiver + group labels) ──< GroupMember   the firing and not yet sent
                      resolved alerts a receiver's group holds, its timer and its notification log;
                      a flush of it is one Outbox row (alerts.grouping, docs/alerts.md)

Nothing here has behaviour hidden in ``save()`` or signals: the verbs live in ``services``.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from fabricmon.alerts import timing
from fabricmon.base.sealed import SealedField

KINDS = [
    ("incast", "Incast"),
    ("moving_incast", "Moving incast"),
    ("pfc_storm", "PFC storm"),
    ("ecmp_imbalance", "ECMP imbalance"),
    ("rail_violation", "Rail-plan violation"),
    ("rail_plan_violation", "Cabling off the rail plan (LLDP)"),
    ("target_down", "Target down"),
]


class Rule(models.Model):
    """One detection rule for one fabric: thresholds (``DetectConfig`` overrides) and lifecycle."""

    fabric = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=KINDS)
    enabled = models.BooleanField(default=True)
    for_s = models.FloatField(default=1.0, help_text="condition must hold this long before firing")
    keep_firing_s = models.FloatField(default=3.0, help_text="firing outlives the condition this long")
    params = models.JSONField(default=dict, blank=True, help_text="DetectConfig overrides, e.g. fan_in_min")

    class Meta:
        constraints = [models.UniqueConstraint(fields=("fabric", "kind"), name="alerts_rule_unique")]
        ordering = ("fabric", "kind")

    def __str__(self) -> str:
        return f"{self.fabric}/{self.kind}"


class Episode(models.Model):
    """Alerts of one fabric (and run) that overlap in time, with the hot set's trajectory."""

    fabric = models.CharField(max_length=100)
    run_name = models.CharField(max_length=200, blank=True, default="")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # "incast" (incast and moving incast: one hot set, moving or not) or the alert kind itself
    family = models.CharField(max_length=32, default="incast")
    kinds = models.JSONField(default=list)  # alert kinds seen in the episode
    # [{ts_ns, ports, hosts, gpus, ranks, leaf_jump, rail_jump}], one entry per hot-set change
    trajectory = models.JSONField(default=list)
    migrations = models.PositiveIntegerField(default=0)
    # culprit.Culprit.as_json() of the first attributed alert: run, rank, layer, phase
    attribution = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-opened_at",)

    def __str__(self) -> str:
        return f"episode {self.pk} on {self.fabric}"

    @property
    def attribution_line(self) -> str:
        return str(self.attribution.get("line") or "unknown")


def family_of(kind: str) -> str:
    """The episode an alert kind joins: a hot set's incast and moving incast share one (it is the
    same congestion, moving or not); every other kind has episodes of its own (one per outage)."""
    return "incast" if kind in ("incast", "moving_incast") else kind


class Alert(models.Model):
    """The current state of one fingerprint (fabric + kind + scope key + run)."""

    class State(models.TextChoices):
        PENDING = "pending"
        FIRING = "firing"
        RESOLVED = "resolved"
        INACTIVE = "inactive"

    fingerprint = models.CharField(max_length=32, unique=True)
    fabric = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=KINDS)
    key = models.CharField(max_length=200)
    run_name = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices)
    summary = models.TextField(default="")
    details = models.JSONField(default=dict, blank=True)
    # culprit.Culprit.as_json() when it fired: run, rank, (layer, phase); {"line": "unknown"}
    attribution = models.JSONField(default=dict, blank=True)
    episode = models.ForeignKey(Episode, null=True, on_delete=models.SET_NULL, related_name="alerts")
    active_since = models.DateTimeField()
    last_true = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-active_since",)
        indexes = [models.Index(fields=("fabric", "state"))]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.state})"

    @property
    def attribution_line(self) -> str:
        return str(self.attribution.get("line") or "unknown")


class AlertTransition(models.Model):
    """One state change of one alert — what notifications are made from (the 'Flip')."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="transitions")
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    at = models.DateTimeField()
    summary = models.TextField(default="")
    silenced = models.BooleanField(default=False)

    class Meta:
        verbose_name = "alert state change"
        ordering = ("at", "id")

    def __str__(self) -> str:
        return f"{self.alert_id}: {self.from_state} → {self.to_state} at {self.at:%H:%M:%S}"


class Silence(models.Model):
    """Mute notifications matching fabric (and optionally kind, key substring) for a while."""

    fabric = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, blank=True, default="", help_text="blank = every kind")
    key_contains = models.CharField(max_length=200, blank=True, default="")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    comment = models.CharField(max_length=300, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ("-ends_at",)

    def __str__(self) -> str:
        return f"silence {self.fabric}/{self.kind or '*'}/{self.key_contains or '*'} until {self.ends_at}"


def valid_group_by(value: object) -> None:
    if not isinstance(value, list):
        raise ValidationError("a list of label names")
    try:
        timing.clean_group_by(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _check_interval(field: str, value: float) -> None:
    problem = timing.GroupTiming(**{field: value}).problems().get(field)  # type: ignore[arg-type]
    if problem:
        raise ValidationError(problem)


def valid_group_wait(value: float) -> None:
    _check_interval("group_wait_s", value)


def valid_group_interval(value: float) -> None:
    _check_interval("group_interval_s", value)


def valid_repeat_interval(value: float) -> None:
    _check_interval("repeat_interval_s", value)


class Receiver(models.Model):
    """Where notifications go, and when (Alertmanager's route settings: group_by, group_wait,
    group_interval, repeat_interval; docs/alerts.md). The URL is a credential (Slack/Teams/…
    hooks): never logged, and stored encrypted like the webhook secret (revealed only by
    ``delivery``)."""

    class Kind(models.TextChoices):
        SLACK = "slack"
        MSTEAMS = "msteams"
        MATTERMOST = "mattermost"
        DISCORD = "discord"
        WEBHOOK = "webhook"
        ALERTMANAGER = "alertmanager"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # forms check the URL (ReceiverForm); the column holds a token, so no URL validator here
    url = SealedField(max_length=500)
    secret = SealedField(max_length=200, blank=True, default="", help_text="whsec_… for signed webhooks")
    fabric = models.CharField(max_length=100, blank=True, default="", help_text="blank = every fabric")
    kinds = models.JSONField(default=list, blank=True, help_text="alert kinds; empty = all")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="set: only alerts attributed to this user's runs",
    )
    send_resolved = models.BooleanField(default=True)
    group_by = models.JSONField(
        default=timing.default_group_by, blank=True, validators=[valid_group_by],
        help_text="labels whose values make a group (alertname, fabric, scope, run; ... = every "
                  "label; empty = one group)",
    )
    group_wait_s = models.FloatField(
        default=timing.DEFAULT_GROUP_WAIT_S, validators=[valid_group_wait],
        help_text="a new group's first notification waits this long for more alerts",
    )
    group_interval_s = models.FloatField(
        default=timing.DEFAULT_GROUP_INTERVAL_S, validators=[valid_group_interval],
        help_text="a group's changes are sent at most this often",
    )
    repeat_interval_s = models.FloatField(
        default=timing.DEFAULT_REPEAT_INTERVAL_S, validators=[valid_repeat_interval],
        help_text="an unchanged firing group is sent again after this long",
    )
    disabled = models.BooleanField(default=False)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AllowedHost(models.Model):
    """An admin's exception to the SSRF guard: a host name, or an IP/CIDR (e.g. an on-prem
    Alertmanager at 10.0.0.5)."""

    host = models.CharField(max_length=200, unique=True)
    comment = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return self.host


class Outbox(models.Model):
    """One notification of one transition to one receiver. Claimed with a conditional UPDATE that
    takes a lease (``claimed_until``, longer than a delivery's deadline), so only one worker sends
    it and a row in flight is never handed out again; retried with backoff until sent, failed for
    good (permanent error, out of attempts, too old) — ``last_error`` says why."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        SENT = "sent"
        FAILED = "failed"

    transition = models.ForeignKey(
        AlertTransition, null=True, on_delete=models.CASCADE, related_name="outbox"
    )
    # The group whose flush this is (None: a test message, or a row from before grouping).
    group = models.ForeignKey(
        "NotificationGroup", null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications"
    )
    receiver = models.ForeignKey(Receiver, on_delete=models.CASCADE, related_name="outbox")
    payload = models.JSONField()  # transports.Notification as JSON, frozen when the group flushed
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The claim's lease: until then the row is its claimer's; after it, a dead worker's row is due.
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox"
        ordering = ("created_at", "id")
        indexes = [models.Index(fields=("status", "next_attempt_at"))]
        constraints = [
            models.UniqueConstraint(
                fields=("transition", "receiver"),
                name="alerts_outbox_once",
                condition=models.Q(transition__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"outbox {self.pk} → receiver {self.receiver_id} ({self.status})"


class NotificationGroup(models.Model):
    """One aggregation group of one receiver: the alerts whose ``group_by`` labels have these
    values, its timer (``next_flush_at``) and its notification log (what the last notification
    said). A group without alerts stops ticking (``emptied_at``) and is dropped after
    ``FABRICMON_ALERTS_GROUP_RETENTION_S``; its next alert starts a new group_wait."""

    receiver = models.ForeignKey(Receiver, on_delete=models.CASCADE, related_name="groups")
    key = models.CharField(max_length=32)  # timing.group_id(labels)
    labels = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    next_flush_at = models.DateTimeField(null=True, blank=True)
    flushes = models.PositiveIntegerField(default=0)  # numbers the notifications (their id)
    notified_at = models.DateTimeField(null=True, blank=True)
    notified_firing = models.JSONField(default=list, blank=True)  # fingerprints
    notified_resolved = models.JSONField(default=list, blank=True)
    emptied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("receiver", "key")
        constraints = [models.UniqueConstraint(fields=("receiver", "key"), name="alerts_group_unique")]
        indexes = [models.Index(fields=("next_flush_at",)), models.Index(fields=("emptied_at",))]

    def __str__(self) -> str:
        return f"{self.receiver_id} {timing.group_key(self.labels)}"


class GroupMember(models.Model):
    """One alert in one group as the group knows it: firing, or resolved and not yet flushed;
    ``message`` is the alert's ``transports.Message`` from its latest firing or resolution."""

    group = models.ForeignKey(NotificationGroup, on_delete=models.CASCADE, related_name="members")
    fingerprint = models.CharField(max_length=32)
    firing = models.BooleanField()
    message = models.JSONField()
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ("group", "fingerprint")
        constraints = [models.UniqueConstraint(fields=("group", "fingerprint"), name="alerts_member_unique")]
        indexes = [models.Index(fields=("fingerprint",))]

    def __str__(self) -> str:
        return f"{self.fingerprint} in group {self.group_id} ({'firing' if self.firing else 'resolved'})"
