"""Fewer B-trees per ingested event: drop the run_id indexes that a composite index or unique key
already starts with, and on SQLite rebuild ``jobs_eventkey`` as a ``WITHOUT ROWID`` table (the
(run_id, id_hash) key is the table itself: one B-tree insert per event instead of three — rowid
table, primary-key index, run_id index). A later AlterField on EventKey would let Django rebuild
the table as a rowid table again: repeat the rebuild below in that migration."""

import django.db.models.deletion
from django.db import migrations, models

_REBUILD = (
    'CREATE TABLE "jobs_eventkey__new" ("run_id" bigint NOT NULL, "id_hash" bigint NOT NULL, '
    'PRIMARY KEY ("run_id", "id_hash")) WITHOUT ROWID',
    'INSERT INTO "jobs_eventkey__new" ("run_id", "id_hash") SELECT "run_id", "id_hash" FROM "jobs_eventkey"',
    'DROP TABLE "jobs_eventkey"',
    'ALTER TABLE "jobs_eventkey__new" RENAME TO "jobs_eventkey"',
)


def _without_rowid(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "sqlite":
        for sql in _REBUILD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0003_eventblock_storage")]

    operations = [
        migrations.AlterField(
            model_name="eventblock",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="event_blocks",
                to="jobs.run",
            ),
        ),
        migrations.AlterField(
            model_name="eventblockkey",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="event_block_keys",
                to="jobs.run",
            ),
        ),
        migrations.AlterField(
            model_name="eventkey",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="jobs.run",
            ),
        ),
        migrations.AlterField(
            model_name="trafficmatrix",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="matrices",
                to="jobs.run",
            ),
        ),
        migrations.RunPython(_without_rowid, migrations.RunPython.noop),
    ]
