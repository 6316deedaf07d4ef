"""Readable admin labels: rank map entries, traffic matrices, recent key batches, API tokens."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0012_run_probe_dropped"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="apitoken",
            options={"verbose_name": "API token"},
        ),
        migrations.AlterModelOptions(
            name="rankmapentry",
            options={"ordering": ("run", "rank"), "verbose_name_plural": "rank map entries"},
        ),
        migrations.AlterModelOptions(
            name="recentkeybatch",
            options={"verbose_name_plural": "recent key batches"},
        ),
        migrations.AlterModelOptions(
            name="trafficmatrix",
            options={"verbose_name_plural": "traffic matrices"},
        ),
    ]
