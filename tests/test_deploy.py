"""Deployment, through the real entry point (``manage.py`` in a subprocess with only the environment
given here): ``check --deploy`` is clean with the README's production settings and names what is
missing without them; no start without SECRET_KEY unless DEBUG; a bad FABRICMON_SECRETS_KEY is
refused without being echoed; the SQLite file and its WAL/SHM are 0600; the data migrations seal
the plaintext an older version stored (read back with the sqlite3 module) and unseal it on the
way back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.secret_env import TEST_SECRETS_KEY

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]
STRONG_KEY = "k7Hq2vX9pL4mN8rT1wZ6yB3cF5gJ0dS-aE_uIoPlKjMnBvCxZq"  # 50 characters, as check --deploy wants
# The README's production settings (behind a TLS-terminating proxy that sets X-Forwarded-Proto).
PRODUCTION = {
    "SECRET_KEY": STRONG_KEY,
    "FABRICMON_SECRETS_KEY": TEST_SECRETS_KEY,
    "ALLOWED_HOSTS": "fabricmon.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://fabricmon.example.com",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto,https",
    "SESSION_COOKIE_SECURE": "true",
    "CSRF_COOKIE_SECURE": "true",
}
PLAIN = {"community": "plain-community-1", "auth": "plain-auth-key-22", "priv": "plain-priv-key-333",
         "url": "https://hooks.slack.com/services/T1/B2/plainhooktoken", "secret": "whsec_plainsecret4444"}


def manage(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` with nothing of this process's environment but PATH (umask 022, the usual)."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "FABRICMON_VAR_DIR": str(tmp), **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=120, check=False, umask=0o022)


def test_check_deploy_is_clean_with_the_documented_settings(tmp_path: Path) -> None:
    clean = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "System check identified no issues (0 silenced)." in clean.stdout
    bare = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", SECRET_KEY=STRONG_KEY)
    assert bare.returncode == 1
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016", "fabricmon.W001"):
        assert warning in bare.stderr, bare.stderr


def test_no_start_without_secret_key_unless_debug(tmp_path: Path) -> None:
    refused = manage(tmp_path, "check")
    assert refused.returncode == 1
    assert "ImproperlyConfigured: SECRET_KEY is not set: give the SECRET_KEY environment variable" in refused.stderr
    assert manage(tmp_path, "check", DEBUG="true").returncode == 0
    key_file = tmp_path / "key"
    key_file.write_text(STRONG_KEY + "\n")
    assert manage(tmp_path, "check", SECRET_KEY_FILE=str(key_file)).returncode == 0


def test_a_bad_secrets_key_is_refused_without_being_echoed(tmp_path: Path) -> None:
    bad = "not-a-fernet-key-but-secret-material"
    refused = manage(tmp_path, "check", SECRET_KEY=STRONG_KEY, FABRICMON_SECRETS_KEY=f"{TEST_SECRETS_KEY},{bad}")
    assert refused.returncode == 1
    assert "FABRICMON_SECRETS_KEY: key 2 of 2 is not a Fernet key" in refused.stderr
    assert bad not in refused.stderr


def test_database_files_are_owner_only_and_old_plaintext_is_sealed(tmp_path: Path) -> None:
    env = {"SECRET_KEY": STRONG_KEY, "FABRICMON_SECRETS_KEY": TEST_SECRETS_KEY}
    # the schema of the version before sealing, with its plaintext rows
    for app, migration in (("topology", "0002_switch_gnmi"), ("alerts", "0003_episode_family")):
        done = manage(tmp_path, "migrate", app, migration, **env)
        assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "db.sqlite3"
    assert oct(db.stat().st_mode & 0o777) == "0o600"  # created 0600 although the umask was 022
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO topology_fabric (name, description, topology_version, created, updated) "
                    "VALUES ('old', '', '', '2026-01-01', '2026-01-01')")
        con.execute(
            "INSERT INTO topology_switch (fabric_id, name, role, mgmt_address, collector, snmp_version, snmp_port, "
            "snmp_community, v3_user, v3_auth_protocol, v3_auth_key, v3_priv_protocol, v3_priv_key, v3_context, "
            "interval_s, timeout_s, retries, gnmi_sample_interval_s) VALUES (1, 'leaf-r0', 'leaf', '10.0.0.1', "
            "'snmp', '3', 161, ?, 'mon', 'SHA', ?, 'AES', ?, '', 1.0, 0.3, 1, 1.0)",
            (PLAIN["community"], PLAIN["auth"], PLAIN["priv"]))
        con.execute("INSERT INTO alerts_receiver (name, kind, url, secret, fabric, kinds, send_resolved, disabled, "
                    "last_error) VALUES ('hook', 'webhook', ?, ?, '', '[]', 1, 0, '')", (PLAIN["url"], PLAIN["secret"]))
    os.chmod(db, 0o644)  # as an older version left it
    done = manage(tmp_path, "migrate", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert oct(db.stat().st_mode & 0o777) == "0o600"  # narrowed on the next connection
    stored = raw_secrets(db)
    assert not set(stored) & set(PLAIN.values())
    fernet = Fernet(TEST_SECRETS_KEY.encode())
    assert [fernet.decrypt(t.encode()).decode() for t in stored] == list(PLAIN.values())
    shown = manage(tmp_path, "shell", "-c", REVEAL, **env)
    *revealed, wal_mode, shm_mode = shown.stdout.strip().splitlines()[-1].split()
    assert revealed == list(PLAIN.values()), shown.stderr
    assert (wal_mode, shm_mode) == ("0o600", "0o600")  # while the product's connection has them open
    back = manage(tmp_path, "migrate", "topology", "0002_switch_gnmi", **env)
    assert back.returncode == 0, back.stderr
    back = manage(tmp_path, "migrate", "alerts", "0003_episode_family", **env)
    assert back.returncode == 0, back.stderr
    assert raw_secrets(db) == list(PLAIN.values())


REVEAL = (
    "import os; from django.db import connection; from fabricmon.base.sealed import reveal; "
    "from fabricmon.topology.models import Switch; from fabricmon.alerts.models import Receiver; "
    "s = Switch.objects.get(); r = Receiver.objects.get(); db = str(connection.settings_dict['NAME']); "
    "print(*map(reveal, (s.snmp_community, s.v3_auth_key, s.v3_priv_key, r.url, r.secret)), "
    "*(oct(os.stat(db + x).st_mode & 0o777) for x in ('-wal', '-shm')))"
)


def raw_secrets(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        switch = con.execute("SELECT snmp_community, v3_auth_key, v3_priv_key FROM topology_switch").fetchone()
        receiver = con.execute("SELECT url, secret FROM alerts_receiver").fetchone()
    return [*switch, *receiver]
