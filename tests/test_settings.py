"""The settings helpers behind the deploy settings: the proxy SSL header in either spelling, Fernet
keys checked at start (never echoed), SECRET_KEY required unless DEBUG, lists from ``NAME_FILE``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from fabricmon.settings import env_list, fernet_keys, proxy_ssl_header, secret_key


@pytest.mark.parametrize(("raw", "parsed"), [
    ("", None),
    ("X-Forwarded-Proto,https", ("HTTP_X_FORWARDED_PROTO", "https")),
    ("HTTP_X_FORWARDED_PROTO, https", ("HTTP_X_FORWARDED_PROTO", "https")),
    ("x-forwarded-ssl,on", ("HTTP_X_FORWARDED_SSL", "on")),
])
def test_proxy_ssl_header(monkeypatch: pytest.MonkeyPatch, raw: str, parsed: tuple[str, str] | None) -> None:
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", raw)
    assert proxy_ssl_header("SECURE_PROXY_SSL_HEADER") == parsed


def test_proxy_ssl_header_without_a_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto")
    with pytest.raises(ImproperlyConfigured, match=r"SECURE_PROXY_SSL_HEADER: expected 'HEADER,VALUE'"):
        proxy_ssl_header("SECURE_PROXY_SSL_HEADER")


def test_fernet_keys_from_a_list_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    a, b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("FABRICMON_SECRETS_KEY", f"{a}, {b}")
    assert fernet_keys("FABRICMON_SECRETS_KEY") == [a, b]
    (tmp_path / "keys").write_text(f"{b}\n{a}\n")
    monkeypatch.setenv("FABRICMON_SECRETS_KEY_FILE", str(tmp_path / "keys"))
    assert fernet_keys("FABRICMON_SECRETS_KEY") == [b, a]
    monkeypatch.setenv("FABRICMON_SECRETS_KEY_FILE", "")
    monkeypatch.setenv("FABRICMON_SECRETS_KEY", f"{a},c2hvcnQ=")  # base64 of 5 bytes
    with pytest.raises(ImproperlyConfigured, match="key 2 of 2 is not a Fernet key") as info:
        fernet_keys("FABRICMON_SECRETS_KEY")
    assert "c2hvcnQ=" not in str(info.value) and a not in str(info.value)


def test_secret_key_is_required_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("SECRET_KEY_FILE", raising=False)
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is not set"):
        secret_key(debug=False)
    assert secret_key(debug=True) == "dev-only-not-secret-change-me"
    monkeypatch.setenv("SECRET_KEY", "from-the-environment")
    assert secret_key(debug=False) == "from-the-environment"


def test_env_list_reads_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("a.example.com\nb.example.com,c.example.com\n")
    monkeypatch.setenv("ALLOWED_HOSTS_FILE", str(tmp_path / "hosts"))
    assert env_list("ALLOWED_HOSTS", []) == ["a.example.com", "b.example.com", "c.example.com"]
