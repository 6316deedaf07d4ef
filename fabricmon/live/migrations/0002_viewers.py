"""The read-only role: viewers see the fabric and the alerts, below operators and admins."""

from django.db import migrations


def create_viewers(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="viewers")


def remove_viewers(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="viewers").delete()


class Migration(migrations.Migration):
    dependencies = [("live", "0001_roles")]
    operations = [migrations.RunPython(create_viewers, remove_viewers)]
