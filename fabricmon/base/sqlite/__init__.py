"""Django's SQLite backend, with the database file and its WAL/SHM files owner-only (``base.py``)."""
