"""Training runs, their rank maps, phase events and per-(step, layer, phase) traffic matrices.

::

    Run ──< RankMapEntry      rank → host, local GPU, NIC → switch port
     │
     ├──< EventBlock          one ingested batch of phase events as compact numpy columns
     │     └──< EventBlockKey (source, step) held by the block, its layers and phases: the lookup index
     ├──< EventIdSet          stored event ids, 64 sequence numbers a row: the idempotency keys
     ├──< TrafficMatrix       M[src][dst] bytes for one (step, layer, phase), nxn int64 blob
     └──< MatrixPart          bytes batches added to a matrix of many ranks, not yet folded in

Events are many (millions per run) and arrive in batches of ~1,000, so a batch is stored as one
``EventBlock`` row (``jobs.columns`` format) plus its ids' bits in ``EventIdSet``, and the
matrices are updated from the batch's aggregate rather than recomputed from events. Read events
with ``services.iter_events`` / ``services.event_columns``. ``PhaseEvent`` (one row per event) is
the earlier layout, kept so old data and imports keep working; ingest no longer writes it.
"""

from __future__ import annotations

import numpy as np
from django.conf import settings
from django.db import models

from collectors.traces.schema import PHASES, SOURCES, TIME_KINDS  # noqa: F401  (re-exported)
from fabricmon.jobs import matrix_blobs


class Run(models.Model):
    """One training run owned by a user; events, ranks and matrices hang off it."""

    class State(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"
        CANCELLED = "cancelled"

    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    tags = models.JSONField(default=list, blank=True)  # free strings, e.g. "model=mixtral", "ep=8"
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    fabric = models.CharField(max_length=100, blank=True, default="")
    world_size = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # Storage, kept by the retention beat (``jobs.retention``): bytes on disk for the run's event
    # blocks, matrices and id keys as of ``stored_at``, and what retention or the run's budget let go.
    stored_bytes = models.BigIntegerField(default=0)
    stored_at = models.DateTimeField(null=True, blank=True)
    pruned_below_step = models.BigIntegerField(null=True, blank=True)  # steps below it: pruned
    pruned_note = models.CharField(max_length=300, blank=True, default="")
    # Events the job's probe posters dropped before they reached the server (spool full, a batch
    # refused): {poster session: its running total}, from the X-Probe-Dropped header. Totals, not
    # increments, so a batch posted twice or lost cannot skew it (``runs.note_probe_dropped``).
    probe_dropped = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-started_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})"

    @property
    def probe_dropped_total(self) -> int:
        return sum(self.probe_dropped.values()) if isinstance(self.probe_dropped, dict) else 0


class RankMapEntry(models.Model):
    """Where one global rank ran: host, local GPU, NIC and the switch port the NIC plugs into."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ranks")
    rank = models.PositiveIntegerField()
    host = models.CharField(max_length=200)
    local_rank = models.PositiveIntegerField(null=True, blank=True)
    gpu = models.CharField(max_length=64, blank=True, default="")
    nic = models.CharField(max_length=64, blank=True, default="")
    switch = models.CharField(max_length=100, blank=True, default="")
    switch_port = models.CharField(max_length=100, blank=True, default="")
    source = models.CharField(max_length=16, default="upload")  # upload | probe

    class Meta:
        verbose_name_plural = "rank map entries"
        constraints = [models.UniqueConstraint(fields=("run", "rank"), name="jobs_rank_unique")]
        ordering = ("run", "rank")

    def __str__(self) -> str:
        return f"rank {self.rank} @ {self.host}"


class PhaseEvent(models.Model):
    """(Earlier layout, no longer written: see ``EventBlock``.) One collective call on one rank.
    Times are Unix-epoch ns on the *server's* clock: the
    reported host time plus ``clock_offset_ns`` (what the probe measured; 0 when unknown)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    event_id = models.CharField(max_length=80)
    rank = models.PositiveIntegerField()
    step = models.BigIntegerField(null=True)
    layer = models.IntegerField(null=True)
    phase = models.CharField(max_length=16)
    collective = models.CharField(max_length=40)
    pg = models.CharField(max_length=64, default="")
    pg_ranks = models.TextField(default="")  # "0,1,2,3": group rank i → global rank
    seq = models.BigIntegerField(null=True)
    start_ns = models.BigIntegerField()
    end_ns = models.BigIntegerField()
    clock_offset_ns = models.BigIntegerField(default=0)
    bytes_sent = models.BigIntegerField(null=True)
    bytes_recv = models.BigIntegerField(null=True)
    # orjson text {"send": {"3": 128}, "recv": {...}} keyed by global rank; "" when unknown.
    peer_bytes = models.TextField(default="")
    source = models.CharField(max_length=16)
    time_kind = models.CharField(max_length=16)
    host = models.CharField(max_length=200, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=("run", "event_id"), name="jobs_event_id_unique")]
        # one index beside the unique key: the timeline reads by time; per-(step, layer, phase)
        # questions are answered by TrafficMatrix, so no second index slows every insert.
        indexes = [models.Index(fields=("run", "start_ns"))]

    def __str__(self) -> str:
        return f"{self.event_id} r{self.rank} {self.phase}"


class EventBlock(models.Model):
    """One ingested batch of a run's phase events as compact columns (``jobs.columns`` blob):
    rank, step, layer, phase, start/end ns, bytes and flat per-peer arrays. Times are server-clock
    ns (offset applied). ``start_ns_min``/``max`` let time-ordered reads skip and merge blocks."""

    # no index of its own: (run, start_ns_min) below serves run lookups (one B-tree less per insert).
    # No database constraint on this table's, the key index's or the matrices' run/block: a
    # deferred FK check is one query per row at commit (~250 a batch, most of the commit's cost);
    # ingest checks (and on PostgreSQL key-share locks) the run row once per batch instead
    # (``ingest.store_columns``), a block's keys are written with it, and deletes cascade in the
    # ORM (``on_delete``), as they always did (Django emits no ON DELETE CASCADE).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="event_blocks", db_index=False, db_constraint=False
    )
    n_events = models.PositiveIntegerField()
    start_ns_min = models.BigIntegerField()
    start_ns_max = models.BigIntegerField()
    columns = models.BinaryField()  # the per-event columns (jobs.columns.encode_block)
    # the flat per-peer arrays, apart: most readers never need them (empty on blocks stored
    # before the split, which hold them in ``columns``)
    peers = models.BinaryField(default=b"")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=("run", "start_ns_min"))]

    def __str__(self) -> str:
        return f"block {self.pk}: {self.n_events} events"


class EventBlockKey(models.Model):
    """What one block holds of one (source, step): its events' layers (``layer_min`` …
    ``layer_max``), phases (bit ``PHASES.index(phase)`` of ``phases``) and how many events — the
    index that finds the blocks to read for a per-(step, layer, phase) question (step/layer -1 =
    none given). It finds a superset when a block's layers or phases are mixed; readers keep only
    the matching events (``blocks``). One row per step, not per (step, layer, phase): a batch of
    1,000 events was 125 rows (~0.3 µs an event of PostgreSQL's CPU), now 2–3."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="event_block_keys", db_index=False, db_constraint=False
    )
    block = models.ForeignKey(EventBlock, on_delete=models.CASCADE, related_name="keys", db_constraint=False)
    source = models.CharField(max_length=16)
    step = models.BigIntegerField()
    layer_min = models.IntegerField()
    layer_max = models.IntegerField()
    phases = models.PositiveIntegerField()  # a bit per phase code (collectors.traces.schema.PHASES)
    events = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=("run", "step", "layer_max"), name="jobs_blockkey_step")]

    def __str__(self) -> str:
        layers = f"{self.layer_min}…{self.layer_max}"
        return f"{self.source} step {self.step} layers {layers} in block {self.block_id}"


class EventIdSet(models.Model):
    """Which event ids of a run are stored, 64 at a time: the idempotency keys that make a re-posted
    batch store nothing new. Ids that share a prefix and a block of 64 sequence numbers
    (``rank3-`` and 128…191) share a row, one bit each (``columns.id_keys``); an id without a
    sequence number has a row of its own. A batch's ~1,000 ids are ~20 rows, claimed with one
    upsert that ORs the batch's bits in and returns the ones it ``added`` (what a claim won: the
    database decides, also between concurrent posts of one batch)::

        key_hash = hash(prefix, seq // 64)   bits = 1 << (seq % 64) | …   added = the last
                                                                              claim's new bits
    """

    pk = models.CompositePrimaryKey("run_id", "key_hash")
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    key_hash = models.BigIntegerField()
    bits = models.BigIntegerField()  # bit s % 64 set: the id with that sequence number is stored
    added = models.BigIntegerField()  # the bits the newest claim set (the claim's RETURNING)

    def __str__(self) -> str:
        return f"{self.run_id}:{self.key_hash:x} {self.bits & (2**64 - 1):064b}"


class _MatrixCells(models.Model):
    """A traffic matrix's key and cells: the columns of ``TrafficMatrix`` and of its
    ``MatrixPart`` rows alike (``matrix_rows`` writes both)."""

    source = models.CharField(max_length=16)
    step = models.BigIntegerField()  # -1: events without a step
    layer = models.IntegerField()  # -1: events without a layer
    phase = models.CharField(max_length=16)
    n_ranks = models.PositiveIntegerField()
    sent = models.BinaryField()
    received = models.BinaryField()
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class TrafficMatrix(_MatrixCells):
    """Bytes src→dst summed over one (step, layer, phase) of a run and one event source, as two
    n×n blobs (``matrix_blobs``: narrow, sparse or "same as sent"): what senders reported sending
    and what receivers reported receiving (equal when the job is consistent; a mismatch is a
    finding, not an error)."""

    # (no database constraint: see EventBlock.run)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="matrices", db_index=False, db_constraint=False
    )

    class Meta:
        verbose_name_plural = "traffic matrices"
        constraints = [
            models.UniqueConstraint(
                fields=("run", "source", "step", "layer", "phase"), name="jobs_matrix_unique"
            )
        ]
        # Covering: the phase views ask which matrices a window of steps has (and how many calls
        # each holds) on every update. SQLite keeps a row's columns in order, so reading ``calls``
        # or ``run_id`` from the table walks the overflow pages of both blobs before it (about
        # 1 MB a row at 256 ranks); from this index it reads no blob at all.
        indexes = [
            models.Index(
                fields=("run", "step", "layer", "phase", "source", "n_ranks", "calls"),
                name="jobs_matrix_window",
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} step {self.step} layer {self.layer} {self.phase}"

    def sent_array(self) -> np.ndarray:
        return matrix_blobs.decode(self.sent, self.n_ranks)

    def received_array(self) -> np.ndarray:
        """(a consistent job's received matrix is stored as "same as sent": both are read then)"""
        if bytes(self.received[:6]) == matrix_blobs.SAME_AS_SENT:
            return self.sent_array()
        return matrix_blobs.decode(self.received, self.n_ranks)


class MatrixPart(_MatrixCells):
    """Bytes a batch added to a ``TrafficMatrix`` of many ranks, kept beside it until folded in
    (``matrix_parts``). Rewriting a 5,632-rank matrix (11 MB a blob) for every batch made a
    run's ingest quadratic in its ranks: parts are appended, and folded in when they would reach
    ``matrix_parts.FOLD_RATIO`` times the stored row's size (so each row is rewritten a
    logarithmic number of times) or before an on-demand reader reads the run's matrices
    (``matrix_parts.settle``; the live phase views sum them in without writing). Same columns and
    blob layout as ``TrafficMatrix``."""

    # (no database constraint: see EventBlock.run)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="matrix_parts", db_index=False, db_constraint=False
    )

    class Meta:
        # no blob is read to find a key's parts or their size (SQLite reads length() from the
        # record header)
        indexes = [
            models.Index(fields=("run", "step", "layer", "phase", "source"), name="jobs_matrixpart_key")
        ]

    def __str__(self) -> str:
        return f"part of {self.source} step {self.step} layer {self.layer} {self.phase}"


class ApiToken(models.Model):
    """A per-user ingest token. Only ``prefix`` (for lookup) and an HMAC of the whole token are
    stored; the token itself is shown once at creation (see ``tokens.issue_token``)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="")
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class TraceUpload(models.Model):
    """One trace file import and how far it got: ``queued`` (saved at ``path``, waiting for a
    worker), ``running`` (``bytes_read`` of ``size_bytes`` read so far, counts so far), ``done``
    or ``failed`` (``error`` says why). Small uploads and the CLI import in the caller's process
    and are ``running`` only while it does."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="uploads")
    kind = models.CharField(max_length=16)  # kineto | fr | fr_pickle | inspector
    filename = models.CharField(max_length=255, default="")
    rank = models.PositiveIntegerField(null=True, blank=True)  # Flight Recorder dumps name none
    size_bytes = models.BigIntegerField(default=0)
    state = models.CharField(max_length=8, choices=State.choices, default=State.DONE)
    bytes_read = models.BigIntegerField(default=0)
    events_stored = models.PositiveIntegerField(default=0)
    events_duplicate = models.PositiveIntegerField(default=0)
    events_rejected = models.PositiveIntegerField(default=0)
    error = models.TextField(default="", blank=True)
    # collectors.traces.report.ImportReport.as_dict(): what was recognised, unusable, ignored
    report = models.JSONField(default=dict, blank=True)
    files_total = models.PositiveIntegerField(default=0)  # traces in a job's folder or archive
    files_done = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=500, default="", blank=True)  # the saved file while queued/running
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} {self.filename} ({self.state})"

    def as_dict(self) -> dict[str, object]:
        """The upload's progress as the API and the run page show it."""
        return {
            "upload": self.pk,
            "run": self.run_id,
            "kind": self.kind,
            "filename": self.filename,
            "state": self.state,
            "size_bytes": self.size_bytes,
            "bytes_read": self.bytes_read,
            "events_stored": self.events_stored,
            "events_duplicate": self.events_duplicate,
            "events_rejected": self.events_rejected,
            "error": self.error,
            "files_total": self.files_total,
            "files_done": self.files_done,
            "report": self.report,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }
