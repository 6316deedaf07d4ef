#!/usr/bin/env bash
# `make test`: the whole suite on both cores. Integration tests need a Redis (REDIS_URL, default
# 127.0.0.1:6379), net-snmp and chromium: .ci/run installs and starts them on a fresh machine.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p test-output
"$PY" -m pytest -n "${PYTEST_WORKERS:-2}" --durations=15 "$@"
rc=$?
# pytest exits 5 when a selection holds no tests: that is not a failure of the code under test.
if [ "$rc" -eq 5 ]; then echo "no tests selected"; exit 0; fi
exit "$rc"
