#!/usr/bin/env bash
# The SMB root and end-to-end tests, run again and again under a CPU hog (two
# busy loops, one per core of a 2-core machine), until one fails or N rounds
# pass in a row. Needs root and the machine to itself: other root tests running
# beside it (mount namespaces copying this one's mounts) fail it for reasons of
# their own. About 12 minutes a round on a 2-core machine.
#
#   scripts/smb-soak.sh [N] [STATE]     (default 20, no state file)
#
# With STATE, the row survives the soak's end: each passed round is appended
# to STATE with the commit it ran, and a later run on the same commit (and a
# clean tree) goes on from there; a failure, or another commit, starts the row
# again. A row so resumed says so, round by round. To end a soak without
# cutting a round short (which leaves its tests' mounts behind), create
# STATE.stop: the soak stops before its next round and removes it.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-20}
state=${2:-}
GO=${GO:-go}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit="$commit-dirty"
done=0
if [[ -n $state && -f $state ]]; then
  # Lines "COMMIT ROUND SECONDS DATE"; only the last row of this commit counts.
  done=$(awk -v c="$commit" '$1 == c { n = $2 } $1 != c { n = 0 } END { print n + 0 }' "$state")
  [[ $commit == *-dirty ]] && done=0
  ((done > 0)) && echo "resuming a row of $done passed rounds on $commit (from $state)"
fi
timeout 12h sh -c 'while :; do :; done' & h1=$!
timeout 12h sh -c 'while :; do :; done' & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
logs=$(mktemp -d /tmp/smb-soak.XXXXXX)
for ((i = done + 1; i <= rounds; i++)); do
  if [[ -n $state && -e $state.stop ]]; then
    rm -f "$state.stop"
    echo "stopped before round $i ($state.stop); $((i - 1)) rounds passed in a row so far"
    exit 0
  fi
  t0=$(date +%s)
  $GO test -count=1 -p 1 -timeout 30m -run TestSMB ./internal/dataplane/ >"$logs/$i.dataplane.log" 2>&1; rc1=$?
  $GO test -count=1 -p 1 -timeout 45m -run TestSMB -skip TestSMBTorture ./test/e2e/ >"$logs/$i.e2e.log" 2>&1; rc2=$?
  took=$(($(date +%s) - t0))
  echo "round $i: dataplane=$rc1 e2e=$rc2 $took s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if ((rc1 != 0 || rc2 != 0)); then
    [[ -n $state ]] && echo "$commit 0 $took $(date -u +%FT%TZ) failed" >>"$state"
    echo "round $i failed: logs in $logs" >&2
    exit 1
  fi
  [[ -n $state ]] && echo "$commit $i $took $(date -u +%FT%TZ)" >>"$state"
done
echo "$rounds rounds passed in a row; logs in $logs"
