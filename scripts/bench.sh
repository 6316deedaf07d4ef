#!/usr/bin/env bash
# `make bench`: every benchmark in bench/, one after another (they compete for the same 2 cores
# otherwise). Each ends with a `BENCH <name> key=value …` line; the summary repeats those lines.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p test-output
out=test-output/bench.txt
: > "$out"
status=0
for script in bench/*.py; do
  case "$(basename "$script")" in _*) continue ;; esac
  echo "== $script" | tee -a "$out"
  "$PY" "$script" 2>&1 | tee -a "$out" || status=1
done
echo "== summary"
grep '^BENCH ' "$out" || true
exit $status
