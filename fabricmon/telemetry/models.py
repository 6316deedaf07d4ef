"""Telemetry rows: the downsampled history of frames (the live window itself lives in Redis)."""

from __future__ import annotations

from django.db import models

from fabricmon.core.telemetry.frames import Frame


class HistoryFrame(models.Model):
    """One fabric's frames over one history step, downsampled to one encoded frame.

    The blob is a :class:`~fabricmon.core.telemetry.frames.Frame` (ts = end of the step) holding, per port,
    the mean of every metric over the step's frames (NaN samples ignored; NaN if the port had no
    data at all) plus ``util_max`` — the highest utilisation seen, so a short hotspot survives the
    averaging. Arrays follow the port index named by ``topology_version``; after re-cabling, old
    rows stay readable through ``topology.TopologyVersion``::

        live window (Redis, 1 s frames, minutes) ──every step──▶ HistoryFrame (DB, one row per step)
    """

    fabric = models.ForeignKey("topology.Fabric", on_delete=models.CASCADE, related_name="history_frames")
    topology_version = models.CharField(max_length=40)
    ts = models.DateTimeField(help_text="start of the step")
    step_s = models.FloatField(help_text="length of the step in seconds")
    n_samples = models.PositiveIntegerField(help_text="frames averaged into this row")
    blob = models.BinaryField(help_text="encoded core.telemetry.frames.Frame of per-port means (+ util_max)")

    class Meta:
        ordering = ["fabric", "ts"]
        indexes = [models.Index(fields=["fabric", "ts"], name="historyframe_fabric_ts")]
        constraints = [
            models.UniqueConstraint(fields=["fabric", "ts", "step_s", "topology_version"],
                                    name="historyframe_unique_step"),
        ]

    def __str__(self) -> str:
        return f"{self.fabric_id} @ {self.ts:%Y-%m-%d %H:%M:%S} ({self.step_s:g} s x {self.n_samples})"

    def frame(self) -> Frame:
        return Frame.decode(bytes(self.blob))
