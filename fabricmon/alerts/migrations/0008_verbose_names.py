"""Readable admin labels: an alert state change, the outbox (not "Outboxs")."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0007_notification_groups"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="alerttransition",
            options={"ordering": ("at", "id"), "verbose_name": "alert state change"},
        ),
        migrations.AlterModelOptions(
            name="outbox",
            options={"ordering": ("created_at", "id"), "verbose_name": "outbox entry", "verbose_name_plural": "outbox"},
        ),
    ]
