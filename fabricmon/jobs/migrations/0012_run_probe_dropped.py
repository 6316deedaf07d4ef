"""Run.probe_dropped: events the job's probe posters dropped before they reached the server,
per poster session (see the field's comment)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0011_matrix_window_index")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="probe_dropped",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
