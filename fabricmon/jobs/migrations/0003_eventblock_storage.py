"""PostgreSQL: store event blocks uncompressed (STORAGE EXTERNAL). The blocks are already compact
narrowed columns; pglz on every ~100 KB insert cost more CPU than the ingest itself.
No-op elsewhere."""

from django.db import migrations


def _external(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute('ALTER TABLE "jobs_eventblock" ALTER COLUMN "columns" SET STORAGE EXTERNAL')


class Migration(migrations.Migration):
    dependencies = [("jobs", "0002_event_blocks")]

    operations = [migrations.RunPython(_external, migrations.RunPython.noop)]
