"""pytest's settings: the product's own (fabricmon/settings.py), with the test keys given.

pytest-django imports the settings before any conftest runs, so the environment is set here:
``SECRET_KEY`` and ``FABRICMON_SECRETS_KEY`` (tests/secret_env.py) go into ``os.environ``, where
every server, worker and ``manage.py`` the tests start inherits them. Those children load
``fabricmon.settings`` itself (DJANGO_SETTINGS_MODULE is put back), exactly as in production.
"""

import os

from tests import secret_env

secret_env.apply(os.environ)
os.environ["DJANGO_SETTINGS_MODULE"] = "fabricmon.settings"

from fabricmon.settings import *  # noqa: E402, F403

