"""RecentKeyBatch replaces RecentEventKey (see its docstring): the recent claimed keys are one
sorted blob per batch instead of one B-tree row per key. Keys still in RecentEventKey move to
EventKey first (disjoint by construction), so no claim is lost."""

import django.db.models.deletion
from django.db import migrations, models


def _move_recent_keys(apps, schema_editor):  # noqa: ANN001
    quote = schema_editor.connection.ops.quote_name
    big, recent = quote("jobs_eventkey"), quote("jobs_recenteventkey")
    schema_editor.execute(
        f"INSERT INTO {big} (run_id, id_hash) SELECT run_id, id_hash FROM {recent} ORDER BY run_id, id_hash"
    )
    schema_editor.execute(f"DELETE FROM {recent}")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_recent_event_keys")]

    operations = [
        migrations.CreateModel(
            name="RecentKeyBatch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hashes", models.BinaryField()),
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
        migrations.RunPython(_move_recent_keys, migrations.RunPython.noop),
        migrations.DeleteModel(name="RecentEventKey"),
    ]
