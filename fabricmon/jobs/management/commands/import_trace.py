"""``manage.py import_trace RUN_ID KIND FILE [--rank R]``: stream a trace file into a run."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fabricmon.jobs import imports, validation
from fabricmon.jobs.models import Run


class Command(BaseCommand):
    help = "Import a Kineto trace, Flight Recorder dump or NCCL Inspector log into a run."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("run_id", type=int)
        parser.add_argument("kind", choices=imports.IMPORT_KINDS)
        parser.add_argument("file", type=Path)
        parser.add_argument("--rank", type=int, default=None, help="global rank (Flight Recorder files)")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        run = Run.objects.filter(pk=opts["run_id"]).first()
        if run is None:
            raise CommandError(f"no run {opts['run_id']}")
        path: Path = opts["file"]
        with path.open("rb") as stream:
            try:
                _upload, result = imports.import_trace(
                    run,
                    opts["kind"],
                    stream,
                    filename=path.name,
                    rank=opts["rank"],
                    size_bytes=path.stat().st_size,
                )
            except validation.InputError as exc:
                raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"stored {result.stored}, duplicates {result.duplicates}, rejected {len(result.rejected)}"
        )
        for err in result.rejected[:20]:
            self.stdout.write(f"  event {err.line}: {err.field}: {err.reason}")
