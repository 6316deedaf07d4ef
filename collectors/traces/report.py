"""What an import recognised, what it saw but could not use (and why), and what it ignored.

Every reader fills one ``ImportReport`` as it goes; a whole-job import merges one per file. The
report is plain data (``as_dict`` / ``from_dict``) so it can be stored on the upload row, shown on
the run page and printed by ``import_trace`` (``lines``). A file that shows collectives but yields
no event is an error carrying its report (``check_not_silent``): never a silent zero.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from collectors.traces.errors import TraceFormatError

MAX_FILES_LISTED = 512  # per-file lines kept in a job's report (the counts cover every file)


@dataclass
class Recognised:
    """One (collective, evidence) row: calls, message bytes, and how many lacked sizes or peers."""

    count: int = 0
    bytes: int = 0
    without_bytes: int = 0
    with_peers: int = 0

    def add(self, other: Recognised) -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.without_bytes += other.without_bytes
        self.with_peers += other.with_peers


@dataclass
class ImportReport:
    """Counts per (collective, evidence) and per time kind; reasons for what was not used."""

    kind: str = ""
    recognised: dict[tuple[str, str], Recognised] = field(default_factory=dict)
    time_kinds: Counter[str] = field(default_factory=Counter)
    unusable: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    steps: set[int] = field(default_factory=set)
    labelled: int = 0  # events given a layer and phase
    files: list[dict[str, Any]] = field(default_factory=list)
    evidence_seen: int = 0  # collective-looking records seen in the file(s), used or not

    @property
    def events(self) -> int:
        return sum(r.count for r in self.recognised.values())

    def recognise(self, collective: str, evidence: str, nbytes: int | None, peers: bool) -> None:
        row = self.recognised.setdefault((collective, evidence), Recognised())
        row.count += 1
        row.bytes += nbytes or 0
        row.without_bytes += nbytes is None
        row.with_peers += peers

    def merge(self, other: ImportReport) -> None:
        for key, row in other.recognised.items():
            self.recognised.setdefault(key, Recognised()).add(row)
        self.time_kinds.update(other.time_kinds)
        self.unusable.update(other.unusable)
        self.ignored.update(other.ignored)
        self.notes.update(other.notes)
        self.steps |= other.steps
        self.labelled += other.labelled
        self.evidence_seen += other.evidence_seen
        room = MAX_FILES_LISTED - len(self.files)
        self.files.extend(other.files[: max(room, 0)])

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "events": self.events,
            "recognised": [
                {"collective": c, "evidence": e, **vars(r)} for (c, e), r in sorted(self.recognised.items())
            ],
            "time_kinds": dict(self.time_kinds.most_common()),
            "unusable": dict(self.unusable.most_common()),
            "ignored": dict(self.ignored.most_common()),
            "notes": dict(self.notes.most_common()),
            "steps": sorted(self.steps)[:10_000],
            "labelled": self.labelled,
            "evidence_seen": self.evidence_seen,
            "files": self.files,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImportReport:
        report = cls(kind=str(data.get("kind", "")))
        for row in data.get("recognised", []):
            report.recognised[(row["collective"], row["evidence"])] = Recognised(
                row["count"], row["bytes"], row["without_bytes"], row["with_peers"]
            )
        for name in ("time_kinds", "unusable", "ignored", "notes"):
            getattr(report, name).update(data.get(name, {}))
        report.steps = set(data.get("steps", []))
        report.labelled = int(data.get("labelled", 0))
        report.evidence_seen = int(data.get("evidence_seen", 0))
        report.files = list(data.get("files", []))
        return report

    def lines(self) -> list[str]:
        """The report as text, for ``import_trace`` and error messages."""
        out = [f"recognised {self.events:,} collective calls"]
        for (coll, evidence), r in sorted(self.recognised.items()):
            extra = []
            if r.without_bytes:
                extra.append(f"{r.without_bytes:,} without message sizes")
            if r.with_peers:
                extra.append(f"{r.with_peers:,} with per-peer bytes")
            tail = f" ({'; '.join(extra)})" if extra else ""
            out.append(f"  {coll} from {evidence}: {r.count:,} calls, {r.bytes:,} bytes{tail}")
        if self.time_kinds:
            out.append("timed by: " + ", ".join(f"{k} {n:,}" for k, n in self.time_kinds.most_common()))
        if self.steps:
            out.append(
                f"steps: {len(self.steps):,} ({min(self.steps)}..{max(self.steps)}); "
                f"{self.labelled:,} calls with a layer and phase"
            )
        for title, counts in (
            ("seen but not used", self.unusable),
            ("notes", self.notes),
            ("ignored", self.ignored),
        ):
            if counts:
                out.append(f"{title}:")
                out.extend(f"  {n:,} {what}" for what, n in counts.most_common(20))
        for f in self.files[:50]:
            out.append("file " + ", ".join(f"{k} {v}" for k, v in f.items()))
        return out


def check_not_silent(report: ImportReport, what: str) -> None:
    """Zero events from a file that shows collectives is an error with the report, not a success."""
    if report.events == 0 and (report.evidence_seen or report.unusable):
        raise TraceFormatError(
            f"{what}: collectives seen but none could be imported\n" + "\n".join(report.lines())
        )
