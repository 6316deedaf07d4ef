"""Receiver URLs (a chat hook URL is the credential) and webhook secrets encrypted at rest
(fabricmon/base/sealed.py): token columns, and the plaintext already stored sealed in place."""

from django.db import migrations

import fabricmon.base.sealed

COLUMNS = ("url", "secret")


def seal(apps, schema_editor):
    table = apps.get_model("alerts", "Receiver")._meta.db_table
    fabricmon.base.sealed.seal_columns(schema_editor, table, COLUMNS)


def unseal(apps, schema_editor):
    table = apps.get_model("alerts", "Receiver")._meta.db_table
    fabricmon.base.sealed.unseal_columns(schema_editor, table, COLUMNS)


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0005_rail_plan_violation_kind"),
    ]

    operations = [
        migrations.AlterField(
            model_name="receiver",
            name="url",
            field=fabricmon.base.sealed.SealedField(max_length=500),
        ),
        migrations.AlterField(
            model_name="receiver",
            name="secret",
            field=fabricmon.base.sealed.SealedField(
                blank=True, default="", help_text="whsec_… for signed webhooks", max_length=200
            ),
        ),
        migrations.RunPython(seal, unseal),
    ]
