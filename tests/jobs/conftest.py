"""The jobs tests' database fixtures (``pg_database.py``), for every module here."""

from tests.jobs.pg_database import database_url, pg_database_url  # noqa: F401  (fixtures)
