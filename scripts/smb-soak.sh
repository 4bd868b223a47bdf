#!/usr/bin/env bash
# The SMB root and end-to-end tests, run again and again under a CPU hog (two
# busy loops, one per core of a 2-core machine), until one fails or N rounds
# pass. Needs root and the machine to itself: other root tests running beside it
# (mount namespaces copying this one's mounts) fail it for reasons of their own.
# About 12 minutes a round on a 2-core machine.
#
#   scripts/smb-soak.sh [N]     (default 20)
set -u
cd "$(dirname "$0")/.."
rounds=${1:-20}
GO=${GO:-go}
timeout 12h sh -c 'while :; do :; done' & h1=$!
timeout 12h sh -c 'while :; do :; done' & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
logs=$(mktemp -d /tmp/smb-soak.XXXXXX)
for i in $(seq 1 "$rounds"); do
  t0=$(date +%s)
  $GO test -count=1 -p 1 -timeout 30m -run TestSMB ./internal/dataplane/ >"$logs/$i.dataplane.log" 2>&1; rc1=$?
  $GO test -count=1 -p 1 -timeout 45m -run TestSMB -skip TestSMBTorture ./test/e2e/ >"$logs/$i.e2e.log" 2>&1; rc2=$?
  echo "round $i: dataplane=$rc1 e2e=$rc2 $(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if ((rc1 != 0 || rc2 != 0)); then
    echo "round $i failed: logs in $logs" >&2
    exit 1
  fi
done
echo "$rounds rounds passed; logs in $logs"
