"""SNMP community and v3 keys encrypted at rest (fabricmon/base/sealed.py): the columns become
token columns and the plaintext already stored is sealed in place (reversible)."""

from django.db import migrations

import fabricmon.base.sealed

COLUMNS = ("snmp_community", "v3_auth_key", "v3_priv_key")


def seal(apps, schema_editor):
    table = apps.get_model("topology", "Switch")._meta.db_table
    fabricmon.base.sealed.seal_columns(schema_editor, table, COLUMNS)


def unseal(apps, schema_editor):
    table = apps.get_model("topology", "Switch")._meta.db_table
    fabricmon.base.sealed.unseal_columns(schema_editor, table, COLUMNS)


class Migration(migrations.Migration):

    dependencies = [
        ("topology", "0002_switch_gnmi"),
    ]

    operations = [
        migrations.AlterField(
            model_name="switch",
            name="snmp_community",
            field=fabricmon.base.sealed.SealedField(blank=True, default="public", max_length=255),
        ),
        migrations.AlterField(
            model_name="switch",
            name="v3_auth_key",
            field=fabricmon.base.sealed.SealedField(blank=True, default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="switch",
            name="v3_priv_key",
            field=fabricmon.base.sealed.SealedField(blank=True, default="", max_length=255),
        ),
        migrations.RunPython(seal, unseal),
    ]
