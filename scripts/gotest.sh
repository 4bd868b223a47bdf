#!/usr/bin/env bash
# go test -v with its arguments, the whole output kept in a file; what is
# printed is each test's result line with its time (where a long run's time
# went) and, when the run fails, the output of every test that failed or was
# running at a timeout (its last 300 lines) and the panic, if one ended the
# run (300 lines at most), or else the last 300 lines (a build failure).
# The exit status is go test's.
#
#   scripts/gotest.sh [go test flags] PACKAGE
set -uo pipefail
log=$(mktemp /tmp/gotest.XXXXXX)
${GO:-go} test -v "$@" >"$log" 2>&1
rc=$?
grep -E '^ *--- (PASS|FAIL|SKIP)|^(ok|FAIL|panic:)' "$log"
if ((rc != 0)); then
  # Failed, or running when the run timed out ("running tests:" lists them).
  tests=$( (grep -E '^--- FAIL: ' "$log" | awk '{print $3}'
    sed -n '/^[[:space:]]*running tests:$/,/^$/p' "$log" | awk 'NR > 1 && NF {print $1}') | sort -u)
  for t in $tests; do
    echo "--- the output of $t (its last 300 lines)"
    awk -v t="$t" '$0 == "=== RUN   " t { on = 1 } /^panic: / { on = 0 } on { print } index($0, "--- FAIL: " t " ") == 1 { on = 0 }' "$log" | tail -n 300
  done
  if grep -q '^panic: ' "$log"; then
    echo "--- the panic (300 lines at most)"
    sed -n '/^panic: /,$p' "$log" | head -n 300
  elif [[ -z $tests ]]; then
    echo "--- the last 300 lines"
    tail -n 300 "$log"
  fi
fi
echo "(the whole output: $log)"
exit $rc
