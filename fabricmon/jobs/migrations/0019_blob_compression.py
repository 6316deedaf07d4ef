"""PostgreSQL: the blob columns of event blocks and traffic matrices are compressed with lz4, not
pglz (the default): a 5,632-rank job's matrices are ~11 MB blobs rewritten as they grow, and pglz
spent ~200 µs of backend CPU an event compressing them (bench/ingest_large.py). Rows already
stored keep their compression until rewritten. SQLite: nothing."""

from django.db import migrations

BLOBS = [
    ("jobs_eventblock", "columns"),
    ("jobs_eventblock", "peers"),
    ("jobs_trafficmatrix", "sent"),
    ("jobs_trafficmatrix", "received"),
    ("jobs_matrixpart", "sent"),
    ("jobs_matrixpart", "received"),
]


def _set(compression: str):
    def run(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for table, column in BLOBS:
            schema_editor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION {compression}')

    return run


class Migration(migrations.Migration):
    dependencies = [("jobs", "0018_matrix_parts")]

    operations = [migrations.RunPython(_set("lz4"), _set("pglz"))]
