"""How secrets are shown: ``••••`` + the last 4 of a long one, "set" for a short one, a URL's host
kept (which service) and its credential part masked."""

from __future__ import annotations

import pytest

from fabricmon.core.masking import MASK, is_masked, mask_text, shown_text


@pytest.mark.parametrize(("plain", "masked", "shown"), [
    ("", "", "not set"),
    ("public", MASK, "set"),
    ("eleven-char", MASK, "set"),  # 11 characters: showing 4 would give away over a third
    ("twelve-chars", "••••hars", "••••hars"),
    ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "••••LaSw", "••••LaSw"),
    ("https://hooks.slack.com/services/T000/B000/XXXXabcd", "https://hooks.slack.com/••••abcd",
     "https://hooks.slack.com/••••abcd"),
    ("http://user:pw@10.0.0.5:9093/api", "http://10.0.0.5:9093/••••/api", "http://10.0.0.5:9093/••••/api"),
    ("http://host:99999999/x-long-path", "••••path", "••••path"),  # not a URL Python can read: masked whole
])
def test_mask_and_shown(plain: str, masked: str, shown: str) -> None:
    assert mask_text(plain) == masked
    assert shown_text(plain) == shown
    assert not masked or is_masked(masked)


def test_credentials_never_survive_masking() -> None:
    url = "http://user:s3cretpw@am.internal:9093/api/v2/alerts?token=abcdef123456"
    out = mask_text(url)
    assert "s3cretpw" not in out and "user" not in out and "token=" not in out and "abcdef12" not in out
    assert out.startswith("http://am.internal:9093/")


def test_real_secrets_are_not_taken_for_masks() -> None:
    assert not is_masked("public") and not is_masked("https://hooks.slack.com/services/x")
