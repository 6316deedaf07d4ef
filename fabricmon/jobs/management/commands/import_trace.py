"""``manage.py import_trace RUN_ID KIND PATH [--rank R]``: stream a trace file, a job's archive
(tar/zip of one trace per rank) or a folder of them into a run, and print the import report."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from collectors.traces.report import ImportReport
from fabricmon.jobs import imports, validation
from fabricmon.jobs.models import Run


class Command(BaseCommand):
    help = "Import Kineto traces, Flight Recorder dumps or NCCL Inspector logs (a file, archive or folder)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("run_id", type=int)
        parser.add_argument("kind", choices=imports.IMPORT_KINDS)
        parser.add_argument("file", type=Path, help="a trace, a tar/zip of one per rank, or a folder of them")
        parser.add_argument("--rank", type=int, default=None, help="global rank, when the file says none")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        run = Run.objects.filter(pk=opts["run_id"]).first()
        if run is None:
            raise CommandError(f"no run {opts['run_id']}")
        path: Path = opts["file"]
        try:
            if path.is_dir():
                upload, result = imports.import_folder(run, opts["kind"], path)
            else:
                with path.open("rb") as stream:
                    upload, result = imports.import_trace(
                        run, opts["kind"], stream, filename=path.name, rank=opts["rank"],
                        size_bytes=path.stat().st_size,
                    )
        except validation.InputError as exc:
            raise CommandError(str(exc)) from exc
        for line in ImportReport.from_dict(upload.report or {}).lines():
            self.stdout.write(line)
        self.stdout.write(
            f"stored {result.stored}, duplicates {result.duplicates}, rejected {len(result.rejected)}"
        )
        for err in result.rejected[:20]:
            self.stdout.write(f"  event {err.line}: {err.field}: {err.reason}")
