"""Readable admin labels: GPUs (not "Gpus")."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("topology", "0003_encrypt_switch_secrets"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="gpu",
            options={"ordering": ["host", "index"], "verbose_name": "GPU"},
        ),
    ]
