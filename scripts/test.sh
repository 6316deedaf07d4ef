#!/usr/bin/env bash
# `make test`: the whole suite on both cores. Integration tests need a Redis (REDIS_URL, default
# 127.0.0.1:6379), net-snmp, prometheus-snmp-exporter, prometheus-alertmanager and chromium:
# .ci/run installs and starts them on a fresh machine.
#
# Two pytest runs: browser tests apart from the rest. Playwright's sync API keeps an asyncio
# loop marked as running in its worker's main thread for as long as the browser lives, and every
# later test in that worker that calls asyncio.run() (collectors, twin, gNMI) would then fail.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p test-output
passed=0; failed=0; status=0

run() {  # run <label> <pytest args…>
  local label=$1; shift
  local log="test-output/pytest-$label.log"
  "$PY" -m pytest -n "${PYTEST_WORKERS:-2}" --durations=15 "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  # pytest exits 5 when a selection holds no tests: not a failure of the code under test.
  [ "$rc" -eq 5 ] && rc=0
  [ "$rc" -ne 0 ] && status=$rc
  local summary; summary=$(tail -n 1 "$log")
  passed=$((passed + $(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)))
  local n
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | grep -oE '^[0-9]+'); do failed=$((failed + n)); done
}

run main -m "not e2e and not soak" "$@"
run e2e -m "e2e and not soak" "$@"
# the soak needs the machine to itself: alone, after the others (bench/soak.py for 8 minutes)
PYTEST_WORKERS=1 run soak -m soak "$@"
echo "all suites: $passed passed, $failed failed"
exit "$status"
