"""The models and their migrations agree: a model change without its migration fails here, not
on a user's first ``migrate`` (a help text drifted unnoticed once)."""

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration() -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
