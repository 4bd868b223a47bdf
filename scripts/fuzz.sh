#!/usr/bin/env bash
# fuzz.sh FUZZTIME Target:./package ... — runs each fuzz target for FUZZTIME.
#
# A target fails on what fuzzing found: a failing input (written to the
# package's testdata/fuzz), a panic, a test error. Go's fuzzing coordinator
# (up to Go 1.26) can also end a clean run with a bare "context deadline
# exceeded" when -fuzztime expires while a worker is mid-call (golang/go#75804,
# fixed in Go 1.27); that alone, with no input written, is run again once, and
# fails if it happens twice.
set -uo pipefail
GO=${GO:-go}
fuzztime=$1
shift
failed=()
for spec in "$@"; do
	target=${spec%%:*} pkg=${spec#*:}
	for try in 1 2; do
		log=$(mktemp)
		"$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		if [ "$rc" = 0 ]; then
			rm -f "$log"
			break
		fi
		# The coordinator's race: the failure's only line is the deadline.
		if [ "$try" = 1 ] && ! grep -q 'Failing input written\|^panic:\|_test\.go:[0-9]' "$log" &&
			grep -A1 -- "^--- FAIL: ${target} " "$log" | tail -n1 | grep -qx '    context deadline exceeded'; then
			echo "fuzz.sh: ${target}: a bare 'context deadline exceeded' at the end of -fuzztime, no input found (golang/go#75804): running it again"
			rm -f "$log"
			continue
		fi
		rm -f "$log"
		failed+=("$target")
		break
	done
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz.sh: failed: ${failed[*]}"
	exit 1
fi
