"""The keys the tests and benches run with, set explicitly (the product refuses to start without a
SECRET_KEY unless DEBUG is on). Public test values: never use them anywhere else."""

from __future__ import annotations

from collections.abc import MutableMapping

TEST_SECRET_KEY = "fabricmon-tests-only-secret-key-not-for-production-5f0c1e"
# Fernet.generate_key() once; a fixed key keeps databases made by one test process readable by another.
TEST_SECRETS_KEY = "Q2S8hZr3u1m6mYt4H0xv8Qn9b2c5d7e1f3g5h7j9k0E="


def apply(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Give ``env`` the test keys where it has none (an explicitly set key wins)."""
    if not env.get("SECRET_KEY") and not env.get("SECRET_KEY_FILE"):
        env["SECRET_KEY"] = TEST_SECRET_KEY
    if not env.get("FABRICMON_SECRETS_KEY") and not env.get("FABRICMON_SECRETS_KEY_FILE"):
        env["FABRICMON_SECRETS_KEY"] = TEST_SECRETS_KEY
    return env
