"""RecentEventKey: the small table in front of EventKey (see its docstring), ``WITHOUT ROWID`` on
SQLite like EventKey (migration 0004). Unused on PostgreSQL, where a random B-tree insert is
WAL-logged as one small record rather than a whole dirty page per commit."""

import django.db.models.deletion
from django.db import migrations, models

_REBUILD = (
    'DROP TABLE "jobs_recenteventkey"',
    'CREATE TABLE "jobs_recenteventkey" ("run_id" bigint NOT NULL, "id_hash" bigint NOT NULL, '
    'PRIMARY KEY ("run_id", "id_hash")) WITHOUT ROWID',
)


def _without_rowid(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "sqlite":
        for sql in _REBUILD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0004_lean_event_indexes")]

    operations = [
        migrations.CreateModel(
            name="RecentEventKey",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "id_hash", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("id_hash", models.BigIntegerField()),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="jobs.run",
                    ),
                ),
            ],
        ),
        migrations.RunPython(_without_rowid, migrations.RunPython.noop),
    ]
